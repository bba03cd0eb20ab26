"""PQL side by side: wall-clock to Pendulum >= -200 for PQL (thread back-end),
its sequential baselines DDPGN / SACN, FastPPO, RLlib's built-in SAC and
Stable-Baselines3's SAC and TD3, plus the achieved speed ratios of PQL.

Every arm runs in its own child process, one after another (``_harness.py``),
with one torch/OMP thread. The return compared is the **greedy evaluation
return** (10 episodes of the deterministic policy) measured at each report
point, with the evaluation time excluded from the wall clock (the clock is
paused while evaluating), because training returns are not comparable across
these methods (PQL's mixed exploration runs half its envs with σ > 0.4).
RLlib's SAC is evaluated with ``algo.evaluate()`` (explore=False) on its own
gymnasium Pendulum-v1 through the ``rllib-fast-gym:Pendulum`` bridge.

Settings: ours from ``rllib_fast/presets.py`` (``preset(algo, "Pendulum")``) and
FastPPO's defaults at 64 envs; RLlib SAC modelled on RLlib's
``tuned_examples/sac/pendulum_sac.py`` (new API stack); SB3 after
rl-baselines3-zoo's Pendulum-v1 entries (SAC: lr 1e-3; TD3: lr 1e-3, γ 0.98,
N(0, 0.1) action noise, [400, 300], 10k learning starts).

MuJoCo part (``--part mujoco`` or ``all``): HalfCheetah-v5 >= 3000 for the
same seven arms within ``--mujoco-budget`` seconds each -- ours through the
gymnasium bridge (``gym:HalfCheetah-v5``, 16 envs, settings in
``rllib_fast/presets.py`` (``gym:HalfCheetah-v5``); FastPPO with the PPO settings of
``benchmarks/sources.py``), RLlib SAC and SB3 SAC/TD3 on gymnasium's
``HalfCheetah-v5`` with their published MuJoCo settings (RLlib: lr 3e-4,
tau 0.005, batch 256, 10k random steps; SB3 after rl-baselines3-zoo). The
greedy evaluation uses 5 episodes every 30 s there (an episode is 1000
steps). Skipped when mujoco is not importable.

    python benchmarks/pql.py --budget 150                 # Pendulum part, ~15 min on 2 cores
    python benchmarks/pql.py --arms pql,ddpgn --seeds 0,1
    python benchmarks/pql.py --part mujoco --mujoco-budget 360
    python benchmarks/pql.py --replot benchmarks/results/pql.json

On 2 CPU cores the three PQL roles share two cores with each other (and with
anything else running), so concurrency can at best overlap the Actor with
the learners; the paper's gains come from GPUs where the simulator and the
learners have separate devices.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402
import _report as R  # noqa: E402

NAME = "pql"
TARGET = -200.0
MUJOCO_TARGET = 3000.0
REPORT_EVERY_S = 2.0
EVAL_EPISODES = 10
MUJOCO_REPORT_EVERY_S = 30.0
MUJOCO_EVAL_EPISODES = 5
# mjlab part: Cartpole with 10 s episodes (200 steps of 0.05 s, rewards scaled by dt: max return 10)
MJLAB_TASKS = {"balance": ("Mjlab-Cartpole-Balance", 9.0), "swingup": ("Mjlab-Cartpole-Swingup", 8.0)}
MJLAB_EPISODE_S = 10.0
MJLAB_NS = (64, 256, 1024)
MJLAB_REPORT_EVERY_S = float(os.environ.get("RLLIB_FAST_BENCH_MJLAB_EVAL_EVERY_S", 0.25))  # --mjlab-eval-every
# The greedy evaluation cadence (clock paused) is the time-to-target resolution. 3 s
#   quantised runs of 5-12 s by a third of their length; 1 s still added ~0.5 s on average to 4-6 s runs, and more
#   to the faster arm's env steps (a PQL second is ~10k env steps at N=256, a DDPG(n) second ~5k). At 0.25 s every
#   10-step iteration at N=256 is evaluated (an iteration is the floor); each evaluation costs ~2.3 s, paused.
MJLAB_CADENCE_BEFORE = 1.0   # the cadence of records that predate the cadence note
MJLAB_EVAL_ENVS = 32     # greedy evaluation: one 200-step episode in each of 32 envs (~1 s quiet at N=32)
HERE = os.path.dirname(os.path.abspath(__file__))
# FastPPO on HalfCheetah: the shared PPO settings of benchmarks/sources.py (16 envs x 128 steps,
# 10 epochs of 64-sample minibatches, lr 3e-4, [64, 64] tanh)
PPO_HALFCHEETAH = dict(num_envs=16, rollout_length=128, num_epochs=10, num_minibatches=32, lr=3e-4, gamma=0.99,
                       lambda_=0.95, clip_param=0.2, hidden_sizes=[64, 64], activation="tanh", grad_clip=0.5)


def _is_mujoco(env: str) -> bool:
    return "HalfCheetah" in env


def _cadence(env: str):
    """(seconds between greedy evaluations, evaluation episodes) for ``env``."""
    return (MUJOCO_REPORT_EVERY_S, MUJOCO_EVAL_EPISODES) if _is_mujoco(env) else (REPORT_EVERY_S, EVAL_EPISODES)


@contextlib.contextmanager
def _clock_paused(ctx: H.ArmContext):
    """Exclude evaluation from the arm's wall clock."""
    t = time.perf_counter()
    try:
        yield
    finally:
        if ctx._t0 is not None:
            ctx._t0 += time.perf_counter() - t


def _finite(x: Any) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


