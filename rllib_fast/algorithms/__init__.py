"""Algorithm name -> class, registered with Tune by :func:`rllib_fast.register`.

Each algorithm family is a subpackage that exports two dicts, ``ALGORITHMS``
(name -> ``FastAlgorithm`` subclass) and ``CONFIGS`` (name -> config class).
They are merged here in the order of ``FAMILIES`` so a new family is one line,
and a name claimed twice is an error rather than a silent override.
"""
import importlib

FAMILIES = ("ppo", "a2c", "dqn", "appo", "pql", "hts", "population")

ALGORITHMS: dict = {}
CONFIGS: dict = {}


def _merge(family: str) -> None:
    try:
        module = importlib.import_module(f"{__name__}.{family}")
    except ModuleNotFoundError as err:
        # Only a family that does not exist yet is skipped; a missing
        # dependency *inside* an existing family must surface.
        if err.name == f"{__name__}.{family}":
            return
        raise
    for name, cls in getattr(module, "ALGORITHMS", {}).items():
        if name in ALGORITHMS:
            raise RuntimeError(f"algorithm name {name!r} registered by two families")
        ALGORITHMS[name] = cls
    CONFIGS.update(getattr(module, "CONFIGS", {}))


for _family in FAMILIES:
    _merge(_family)

# ``from rllib_fast.algorithms import FastPPO`` keeps working for every family.
globals().update({cls.__name__: cls for cls in (*ALGORITHMS.values(), *CONFIGS.values())})
