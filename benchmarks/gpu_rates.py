"""Rate measurements the GPU kit (``gpu.py``) runs in its child calls: HTS-RL's
throughput against a synchronous loop over a simulated variable step time
(``measure_sps``), and the update cost of a vectorised population of K members
(``population_update``). Both measure a rate, not learning, so the protocol of
docs/benchmarks.md (time to a return) does not apply to them."""
from __future__ import annotations

import math
import time
from types import SimpleNamespace
from typing import Any, Dict, List

import torch

from rllib_fast.algorithms.a2c import FastA2CConfig
from rllib_fast.algorithms.hts import HTSA2CConfig, HTSPPOConfig
from rllib_fast.algorithms.hts.executors import ExecutorGroupEnv
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.core.seeding import worker_seed
from rllib_fast.envs import Step, TensorVecEnv
from rllib_fast.envs.variable_time import VariableTimeCreator, VariableTimeEnv


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class NullEnv(TensorVecEnv):
    """A task that costs nothing to step (constant observation, reward 1, an
    episode ends every 100 steps): part 1 measures scheduling, so the only
    step cost should be the VariableTimeEnv sleep (a CartPole step costs
    ~0.2 ms of Python per call, which 16 executors would serialise on the GIL)."""

    def __init__(self, num_envs: int, device: Any = "cpu", seed: Any = None):
        import gymnasium as gym
        import numpy as np

        self.num_envs, self.device = int(num_envs), torch.device(device)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.max_episode_steps = 100
        self._obs = torch.zeros(self.num_envs, 4)
        self._r = torch.ones(self.num_envs)
        self._f = torch.zeros(self.num_envs, dtype=torch.bool)
        self._t = 0

    def reset(self, seed=None):
        return self._obs

    def step(self, actions):
        self._t += 1
        trunc = self._f if self._t % 100 else ~self._f
        return Step(self._obs, self._r, self._f, trunc, self._obs)


def null_env(ctx) -> NullEnv:
    return NullEnv(int(dict(ctx)["num_envs"]))


class SleepCreator:
    """``VariableTimeEnv(NullEnv)`` from an env context (seeded sleep RNG)."""

    def __init__(self, mean_s: float, std_s: float, distribution: str):
        self.mean_s, self.std_s, self.distribution = mean_s, std_s, distribution

    def __call__(self, ctx) -> VariableTimeEnv:
        ctx = dict(ctx)
        seed = ctx.get("seed")
        return VariableTimeEnv(null_env(ctx), self.mean_s, self.std_s, self.distribution,
                               seed=None if seed is None else [int(seed), 0x5EE9])


class SyncExecutors:
    """Env creator for the synchronous baselines: ``executors`` VariableTimeEnv
    parts stepped concurrently with a barrier after every step."""

    def __init__(self, name: str, executors: int, mean_s: float, std_s: float, distribution: str):
        self.name, self.E = name, executors
        self.creator = (SleepCreator(mean_s, std_s, distribution) if name == "null"
                        else VariableTimeCreator(name, mean_s, std_s, distribution))

    def __call__(self, ctx) -> ExecutorGroupEnv:
        ctx = dict(ctx)
        n, seed = int(ctx["num_envs"]) // self.E, ctx.get("seed")
        parts = [self.creator({**ctx, "num_envs": n, "seed": worker_seed(seed, e)}) for e in range(self.E)]
        return ExecutorGroupEnv(parts, parallel=True)


def build(kind: str, alpha: int, mean_s: float, k: float, dist: str, *, executors: int = 16, slots: int = 1,
          seed: int = 0, min_steps: int = 2048, **extra):
    n = executors * slots
    std = k * mean_s
    common = dict(decorrelate_steps=0, validate_env_on_setup=False, **extra)
    if kind in ("HTSPPO", "HTSA2C"):
        cfg = HTSPPOConfig() if kind == "HTSPPO" else HTSA2CConfig()
        rounds = max(1, math.ceil(min_steps / (alpha * n)))
        cfg = cfg.environment(SleepCreator(mean_s, std, dist), num_envs=n).training(
            num_executors=executors, sync_interval=alpha, rounds_per_iteration=rounds, **common)
    else:
        cfg = FastPPOConfig() if kind == "FastPPO" else FastA2CConfig()
        cfg = cfg.environment(SyncExecutors("null", executors, mean_s, std, dist), num_envs=n).training(
            rollout_length=alpha, **common)
    return cfg.debugging(seed=seed).build_algo()