# ---------------------------------------------------------------------------
# arms (child side)
# ---------------------------------------------------------------------------
def arm_ours(ctx: H.ArmContext, algo: str, env: str = "Pendulum", **overrides: Any) -> None:
    from rllib_fast.presets import preset

    every_s, episodes = _cadence(env)
    if algo == "FastPPO":
        from rllib_fast.algorithms.ppo import FastPPOConfig as C

        kw = dict(PPO_HALFCHEETAH if _is_mujoco(env) else dict(num_envs=64))  # defaults at 64 envs
    else:
        from rllib_fast.algorithms import pql

        C = {"PQL": pql.PQLConfig, "DDPGN": pql.DDPGNConfig, "SACN": pql.SACNConfig}[algo]
        kw = preset(algo, "gym:HalfCheetah-v5" if _is_mujoco(env) else "Pendulum")
    kw.update(overrides)
    n = int(kw.pop("num_envs"))
    cfg = (C().environment(env, num_envs=n, env_device="cpu").training(**kw).debugging(seed=ctx.seed)
           .evaluation(evaluation_duration=episodes))
    ctx.note(hyperparameters=dict(num_envs=n, **kw), config_class=C.__name__)
    ctx.start_clock()
    _train_and_report(ctx, cfg.build_algo(), every_s)


_PQL_EXTRAS = ("beta_av_achieved", "beta_pv_achieved", "actor_wait_fraction", "critic_wait_fraction",
               "policy_wait_fraction")


def _train_and_report(ctx: H.ArmContext, algo, every_s: float) -> None:
    """Train an RLlib-style ``Algorithm`` until the harness says stop; every
    ``every_s`` seconds (and at the cap) report its greedy evaluation return,
    with the evaluation time excluded, plus PQL's ratio metrics if present."""
    last = -1e9
    try:
        while True:
            r = algo.train()
            if ctx.elapsed - last < every_s and ctx.elapsed < ctx.budget_s:
                continue
            last = ctx.elapsed
            with _clock_paused(ctx):
                ev = algo.evaluate().get("env_runners", {}).get("episode_return_mean")
            lr = r.get("learners", {}).get("default_policy", {})
            extra = {k: _finite(lr.get(k)) for k in _PQL_EXTRAS if k in lr}
            if ctx.report(r["num_env_steps_sampled_lifetime"], _finite(ev),
                          train_ret=_finite(r.get("env_runners", {}).get("episode_return_mean")), **extra):
                break
    finally:
        algo.stop()


def arm_rllib_sac(ctx: H.ArmContext, env: str = "rllib-fast-gym:Pendulum") -> None:
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from rllib_fast.envs.gymnasium import register_rllib_gym_envs

    register_rllib_gym_envs()
    every_s, episodes = _cadence(env)
    if _is_mujoco(env):   # the usual SAC MuJoCo settings (Haarnoja et al.; RLlib's MuJoCo SAC examples)
        hp = dict(initial_alpha=1.0, actor_lr=3e-4, critic_lr=3e-4, alpha_lr=3e-4, lr=None, target_entropy="auto",
                  n_step=1, tau=0.005, train_batch_size_per_learner=256, target_network_update_freq=1,
                  replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": 1_000_000},
                  num_steps_sampled_before_learning_starts=10_000)
    else:
        hp = dict(initial_alpha=1.001, actor_lr=2e-4, critic_lr=8e-4, alpha_lr=9e-4, lr=None,
                  target_entropy="auto", n_step=(2, 5), tau=0.005, train_batch_size_per_learner=256,
                  target_network_update_freq=1,
                  replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 100000, "alpha": 1.0,
                                        "beta": 0.0},
                  num_steps_sampled_before_learning_starts=256)
    model = dict(fcnet_hiddens=[256, 256], fcnet_activation="relu", head_fcnet_hiddens=[])
    # our Pendulum bridge has a vector entry point; gymnasium's MuJoCo envs use RLlib's default (sync)
    vec_mode = {} if _is_mujoco(env) else dict(gym_env_vectorize_mode="vector_entry_point")
    cfg = (SACConfig().environment(env).env_runners(num_env_runners=0, num_envs_per_env_runner=1, **vec_mode)
           .training(**hp).rl_module(model_config=DefaultModelConfig(**model))
           .evaluation(evaluation_num_env_runners=0, evaluation_duration=episodes,
                       evaluation_duration_unit="episodes", evaluation_config={"explore": False})
           .reporting(min_sample_timesteps_per_iteration=200)
           .debugging(seed=ctx.seed))
    ctx.note(hyperparameters={**{k: str(v) for k, v in hp.items()}, **model})
    ctx.start_clock()
    _train_and_report(ctx, cfg.build_algo(), every_s)


def _greedy_eval_gym(policy_fn, env_id: str, seed: int, episodes: int = EVAL_EPISODES) -> float:
    import gymnasium as gym
    import numpy as np

    env = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(episodes)])
    obs, _ = env.reset(seed=seed + 12345)
    ret = np.zeros(episodes)
    done = np.zeros(episodes, dtype=bool)
    final = np.zeros(episodes)
    while not done.all():
        obs, r, term, trunc, _ = env.step(policy_fn(obs))
        ret += np.where(done, 0.0, r)
        ended = (term | trunc) & ~done
        final[ended] = ret[ended]
        done |= ended
    env.close()
    return float(final.mean())


