"""rllib_fast: fast RL on GPU-vectorized simulators as Ray RLlib algorithms.

Importing the package registers every algorithm and env name with Ray Tune,
so ``tune.Tuner("FastPPO")`` and ``config.environment("CartPole")`` resolve.
"""
__version__ = "0.1.0"


def register() -> None:
    """Register rllib_fast algorithms and envs with Ray Tune.

    Ray has no plugin entry points, so a driver must import rllib_fast (or call
    this) before naming our algorithms; trial actors unpickle our classes by
    reference and import the package themselves. Tune's registry lives in the
    Ray cluster, per job: after ``ray.shutdown()`` + ``ray.init()`` the names
    are gone, so this checks the registry (not a process flag) and is cheap to
    call again.
    """
    from ray.tune import register_trainable
    from ray.tune.registry import TRAINABLE_CLASS, _global_registry

    from .algorithms import ALGORITHMS
    from .envs.gymnasium import register_rllib_gym_envs
    from .envs.registry import register_with_tune

    if all(_global_registry.contains(TRAINABLE_CLASS, name) for name in ALGORITHMS):
        return
    for name, cls in ALGORITHMS.items():
        register_trainable(name, cls)
    register_with_tune()
    register_rllib_gym_envs()  # "rllib-fast-gym:<name>": our tasks for RLlib's built-in algorithms


register()