def steps_of(algo) -> float:
    return algo.metrics.peek("num_env_steps_sampled_lifetime", default=0)


def measure_sps(kind: str, alpha: int, mean_s: float, k: float, dist: str, min_steps: int) -> Dict[str, Any]:
    torch.set_num_threads(1)
    algo = build(kind, alpha, mean_s, k, dist, min_steps=min_steps)
    try:
        if kind.startswith("HTS"):
            algo.train()                              # round 0 fills the pipeline (nothing to learn yet)
        s0, t0 = steps_of(algo), time.perf_counter()
        idle = []
        while steps_of(algo) - s0 < min_steps:
            algo.training_step()
            if kind.startswith("HTS"):
                idle.append((algo.metrics.peek(("hts", "learner_idle_fraction")),
                             algo.metrics.peek(("hts", "executor_idle_fraction"))))
        dt = time.perf_counter() - t0
        out = {"kind": kind, "alpha": alpha, "k": k, "dist": dist, "sps": (steps_of(algo) - s0) / dt,
               "steps": steps_of(algo) - s0, "seconds": dt}
        if idle:
            out["learner_idle"], out["executor_idle"] = idle[-1]
        return out
    finally:
        algo.stop()


def _config(K: int, hidden: List[int], batch: int, seed: int, **kw):
    from rllib_fast.algorithms.population import PopTD3Config

    base = dict(population_size=K, hidden_sizes=hidden, batch_size=batch, pbt_init="config", learning_starts=200,
                rollout_length=100, buffer_size=20_000, checkpoint_replay=False, validate_env_on_setup=False)
    base.update(kw)
    return PopTD3Config().environment("Pendulum").training(**base).debugging(seed=seed)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def population_update(k: int, hidden: str, batch: int, reps: int, budget_steps: int, device: str = "cpu",
                      seed: int = 0, compile: bool = False) -> Dict[str, Any]:
    """One vectorised PopTD3 of ``k`` members on Pendulum: its steady update cost
    (min over 5 blocks), a fixed act+store+update budget, peak memory."""
    args = SimpleNamespace(k=k, hidden=hidden, batch=batch, reps=reps, budget_steps=budget_steps, device=device,
                           seed=seed, compile=compile, mode="vectorised")
    import torch

    torch.set_num_threads(1)
    import rllib_fast  # noqa: F401  (imports counted in the idle baseline)

    idle = _peak_rss_mb()
    K, hidden, batch = args.k, [int(h) for h in args.hidden.split(",")], args.batch
    if args.mode == "idle":
        return {"peak_rss_mb": idle}
    dev = {"env_device": args.device}
    agents = ([_config(K, hidden, batch, args.seed, compile=args.compile, **dev).build_algo()]
              if args.mode == "vectorised" else [_config(1, hidden, batch, args.seed + i, **dev).build_algo()
                                                 for i in range(K)])
    for a in agents:                        # fill replay (random actions), then warm up the update path
        a._rollout(200)
    out: Dict[str, Any] = {}
    t0 = time.perf_counter()
    for a in agents:
        a.run_updates(2)
    out["first_update_s"] = time.perf_counter() - t0
    out["compile_time_s"] = agents[0]._fused.compile_time_s
    # min over blocks: robust to load spikes from other processes on a shared machine
    reps, blocks = args.reps, 5
    best, best_cpu = float("inf"), float("inf")
    per = max(1, reps // blocks)
    for _ in range(blocks):
        _sync(args.device)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(per):
            for a in agents:
                a.update_step()
        _sync(args.device)
        best = min(best, (time.perf_counter() - t0) / per)
        best_cpu = min(best_cpu, (time.process_time() - c0) / per)
    out["update_ms"] = best * 1e3
    out["update_cpu_ms"] = best_cpu * 1e3
    # fixed training budget: act + store + 1 update per member env step
    steps = args.budget_steps
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(max(1, steps // 100)):
        for a in agents:
            a._rollout(100)
            a.run_updates(100)
    _sync(args.device)
    out["budget_s"] = time.perf_counter() - t0
    out["budget_cpu_s"] = time.process_time() - c0
    out["peak_rss_mb"] = _peak_rss_mb()
    if args.device.startswith("cuda"):
        import torch

        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    out["idle_rss_mb"] = idle
    return out