def arm_sb3(ctx: H.ArmContext, algo: str, env: str = "Pendulum-v1") -> None:
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    every_s, episodes = _cadence(env)
    act_dim = 6 if _is_mujoco(env) else 1
    noise = NormalActionNoise(np.zeros(act_dim), 0.1 * np.ones(act_dim))
    if algo == "SAC":   # zoo: Pendulum lr 1e-3; HalfCheetah defaults with 10k learning starts
        hp: Dict[str, Any] = dict(learning_starts=10_000) if _is_mujoco(env) else dict(learning_rate=1e-3)
        cls = SAC
    else:   # zoo: Pendulum gamma 0.98, 200k buffer; HalfCheetah gamma 0.99, 1M buffer
        hp = dict(learning_rate=1e-3, learning_starts=10_000, action_noise=noise, train_freq=1, gradient_steps=1,
                  policy_kwargs=dict(net_arch=[400, 300]))
        if not _is_mujoco(env):
            hp.update(gamma=0.98, buffer_size=200_000)
        cls = TD3
    ctx.note(hyperparameters={k: str(v) for k, v in hp.items()})

    class Report(BaseCallback):
        last = -1e9
        stop = False

        def _on_step(self) -> bool:
            if ctx.elapsed - Report.last >= every_s or ctx.elapsed >= ctx.budget_s:
                Report.last = ctx.elapsed
                with _clock_paused(ctx):
                    ev = _greedy_eval_gym(lambda o: self.model.predict(o, deterministic=True)[0], env, ctx.seed,
                                          episodes)
                buf = self.model.ep_info_buffer
                tr = sum(e["r"] for e in buf) / len(buf) if buf else None
                Report.stop = ctx.report(self.model.num_timesteps, ev, train_ret=tr)
            return not Report.stop

    ctx.start_clock()
    model = cls("MlpPolicy", env, seed=ctx.seed, device="cpu", verbose=0, **hp)
    model.learn(total_timesteps=10 ** 8, callback=Report())


def _bench_mjlab():
    """benchmarks/mjlab.py (the parity engineer's rsl_rl and raw-simulator arms) under its
    own module name -- imported as ``mjlab`` it would shadow the mjlab package -- with its
    env builder giving 10 s episodes. Importing it also takes this folder off sys.path."""
    import importlib.util

    name = "rllib_fast_bench_mjlab"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "mjlab.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)

        def ten_second_env(task: str, num_envs: int, seed: int, device: str = "cpu"):
            import mjlab.tasks  # noqa: F401
            from mjlab.envs import ManagerBasedRlEnv
            from mjlab.tasks.registry import load_env_cfg

            cfg = load_env_cfg(task)
            cfg.scene.num_envs, cfg.seed, cfg.episode_length_s = num_envs, seed, MJLAB_EPISODE_S
            return ManagerBasedRlEnv(cfg, device=device)

        mod._mjlab_env = ten_second_env
    sys.modules[name]._unshadow()   # imports mjlab and its task registry now, before any arm's clock
    return sys.modules[name]


def _mjlab_settings(algo: str, task: str) -> Dict[str, Any]:
    """The shipped tune config's settings for ``algo`` on ``task`` (PQL's for DDPGN/SACN
    too, less its concurrency keys): tune_configs/mjlab-cartpole-<task>-{pql,fastppo}.yaml."""
    import yaml

    short = "balance" if "Balance" in task else "swingup"
    name = f"mjlab-cartpole-{short}-{'fastppo' if algo == 'FastPPO' else 'pql'}"
    with open(os.path.join(os.path.dirname(HERE), "tune_configs", name + ".yaml")) as f:
        (exp,) = yaml.safe_load(f).values()
    drop = {"env_device", "num_envs", "seed", "evaluation_interval", "evaluation_duration", "env_config"}
    if algo in ("DDPGN", "SACN"):   # their class decides the policy learner
        drop |= {"policy_learner", "backend", "v_learner_device", "p_learner_device", "ratio_slack", "ratio_depth", "max_wait_s",
                 "weight_sync_every", "ray_transport", "ratio_window_s"}
    return {k: v for k, v in exp["config"].items() if k not in drop}


def _td3_module():
    """benchmarks/single_file_td3.py by path (this folder may be off sys.path: see _bench_mjlab)."""
    import importlib.util

    name = "single_file_td3"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "single_file_td3.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


class _GreedyEval:
    """Greedy return of a policy on its own tensor env (built once, one episode per env;
    Pendulum's and 10 s Cartpole's episodes end by the time limit)."""

    def __init__(self, env_name: str, seed: int, n: int = MJLAB_EVAL_ENVS, **task: Any):
        from rllib_fast.envs import make

        self.env = make(env_name, num_envs=n, device="cpu", seed=seed + 12345, **task)
        space = self.env.single_action_space
        import torch

        self.low = torch.as_tensor(space.low, dtype=torch.float32).reshape(-1)
        self.high = torch.as_tensor(space.high, dtype=torch.float32).reshape(-1)
        self.seed = seed

    def __call__(self, act) -> float:
        import torch

        env = self.env
        obs = env.reset(seed=self.seed + 12345)
        ret = torch.zeros(env.num_envs)
        alive = torch.ones(env.num_envs, dtype=torch.bool)
        with torch.no_grad():
            while bool(alive.any()):
                a = act(obs.reshape(env.num_envs, -1)).clamp(-1, 1)
                step = env.step(self.low + (a + 1) * 0.5 * (self.high - self.low))
                ret += torch.where(alive, step.reward.float(), torch.zeros(()))
                alive &= ~(step.terminated | step.truncated)
                obs = step.obs
        return float(ret.mean())


