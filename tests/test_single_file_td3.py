"""benchmarks/single_file_td3.py, the framework-free off-policy reference: it runs
and, seeded, learns the built-in Pendulum; its n-step windows cut at episode ends."""
import importlib.util
import math
import os
import sys

import torch

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def _td3():
    spec = importlib.util.spec_from_file_location("single_file_td3", os.path.join(BENCH, "single_file_td3.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses resolve the module's string annotations through it
    spec.loader.exec_module(mod)
    return mod


def test_single_file_td3_learns_pendulum():
    td3 = _td3()
    args = td3.Args(env="Pendulum", num_envs=64, hidden=64, updates_per_step=4, tau=0.02, learning_starts=1000,
                    total_steps=120_000, time_budget=600.0, target=-400.0, log_every=50, seed=0)
    s = td3.train(args)
    # random actions score about -1200 on Pendulum
    assert s["return_mean"] >= -400.0, s
    assert s["updates"] > 0 and s["env_steps"] <= 120_000


def test_nstep_window_is_cut_at_episode_end():
    td3 = _td3()
    agg = td3.NStep(3, 1, 1, 1, 0.5, "cpu")
    o = lambda v: torch.tensor([[float(v)]])  # noqa: E731
    z, one = torch.zeros(1), torch.ones(1)
    assert agg.push(o(0), o(0), one, o(1), z, z) is None
    assert agg.push(o(1), o(0), one, o(2), one, one) is None    # terminates here
    s, a, ret, nxt, disc = agg.push(o(2), o(0), one * 10, o(3), z, z)   # next episode's first step
    assert float(s) == 0.0 and float(ret) == 1.5 and float(nxt) == 2.0 and float(disc) == 0.0
    s, a, ret, nxt, disc = agg.push(o(3), o(0), one, o(4), z, one)   # a truncation bootstraps
    assert float(s) == 1.0 and float(ret) == 1.0 and float(disc) == 0.0   # window from the terminal step
    s, a, ret, nxt, disc = agg.push(o(4), o(0), one, o(5), z, z)
    assert float(s) == 2.0 and math.isclose(float(ret), 10 + 0.5) and float(nxt) == 4.0
    assert math.isclose(float(disc), 0.25)
