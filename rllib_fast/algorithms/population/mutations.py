"""Mutation specs for in-trial PBT, in the format of Tune's
``PopulationBasedTraining(hyperparam_mutations=...)``.

Each key maps to one of what Tune accepts:

* a list/tuple of values: resample = uniform choice; perturb = shift to the
  left/right neighbour in the list;
* a ``ray.tune`` search-space ``Domain`` (``tune.loguniform(3e-5, 3e-3)``) or a
  zero-argument callable: resample = draw; perturb = multiply by one of
  ``perturbation_factors`` (ints stay ints);

plus one YAML-friendly shorthand, ``{"loguniform": [lo, hi]}`` (also
``uniform``, ``randint`` [lo, hi), ``choice`` [...]), which becomes the Tune
domain of that name. (Inside a Tune ``param_space`` use lists or the shorthand:
Tune would sample a bare ``Domain`` found in the config as a search variable.)

Draws use a ``numpy.random.Generator`` owned by the algorithm (checkpointed),
never Python's global ``random``, so a restored run explores identically.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

SHORTHANDS = ("uniform", "loguniform", "randint", "choice", "quniform", "qloguniform")


def normalize(spec: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Turn shorthands into Tune domains; raise ``ValueError`` on anything else."""
    from ray import tune
    from ray.tune.search.sample import Domain

    out: Dict[str, Any] = {}
    for key, dist in (spec or {}).items():
        if isinstance(dist, Mapping):
            if len(dist) != 1 or next(iter(dist)) not in SHORTHANDS:
                raise ValueError(f"mutation for {key!r} = {dist!r}: a dict must be one of "
                                 f"{{{', '.join(SHORTHANDS)}: [...]}}")
            kind, args = next(iter(dist.items()))
            out[key] = tune.choice(list(args)) if kind == "choice" else getattr(tune, kind)(*args)
        elif isinstance(dist, (list, tuple)):
            if not dist:
                raise ValueError(f"mutation for {key!r} is an empty list")
            out[key] = list(dist)
        elif isinstance(dist, Domain) or callable(dist):
            out[key] = dist
        else:
            raise ValueError(f"mutation for {key!r} = {dist!r}; allowed: a list of values, a ray.tune Domain, "
                             f"a callable, or {{{'|'.join(SHORTHANDS)}: [...]}}")
    return out


def _domain_sample(dist, rng: np.random.Generator):
    """Draw from a Tune domain with our own generator (Tune's ``sample`` takes a
    numpy RandomState / Generator through ``random_state``)."""
    from ray.tune.search.sample import Domain

    if isinstance(dist, Domain):
        return dist.sample(random_state=rng)
    return dist()


def sample(dist, rng: np.random.Generator):
    if isinstance(dist, list):
        return dist[int(rng.integers(len(dist)))]
    value = _domain_sample(dist, rng)
    return value.item() if hasattr(value, "item") else value


def list_index(value: Any, values: Sequence[Any]) -> Optional[int]:
    """Index of ``value`` in ``values``, or None. Numbers match within a float32
    rounding (relative 1e-6): member hyperparameters live in float32 tensors,
    so 0.995 comes back as 0.9950000047683716 and an exact ``in`` would never
    find it (and explore would always resample instead of shifting)."""
    for i, v in enumerate(values):
        if v == value:
            return i
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    for i, v in enumerate(values):
        if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) \
                and math.isclose(float(v), x, rel_tol=1e-6, abs_tol=1e-12):
            return i
    return None


def explore(value: Any, dist, rng: np.random.Generator, resample_probability: float,
            perturbation_factors: Sequence[float]) -> Tuple[Any, str]:
    """Tune's explore rule for one hyperparameter: (new value, operation)."""
    if isinstance(dist, list):
        index = list_index(value, dist)
        if rng.random() < resample_probability or index is None:
            return sample(dist, rng), "resample"
        i = index + (1 if rng.random() < 0.5 else -1)
        return dist[min(max(i, 0), len(dist) - 1)], "shift"
    if rng.random() < resample_probability:
        return sample(dist, rng), "resample"
    factor = perturbation_factors[int(rng.integers(len(perturbation_factors)))]
    new = value * factor
    return (int(round(new)) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else new), \
        f"* {factor}"


def integer_prior(dist) -> bool:
    """Whether ``dist`` draws integers (a ``randint``-type domain, a list of ints):
    such a hyperparameter (``policy_delay``) is perturbed as an int, as Tune's
    ``int(round(value * factor))``, not compounded as a float (2 -> 2.4 -> 2.88)."""
    from ray.tune.search.sample import Integer

    if isinstance(dist, list):
        return bool(dist) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in dist)
    return isinstance(dist, Integer)


def within(value: float, param: Any) -> float:
    """``value`` held inside what the key's ``Param`` allows: a perturbation
    (``* 1.2``) of gamma 0.99 must not leave [0, 1], where the Bellman target
    diverges. Closed bounds clamp to the bound, open ones to just inside it.
    The prior's range is not a bound (as in Tune's PBT, perturbations may
    explore beyond it)."""
    if param is None:
        return value
    if param.low is not None:
        value = max(value, param.low if not param.low_open else math.nextafter(param.low, math.inf))
    if param.high is not None:
        value = min(value, param.high if not param.high_open else math.nextafter(param.high, -math.inf))
    return value


def bounds(dist) -> Tuple[Optional[float], Optional[float]]:
    """(lower, upper) of a spec, for tests and docs (None when unknown)."""
    if isinstance(dist, list):
        nums = [v for v in dist if isinstance(v, (int, float))]
        return (min(nums), max(nums)) if nums else (None, None)
    lo, hi = getattr(dist, "lower", None), getattr(dist, "upper", None)
    return lo, hi