def arm_mjlab_ours(ctx: H.ArmContext, algo: str, num_envs: int, task: str, **overrides: Any) -> None:
    """PQL (a back-end), DDPGN, SACN or FastPPO on mjlab Cartpole with 10 s episodes, the
    shipped tune config's settings; greedy evaluation every MJLAB_REPORT_EVERY_S (clock
    paused); the simulator's own time is the 'sampling' time (the env's step timed)."""
    _bench_mjlab()
    from rllib_fast.algorithms import pql

    if algo == "FastPPO":
        from rllib_fast.algorithms.ppo import FastPPOConfig as C
    else:
        C = {"PQL": pql.PQLConfig, "DDPGN": pql.DDPGNConfig, "SACN": pql.SACNConfig}[algo]
    kw = {**_mjlab_settings(algo, task), **overrides}
    cfg = (C().environment(f"mjlab:{task}", num_envs=num_envs, env_device="cpu",
                           env_config={"cfg": {"episode_length_s": MJLAB_EPISODE_S}})
           .training(**kw).debugging(seed=ctx.seed).evaluation(evaluation_duration=MJLAB_EVAL_ENVS))
    ctx.note(hyperparameters=dict(num_envs=num_envs, **kw), config_class=C.__name__,
             eval_every_s=MJLAB_REPORT_EVERY_S)
    ctx.start_clock()
    a = cfg.build_algo()
    ctx.timed(a.env, "step", lambda out, args, kw: num_envs)
    _train_and_report(ctx, a, MJLAB_REPORT_EVERY_S)


def arm_mjlab_td3(ctx: H.ArmContext, num_envs: int, task: str, **overrides: Any) -> None:
    """benchmarks/single_file_td3.py on mjlab Cartpole (10 s episodes), greedy evaluation
    every MJLAB_REPORT_EVERY_S on its own env (clock paused)."""
    _bench_mjlab()
    td3 = _td3_module()
    args = td3.Args(env=f"mjlab:{task}", episode_length_s=MJLAB_EPISODE_S, num_envs=num_envs, seed=ctx.seed,
                    time_budget=1e9, log_every=10, **{**MJLAB_TD3, **overrides})
    ctx.note(hyperparameters=vars(args), eval_every_s=MJLAB_REPORT_EVERY_S)
    ctx.start_clock()
    _run_td3(ctx, td3, args, _GreedyEval(f"mjlab:{task}", ctx.seed, cfg={"episode_length_s": MJLAB_EPISODE_S}),
             MJLAB_REPORT_EVERY_S)


def _run_td3(ctx: H.ArmContext, td3, args, evaluate, every_s: float) -> None:
    """Train the single-file TD3, reporting its greedy return every ``every_s`` (clock paused)."""
    last = [-1e9]

    def callback(st: dict) -> bool:
        ctx.sample_s, ctx.sample_steps = st["sample_s"], st["env_steps"]
        if ctx.elapsed - last[0] < every_s and ctx.elapsed < ctx.budget_s:
            return False
        last[0] = ctx.elapsed
        with _clock_paused(ctx):
            ev = evaluate(st["act"])
        return ctx.report(st["env_steps"], ev, train_ret=_finite(st["return_mean"]))

    td3.train(args, callback)


# the single-file TD3 on Pendulum: the settings its test learns with (64 envs, [64, 64])
PENDULUM_TD3 = dict(num_envs=64, hidden=64, updates_per_step=4, tau=0.02, learning_starts=1000)


def arm_td3(ctx: H.ArmContext) -> None:
    """benchmarks/single_file_td3.py on the built-in Pendulum, greedy evaluation (10 episodes)."""
    td3 = _td3_module()
    args = td3.Args(env="Pendulum", seed=ctx.seed, time_budget=1e9, log_every=10, **PENDULUM_TD3)
    ctx.note(hyperparameters=vars(args))
    ctx.start_clock()
    _run_td3(ctx, td3, args, _GreedyEval("Pendulum", ctx.seed, EVAL_EPISODES), REPORT_EVERY_S)


# the single-file TD3 on mjlab Cartpole: PQL's network and ratio settings where TD3 has them
MJLAB_TD3 = dict(hidden=128, updates_per_step=4, tau=0.02, learning_starts=2000, batch_size=512)


def arm_mjlab_rsl_rl(ctx: H.ArmContext, num_envs: int, task: str) -> None:
    """rsl_rl's runner with mjlab's registered config (benchmarks/mjlab.py arm_rsl_rl), 10 s episodes;
    its return is the training return of its stochastic policy."""
    _bench_mjlab().arm_rsl_rl(ctx, num_envs, task=task)


def arm_mjlab_raw(ctx: H.ArmContext, num_envs: int, task: str) -> None:
    """The raw simulator's busy rate (benchmarks/mjlab.py arm_raw, busy=True), 10 s episodes."""
    _bench_mjlab().arm_raw(ctx, num_envs, task=task, busy=True)


