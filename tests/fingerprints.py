"""Fixed-seed fingerprints of every registered algorithm (a script, not a test).

For each algorithm of ``rllib_fast.algorithms.ALGORITHMS`` (and the PopPPO
variants below, which exercise paths the tiny defaults leave off): the tiny
config of ``tests/_resume_worker.py`` on the first built-in task it accepts
(CartPole, else Pendulum), seed 0, two training iterations; then a SHA-256 of
every floating tensor of every module in ``stateful_components()`` (taken in
name order; a second hash ignores the names, so renaming a component or a
buffer does not hide whether the numbers moved) and of each iteration's
returns and lifetime counters.

    python tests/fingerprints.py --out before.json       # record
    python tests/fingerprints.py --compare before.json   # record again and diff

A refactor that is meant to leave behaviour alone leaves every fingerprint
unchanged. Algorithms whose class says ``RESUME_EXACT = False`` run concurrent
back-ends whose interleaving decides the numbers: their hashes are recorded
but not compared (their tensor names and shapes are).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from typing import Any, Dict

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

#: extra runs: case name -> (algorithm, config overrides[, iterations])
VARIANTS = {
    "PopPPO[K=1,clip]": ("PopPPO", {"population_size": 1, "grad_clip": 0.1, "num_epochs": 2}),
    "PopPPO[K=3,pbt,adaptive]": ("PopPPO", {"population_size": 3, "pbt_interval": 1, "grad_clip": 0.1,
                                            "adaptive_lr_kl_target": 0.01, "num_epochs": 2,
                                            "normalize_obs": True, "rollout_length": 16,
                                            "total_batch_size": None, "num_envs_per_member": 4}, 8),
    "PopA2C[K=3]": ("PopA2C", {"population_size": 3}),
    "PopDQN[pbt]": ("PopDQN", {"population_size": 3, "pbt_interval": 8}, 8),
    "PopDQN[clip]": ("PopDQN", {"grad_clip": 0.01}, 4),
    "PopTD3[clip]": ("PopTD3", {"grad_clip": 0.01}, 3),
}


def _tensor_bytes(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().numpy().tobytes()


def _state_tensors(algo) -> Dict[str, torch.Tensor]:
    from tests._resume_worker import params

    return params(algo)


def _returns(result: Dict[str, Any]) -> Dict[str, Any]:
    er = result.get("env_runners", {})
    ret = er.get("episode_return_mean", math.nan)
    return {"return": None if ret is None or (isinstance(ret, float) and math.isnan(ret)) else float(ret),
            "episodes": er.get("num_episodes_lifetime"),
            "env_steps": result.get("num_env_steps_sampled_lifetime", er.get("num_env_steps_sampled_lifetime")),
            "pbt_rounds": result.get("population", {}).get("pbt_rounds")}


def fingerprint(case: str, iterations: int = 2) -> Dict[str, Any]:
    from rllib_fast.algorithms import ALGORITHMS
    from tests._resume_worker import ENVS, tiny_config

    name, overrides, *more = VARIANTS.get(case, (case, {}))
    iterations = more[0] if more else iterations
    errors = []
    for env in ENVS:
        cfg = tiny_config(name, env, seed=0)
        for key, value in overrides.items():
            setattr(cfg, key, value)
        try:
            cfg.validate()
            algo = cfg.build_algo()
            break
        except Exception as err:  # noqa: BLE001 - e.g. a continuous-control algorithm on CartPole
            errors.append(f"{env}: {type(err).__name__}: {err}")
    else:
        return {"error": "; ".join(errors)}
    try:
        results = [_returns(algo.train()) for _ in range(iterations)]
        tensors = _state_tensors(algo)
    finally:
        algo.stop()
    named = hashlib.sha256()
    for key in sorted(tensors):
        named.update(key.encode())
        named.update(_tensor_bytes(tensors[key]))
    return {"env": env, "exact": bool(getattr(ALGORITHMS[name], "RESUME_EXACT", True)),
            "params_named": named.hexdigest(), "params_values": _multiset_hash(tensors),
            "shapes": {k: list(v.shape) for k, v in sorted(tensors.items())},
            "returns": hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest(),
            "results": results}


def _multiset_hash(tensors: Dict[str, torch.Tensor]) -> str:
    """A hash of the tensors' values that ignores their names and order (sorted digests)."""
    digests = sorted(hashlib.sha256(_tensor_bytes(t)).hexdigest() for t in tensors.values())
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def compare(before: Dict[str, Any], after: Dict[str, Any]) -> int:
    """Print one line per case; return the number of exact cases whose numbers moved."""
    moved = 0
    for case in sorted(set(before) | set(after)):
        b, a = before.get(case), after.get(case)
        if b is None or a is None:
            print(f"{case:28s} only in {'after' if b is None else 'before'}")
            continue
        if "error" in b or "error" in a:
            print(f"{case:28s} error: before={b.get('error')!r} after={a.get('error')!r}")
            moved += ("error" in a) != ("error" in b)
            continue
        same_values = b["params_values"] == a["params_values"] and b["returns"] == a["returns"]
        same_names = b["params_named"] == a["params_named"]
        if not b["exact"]:
            status = "concurrent (not compared)"
        elif same_values:
            status = "same" if same_names else "same numbers (tensor names changed)"
        else:
            status = "CHANGED"
            moved += 1
        print(f"{case:28s} {status}")
    return moved


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the fingerprints to this JSON file")
    p.add_argument("--compare", help="fingerprint now and compare with this JSON file")
    p.add_argument("--only", nargs="*", help="these cases only (default: every algorithm and variant)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    os.environ.setdefault("RAY_ADDRESS", "local")
    import ray

    from rllib_fast.algorithms import ALGORITHMS

    cases = args.only or [*ALGORITHMS, *VARIANTS]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        out = {}
        for case in cases:
            out[case] = fingerprint(case)
            print(f"{case:28s} {out[case].get('params_named', out[case].get('error'))}", flush=True)
    finally:
        ray.shutdown()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        if args.only:
            before = {k: v for k, v in before.items() if k in out}
        return 1 if compare(before, out) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
