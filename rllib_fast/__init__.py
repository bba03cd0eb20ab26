"""rllib_fast: fast RL on GPU-vectorized simulators as Ray RLlib algorithms.

Importing the package registers every algorithm and env name with Ray Tune,
so ``tune.Tuner("FastPPO")`` and ``config.environment("CartPole")`` resolve.
"""
__version__ = "0.1.0"

_registered = False


def register() -> None:
    """Register rllib_fast algorithms and envs with Ray Tune (idempotent).

    Ray has no plugin entry points, so a driver must import rllib_fast (or call
    this) before naming our algorithms; trial actors unpickle our classes by
    reference and import the package themselves.
    """
    global _registered
    if _registered:
        return
    from ray.tune import register_trainable

    from .algorithms import ALGORITHMS
    from .envs.gymnasium import register_rllib_gym_envs
    from .envs.registry import register_with_tune

    for name, cls in ALGORITHMS.items():
        register_trainable(name, cls)
    register_with_tune()
    register_rllib_gym_envs()  # "rllib-fast-gym:<name>": our tasks for RLlib's built-in algorithms
    _registered = True


register()