def mjlab_arms(task_key: str = "balance", ns=MJLAB_NS) -> List[H.Arm]:
    """The mjlab 10 s part for one task: PQL (threads, Ray p2p), DDPGN, SACN, the single-file
    TD3, FastPPO and rsl_rl at each N, plus the raw simulator's busy rate at each N."""
    task, _ = MJLAB_TASKS[task_key]
    out: List[H.Arm] = []
    for n in ns:
        sfx = f"-{task_key}-{n}"
        kw = dict(num_envs=n, task=task)
        out += [
            H.Arm(f"mj-pql{sfx}", f"PQL-{n}", f"PQL (threads, N={n})", "pql:arm_mjlab_ours",
                  dict(algo="PQL", backend="thread", policy_learner="ddpg", **kw), num_envs=n),
            H.Arm(f"mj-pqlproc{sfx}", f"PQL-proc-{n}", f"PQL (processes, N={n})", "pql:arm_mjlab_ours",
                  dict(algo="PQL", backend="process", policy_learner="ddpg", **kw), num_envs=n),
            H.Arm(f"mj-pqlsac{sfx}", f"PQL-SAC-proc-{n}", f"PQL, SAC's policy learner (processes, N={n})",
                  "pql:arm_mjlab_ours", dict(algo="PQL", backend="process", policy_learner="sac", **kw), num_envs=n),
            H.Arm(f"mj-pqlray{sfx}", f"PQL-Ray-p2p-{n}", f"PQL (Ray actors, gloo, N={n})", "pql:arm_mjlab_ours",
                  dict(algo="PQL", backend="ray", ray_transport="collective", policy_learner="ddpg", **kw),
                  num_envs=n, needs_ray=True),
            H.Arm(f"mj-ddpgn{sfx}", f"DDPGN-{n}", f"DDPG(n) (N={n})", "pql:arm_mjlab_ours", dict(algo="DDPGN", **kw),
                  num_envs=n),
            H.Arm(f"mj-sacn{sfx}", f"SACN-{n}", f"SAC(n) (N={n})", "pql:arm_mjlab_ours", dict(algo="SACN", **kw),
                  num_envs=n),
            H.Arm(f"mj-td3{sfx}", f"TD3-1file-{n}", f"single-file TD3 (N={n})", "pql:arm_mjlab_td3", kw, num_envs=n),
            H.Arm(f"mj-fastppo{sfx}", f"FastPPO-{n}", f"FastPPO (N={n})", "pql:arm_mjlab_ours",
                  dict(algo="FastPPO", **kw), num_envs=n),
            H.Arm(f"mj-rslrl{sfx}", f"rsl_rl-{n}", f"rsl_rl runner, mjlab config (N={n})", "pql:arm_mjlab_rsl_rl",
                  kw, num_envs=n),
            H.Arm(f"mj-raw{sfx}", f"raw-{n}", f"raw simulator, busy (N={n})", "pql:arm_mjlab_raw", kw, num_envs=n,
                  mode="throughput"),
        ]
    return out


def all_arms(mujoco: bool = False) -> List[H.Arm]:
    """The seven arms on Pendulum, or (``mujoco``) the same seven on HalfCheetah-v5."""
    ours = "gym:HalfCheetah-v5" if mujoco else "Pendulum"
    gym_id = "HalfCheetah-v5" if mujoco else "Pendulum-v1"
    rllib_env = gym_id if mujoco else "rllib-fast-gym:Pendulum"
    sfx = "-mujoco" if mujoco else ""
    n = 16 if mujoco else 64
    ray_pql = [H.Arm(f"pqlray-gloo{sfx}", "PQL-Ray-p2p", f"PQL (Ray actors, gloo point to point, N={n})",
                     "pql:arm_ours", dict(algo="PQL", env=ours, backend="ray", ray_transport="collective"),
                     num_envs=n, needs_ray=True)]
    if not mujoco:
        ray_pql.insert(0, H.Arm("pqlray-store", "PQL-Ray-store", f"PQL (Ray actors, object store, N={n})",
                                "pql:arm_ours", dict(algo="PQL", env=ours, backend="ray",
                                                     ray_transport="object_store"), num_envs=n, needs_ray=True))
    return [
        H.Arm(f"pql{sfx}", "PQL", f"PQL (threads, N={n})", "pql:arm_ours", dict(algo="PQL", env=ours, backend="thread"),
              num_envs=n),
        H.Arm(f"pqlproc{sfx}", "PQL-proc", f"PQL (processes, N={n})", "pql:arm_ours",
              dict(algo="PQL", env=ours, backend="process"), num_envs=n),
        *ray_pql,
        H.Arm(f"ddpgn{sfx}", "DDPGN", f"DDPG(n) (sequential, N={n})", "pql:arm_ours", dict(algo="DDPGN", env=ours),
              num_envs=n),
        H.Arm(f"sacn{sfx}", "SACN", f"SAC(n) (sequential, N={n})", "pql:arm_ours", dict(algo="SACN", env=ours),
              num_envs=n),
        H.Arm(f"fastppo{sfx}", "FastPPO", f"FastPPO (N={n})", "pql:arm_ours", dict(algo="FastPPO", env=ours),
              num_envs=n),
        *([] if mujoco else [H.Arm("td3", "TD3-1file", "single-file TD3 (N=64)", "pql:arm_td3", {}, num_envs=64)]),
        H.Arm(f"rllib-sac{sfx}", "RLlib", "RLlib SAC (1 env)", "pql:arm_rllib_sac", dict(env=rllib_env), num_envs=1,
              needs_ray=True),
        H.Arm(f"sb3-sac{sfx}", "SB3", "SB3 SAC (1 env)", "pql:arm_sb3", dict(algo="SAC", env=gym_id), num_envs=1),
        H.Arm(f"sb3-td3{sfx}", "SB3-TD3", "SB3 TD3 (1 env)", "pql:arm_sb3", dict(algo="TD3", env=gym_id),
              num_envs=1),
    ]


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def _beta_rows(records) -> List[List[Any]]:
    rows = []
    for r in records:
        pts = [p for p in r["points"] if p.get("beta_av_achieved") is not None]
        if not r["family"].startswith("PQL") or len(pts) < 2:
            continue
        after = pts[1:]   # after warm-up (the first report includes the replay fill)
        av = [p["beta_av_achieved"] for p in after]
        pv = [p["beta_pv_achieved"] for p in after if p.get("beta_pv_achieved") is not None]
        wa = [p.get("actor_wait_fraction") or 0.0 for p in after]
        wv = [p.get("critic_wait_fraction") or 0.0 for p in after]
        rows.append([r["label"], r["seed"], f"{min(av):.2f}–{max(av):.2f} (target 8)",
                     f"{min(pv):.2f}–{max(pv):.2f} (target 2)" if pv else "–",
                     f"{sum(wa) / len(wa):.2f}", f"{sum(wv) / len(wv):.2f}"])
    return rows


def _verdict(rows) -> str:
    """PQL (each back-end) vs DDPG(n), and the fastest PQL vs every peer, for one part."""
    reached = {r["family"]: r["t_reach"] for r in rows if r["n_reached"]}
    best = {r["family"]: r["best_return"] for r in rows if r["best_return"] is not None}
    pqls = sorted(f for f in reached if f.startswith("PQL"))
    verdict = []
    if pqls:
        if "DDPGN" in reached:
            verdict += [f"{f} reached the target {reached['DDPGN'] / reached[f]:.2f}x as fast as DDPG(n)"
                        for f in pqls]
        fastest = min(pqls, key=lambda f: reached[f])
        faster = sorted(f for f, t in reached.items() if not f.startswith("PQL") and t < reached[fastest])
        verdict.append(f"no other method was faster than {fastest}" if not faster else
                       f"faster than {fastest}: {', '.join(faster)} (so the 'faster than every peer' target is "
                       f"not met here)")
    elif reached:
        verdict.append(f"PQL did not reach the target; {', '.join(sorted(reached))} did")
    else:
        order = sorted(best, key=lambda f: -best[f])
        verdict.append("no arm reached the target within the cap; best greedy return within the cap: "
                       + ", ".join(f"{f} {best[f]:,.0f}" for f in order))
    return "Reading (>1x = faster than DDPG(n)): " + "; ".join(verdict) + "."


def _returns_by_time(records, checkpoints) -> str:
    """Best greedy return reached by each wall-clock checkpoint (medians over seeds)."""
    body = []
    for row in R.aggregate_learn(records):
        cells = []
        for c in checkpoints:
            vals = []
            last = c == checkpoints[-1]   # the cap column counts the report taken at the cap itself
            for r in row["runs"]:
                rets = [p["ret"] for p in r["points"] if p["ret"] is not None and (last or p["t"] <= c)]
                vals.append(max(rets) if rets else None)
            vals = [v for v in vals if v is not None]
            cells.append(f"{sorted(vals)[len(vals) // 2]:,.0f}" if vals else "–")
        steps = max((p["steps"] for r in row["runs"] for p in r["points"]), default=0)
        body.append([row["label"]] + cells + [R.fmt_steps(steps)])
    return R.markdown_table(["arm"] + [f"by {c:g} s" for c in checkpoints] + ["env steps in the cap"], body)


def _cadences(learn) -> str:
    """The greedy evaluation cadence of the rows, e.g. '0.25 s', or '1 s (0.25 s for: a; b)' when
    older records of some arms were evaluated at another."""
    by_arm: Dict[str, float] = {}
    for r in learn:
        if "rslrl" not in r["key"]:   # rsl_rl reports its training return every iteration
            by_arm[r["label"]] = float(r.get("notes", {}).get("eval_every_s", MJLAB_CADENCE_BEFORE))
    if not by_arm:
        return f"{MJLAB_REPORT_EVERY_S:g} s"
    values = list(by_arm.values())
    main = max(set(values), key=values.count)
    other: Dict[float, List[str]] = {}
    for label, c in by_arm.items():
        if c != main:
            other.setdefault(c, []).append(label)
    return f"{main:g} s" + "".join(f" ({c:g} s for: {'; '.join(labs)})" for c, labs in sorted(other.items()))


def _mjlab_section(records, task_key: str, meta) -> List[str]:
    """Learn table, simulator rate against the raw simulator at the same N, and the goal's reading."""
    task, target = MJLAB_TASKS[task_key]
    learn = [r for r in records if r["mode"] == "learn"]
    raw = {int(r["num_envs"]): r.get("tput_overall") for r in records if r["mode"] == "throughput"}
    rows = R.aggregate_learn(learn)
    lines = [f"## mjlab {task}, 10 s episodes (>= {target:g} of 10; greedy evaluation on {MJLAB_EVAL_ENVS} envs "
             f"every {_cadences(learn)} of training, clock paused; rsl_rl: its training return; "
             f"{meta.get('mjlab_budget', 0):g} s cap)", "", R.learn_table(rows), ""]
    body = []
    for row in rows:
        n = int(row["num_envs"])
        base = raw.get(n)
        pct = (lambda x: f"{100 * x / base:.0f}%" if x and base else "–")
        body.append([row["label"], n, R.fmt_sps(row["sps_overall"]), pct(row["sps_overall"]),
                     R.fmt_sps(row["sps_sampling"]), pct(row["sps_sampling"]), R.fmt_sps(base)])
    lines += ["Simulator rate during training against the raw simulator's busy rate at the same N (overall: env "
              "steps per wall-clock second of training; in step: inside the env's step, where the Actor's "
              "threads compete with the learners for the GIL and the cores):", "",
              R.markdown_table(["arm", "N", "env-steps/s overall", "of raw", "env-steps/s in step", "of raw",
                                "raw busy"], body), ""]
    best = {}
    for row in rows:
        fam = row["family"].rsplit("-", 1)[0]
        if row["n_reached"] and (fam not in best or row["t_reach"] < best[fam][0]):
            best[fam] = (row["t_reach"], row["label"])
    if best:
        lines += ["Best N per method (median time to target): " + "; ".join(
            f"{lab} {t:.1f} s" for _, (t, lab) in sorted(best.items(), key=lambda kv: kv[1][0])), ""]
        pq = [f for f in best if f.startswith("PQL")]
        if pq:
            f0 = min(pq, key=lambda f: best[f][0])
            for peer in ("DDPGN", "SACN", "rsl_rl", "TD3-1file", "FastPPO"):
                if peer in best:
                    lines.append(f"- {best[f0][1]} vs {best[peer][1]}: {best[peer][0] / best[f0][0]:.2f}x "
                                 f"(goal >= 1.5x against DDPG(n), SAC(n), rsl_rl)")
            lines.append("")
    return lines


def build_report(records, meta) -> str:
    order = {a.key: i for i, a in enumerate(all_arms() + all_arms(True))}
    records = sorted(records, key=lambda r: (order.get(r["key"], len(order)), r["seed"]))
    mj = [r for r in records if r["key"].startswith("mj-")]
    records = [r for r in records if not r["key"].startswith("mj-")]
    pend = [r for r in records if "mujoco" not in r["key"]]
    muj = [r for r in records if "mujoco" in r["key"]]
    lines = [f"# PQL benchmark ({meta['date']})", "",
             f"Machine: {meta['machine']}; {meta['threads']} torch thread(s) per arm; "
             f"seeds {sorted({r['seed'] for r in records})} (see each table's 'reached' column for the runs per arm); "
             f"returns are greedy evaluation returns with the evaluation time excluded from the clock.", ""]
    if meta.get("contention"):
        lines += [f"**Taken under contention**: {meta['contention']}", ""]
    if meta.get("updated"):
        lines += [f"Updated {meta['updated']}.", ""]
    if pend:
        rows = R.aggregate_learn(pend)
        lines += [f"## Pendulum (>= {meta['target']:g}, {EVAL_EPISODES} evaluation episodes every "
                  f"{REPORT_EVERY_S:g} s, {meta['budget']:g} s cap)", "", R.learn_table(rows), "", _verdict(rows), "",
                  "### Achieved speed ratios of PQL (per reported iteration, after warm-up)", "",
                  R.markdown_table(["arm", "seed", "critic updates / env step", "critic / policy updates",
                                    "Actor wait fraction", "V-learner wait fraction"], _beta_rows(pend)), "",
                  "On 2 CPU cores the Actor, V-learner and P-learner share the cores. With threads every torch "
                  "call holds the GIL for its Python dispatch, and with these small networks dispatch is most of "
                  "an update, so the three threads largely take turns: the V-learner (the bottleneck) never "
                  "waits and the Actor waits most of the time while the controller holds 1:8. The Ray back-end "
                  "puts the learners in their own processes (no shared GIL) and pays for transfers instead; "
                  "point to point (gloo) costs less than the object store. On a GPU the kernels run "
                  "asynchronously and release the GIL, the setting the paper's speed-ups come from.", "",
                  f"![Pendulum curves]({NAME}.png)", ""]
    if muj:
        rows = R.aggregate_learn(muj)
        cap = meta.get("mujoco_budget", rows[0]["budget_s"])
        lines += [f"## HalfCheetah-v5 (>= {MUJOCO_TARGET:g}, {MUJOCO_EVAL_EPISODES} evaluation episodes every "
                  f"{MUJOCO_REPORT_EVERY_S:g} s, {cap:g} s cap)", "", R.learn_table(rows), "",
                  "Best greedy return reached by each wall-clock time:", "",
                  _returns_by_time(muj, [c for c in (60, 120, 240, cap) if c <= cap]), "", _verdict(rows), "",
                  "### Achieved speed ratios of PQL on HalfCheetah", "",
                  R.markdown_table(["arm", "seed", "critic updates / env step", "critic / policy updates",
                                    "Actor wait fraction", "V-learner wait fraction"], _beta_rows(muj)), "",
                  f"![HalfCheetah curves]({NAME}_mujoco.png)", ""]
    for task_key in MJLAB_TASKS:
        part = [r for r in mj if f"-{task_key}-" in r["key"]]
        if part:
            lines += _mjlab_section(part, task_key, meta)
    return "\n".join(lines)


def plot(records, path: str, target: float, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2))
    cmap = plt.get_cmap("tab10")
    fams = list(dict.fromkeys(r["family"] for r in records))
    for ax, xkey, xl in ((axes[0], "t", "wall-clock s (evaluation excluded)"), (axes[1], "steps", "env steps (log)")):
        for r in records:
            pts = [p for p in r["points"] if p["ret"] is not None and p[xkey] > 0]
            c = cmap(fams.index(r["family"]) % 10)
            ax.plot([p[xkey] for p in pts], [p["ret"] for p in pts], color=c, label=f"{r['label']} s{r['seed']}")
            if r.get("reached"):
                ax.plot([r["reached"][xkey]], [target], "o", color=c)
        ax.axhline(target, color="k", ls="--", lw=0.8)
        ax.set_xlabel(xl)
        ax.set_ylabel("greedy evaluation return")
        ax.grid(alpha=0.3)
    axes[1].set_xscale("log")
    axes[0].legend(fontsize=7)
    ax = axes[2]
    for r in records:
        if not r["family"].startswith("PQL"):
            continue
        pts = [p for p in r["points"] if p.get("beta_av_achieved") is not None]
        ax.plot([p["t"] for p in pts], [p["beta_av_achieved"] for p in pts], "o-", label="critic updates / env step")
        ax.plot([p["t"] for p in pts], [p.get("beta_pv_achieved") for p in pts], "s-", label="critic / policy updates")
    for y in (8, 2):
        ax.axhspan(0.9 * y, 1.1 * y, color="grey", alpha=0.2)
    ax.set_xlabel("wall-clock s")
    ax.set_title("PQL achieved ratios (bands: ±10%)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    H.add_common_args(p, budget=120.0, target=TARGET)
    p.add_argument("--part", choices=("pendulum", "mujoco", "mjlab", "all"), default="pendulum",
                   help="Pendulum arms, HalfCheetah-v5 arms, mjlab Cartpole (10 s episodes) arms, or all "
                   "(default %(default)s)")
    p.add_argument("--mjlab-task", choices=("balance", "swingup", "both"), default="balance")
    p.add_argument("--mjlab-ns", default=",".join(str(n) for n in MJLAB_NS), help="env counts of the mjlab arms")
    p.add_argument("--mjlab-budget", type=float, default=300.0, help="time cap per mjlab arm, seconds")
    p.add_argument("--mujoco-budget", type=float, default=360.0, help="time cap per HalfCheetah arm, seconds")
    p.add_argument("--mjlab-eval-every", type=float, default=MJLAB_REPORT_EVERY_S,
                   help="greedy evaluation cadence of the mjlab arms, seconds of training (clock paused; each "
                   "evaluation costs ~2.3 s of wall time): the time-to-target resolution (default %(default)g)")
    p.add_argument("--contention", default="", help="free text recorded in the report (e.g. other load)")
    args = p.parse_args(argv)
    os.environ["RLLIB_FAST_BENCH_MJLAB_EVAL_EVERY_S"] = repr(args.mjlab_eval_every)   # the arms' children read it
    results_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    if args.list:
        for a in all_arms() + all_arms(True) + mjlab_arms("balance") + mjlab_arms("swingup"):
            print(f"{'tput:' if a.mode == 'throughput' else ''}{a.key:16s} {a.label}")
        return
    if args.replot:
        with open(args.replot) as f:
            payload = json.load(f)
        records, meta = payload["records"], payload["meta"]
        out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.replot))
    else:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        logdir = args.logdir or H.default_logdir(NAME)
        budget = min(args.budget, 30.0) if args.quick else args.budget
        out_dir = args.out_dir or (logdir if args.quick else results_dir)
        quiet = dict(quiet_cores=args.wait_quiet if args.wait_quiet >= 0 else None,
                     quiet_timeout_s=min(args.quiet_timeout, 10.0) if args.quick else args.quiet_timeout)
        t0 = time.time()
        records = []
        parts = ["pendulum", "mujoco", "mjlab"] if args.part == "all" else [args.part]
        if "mujoco" in parts:
            try:
                import mujoco  # noqa: F401
            except ImportError:
                print("mujoco is not installed: skipping the MuJoCo part", flush=True)
                parts.remove("mujoco")
        arms: List[H.Arm] = []
        for part in parts:
            if part == "mjlab":
                ns = [int(x) for x in args.mjlab_ns.split(",") if x.strip()]
                tasks = list(MJLAB_TASKS) if args.mjlab_task == "both" else [args.mjlab_task]
                for task_key in tasks:
                    part_arms = H.select_arms(mjlab_arms(task_key, ns), args.arms)
                    arms += part_arms
                    cap = min(args.mjlab_budget, 30.0) if args.quick else args.mjlab_budget
                    print(f"mjlab {task_key}: {len(part_arms)} arms, seeds {seeds}, cap {cap:g}s", flush=True)
                    records += H.run_arms(part_arms, seeds, budget_s=cap, target=MJLAB_TASKS[task_key][1],
                                          threads=args.threads, logdir=logdir, grace_s=240.0,   # + paused evals
                                          throughput_s=args.throughput_s, **quiet)
                continue
            muj = part == "mujoco"
            part_arms = H.select_arms(all_arms(muj), args.arms)
            arms += part_arms
            cap = (min(args.mujoco_budget, 30.0) if args.quick else args.mujoco_budget) if muj else budget
            print(f"{part}: {len(part_arms)} arms, seeds {seeds}, cap {cap:g}s, logs in {logdir}", flush=True)
            records += H.run_arms(part_arms, seeds, budget_s=cap, target=MUJOCO_TARGET if muj else args.target,
                                  threads=args.threads, logdir=logdir, grace_s=60.0, **quiet)
        meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU, "
                            f"Python {platform.python_version()}",
                    threads=args.threads, seeds=seeds, budget=budget, target=args.target,
                    mujoco_budget=args.mujoco_budget,
                    mjlab_budget=min(args.mjlab_budget, 30.0) if args.quick else args.mjlab_budget, total_min=(time.time() - t0) / 60, contention=args.contention)
        if args.update:   # replace the re-run arms' records in a saved result
            note = f"{', '.join(a.key for a in arms)} re-run ({meta['contention'] or 'no note'})"
            mjlab_cap = meta["mjlab_budget"]
            records, meta, saved_dir = H.merge_update(args.update, records, meta, seeds, note=note)
            if "mjlab" in parts:   # the saved result may predate the mjlab part
                meta["mjlab_budget"] = mjlab_cap
            out_dir = args.out_dir or saved_dir
    os.makedirs(out_dir, exist_ok=True)
    md = build_report(records, meta)
    with open(os.path.join(out_dir, NAME + ".md"), "w") as f:
        f.write(md)
    mj = [r for r in records if r["key"].startswith("mj-") and r["mode"] == "learn"]
    pend = [r for r in records if "mujoco" not in r["key"] and not r["key"].startswith("mj-")]
    muj = [r for r in records if "mujoco" in r["key"]]
    for task_key, (task, target) in MJLAB_TASKS.items():
        part = [r for r in mj if f"-{task_key}-" in r["key"]]
        if part:
            plot(part, os.path.join(out_dir, f"{NAME}_mjlab_{task_key}.png"), target,
                 f"mjlab {task} (10 s episodes) to {target:g}: PQL vs baselines and peers")
    if pend:
        plot(pend, os.path.join(out_dir, NAME + ".png"), meta["target"],
             f"Pendulum to {meta['target']:g}: PQL vs baselines and peers")
    if muj:
        plot(muj, os.path.join(out_dir, NAME + "_mujoco.png"), MUJOCO_TARGET,
             f"HalfCheetah-v5 to {MUJOCO_TARGET:g}: PQL vs baselines and peers")
    if not args.replot:
        H.save_json(os.path.join(out_dir, NAME + ".json"), dict(meta=meta, records=records))
    print(md, flush=True)


if __name__ == "__main__":
    main()
