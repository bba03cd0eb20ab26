"""DQN family side by side: FastDQN / Rainbow (rllib_fast) vs RLlib's DQN vs Stable-Baselines3's DQN.

Three parts, every arm in its own child process, one after another (see
``_harness.py``), with one torch/OMP thread per arm (``--threads``, default 1):

1. **CartPole** (learn to a target): each library with its own good CartPole
   settings until the mean return of the last 100 finished episodes reaches
   475 or the time cap ``--cartpole-budget`` (180 s) runs out. FastDQN and
   Rainbow use ``CARTPOLE_DQN`` / ``CARTPOLE_RAINBOW`` from
   ``rllib_fast/presets.py``; RLlib's DQN (new API stack,
   ``num_env_runners=0``) RLlib's tuned example ``tuned_examples/dqn/cartpole_dqn.py``
   on gymnasium ``CartPole-v1``; SB3's DQN the rl-baselines3-zoo ``dqn.yml``
   CartPole-v1 entry.
2. **MinAtar Breakout** (fixed wall-clock budget): every arm trains for
   ``--minatar-budget`` seconds (default 180; the full protocol is 600) and
   reports the 100-episode mean score at the end of the budget (and the best
   seen). The same game settings everywhere: MinAtar's defaults (sticky actions
   0.1, difficulty ramping) and the minimal action set (3 actions).
3. **Batched inference vs one forward per env** (Stooke & Abbeel 2018, Fig. 2
   shape): for N = 1, 2, 4, ..., 256 envs of ``minatar:breakout`` and
   ``CartPole``, env-steps/s of acting + stepping with (a) one batched forward
   of FastDQN's Q network for all N envs, (b) N single-row forwards per step.

    python benchmarks/dqn.py --quick                     # smoke run, ~4 min, output in a temp dir
    python benchmarks/dqn.py --seeds 0                   # full run, ~25 min on 2 cores
    python benchmarks/dqn.py --minatar-budget 600 --arms minatar   # the 10-minute MinAtar protocol
    python benchmarks/dqn.py --arms fastdqn,sb3 --seeds 0,1,2
    python benchmarks/dqn.py --list
    python benchmarks/dqn.py --replot benchmarks/results/dqn.json
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402
import _report as R  # noqa: E402

NAME = "dqn"
HERE_MOD = "dqn"
TARGET = 475.0
NO_TARGET = 1e9          # MinAtar arms run to the budget
INFERENCE_NS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
INFERENCE_ENVS = ("minatar:breakout", "CartPole")
INFERENCE_EPS = 0.05
REPORT_EVERY_S = 0.5     # SB3 reports (its rollouts are 4 env steps on MinAtar) at most this often

# ---------------------------------------------------------------------------
# MinAtar settings (chosen once, not tuned; see README)
# ---------------------------------------------------------------------------
MINATAR_GAME = "breakout"
MINATAR_N = 32
# FastDQN: double Q, 3-step, epsilon-greedy; the MinAtar paper's net (16@3x3 conv + FC 128, trunk "auto").
MINATAR_DQN = dict(num_envs=MINATAR_N, batch_size=64, training_intensity=8.0, lr=5e-4, buffer_size=100_000,
                   learning_starts=5_000, target_update_period=250, n_step=3, hidden_sizes=[128],
                   epsilon_final=0.05, epsilon_timesteps=50_000)
# Rainbow: double, dueling, PER, 3-step, C51 on [0, 20], noisy nets; lr 2.5e-4, Adam eps 1.5e-4.
MINATAR_RAINBOW = dict(num_envs=MINATAR_N, batch_size=64, training_intensity=8.0, lr=2.5e-4, adam_eps=1.5e-4,
                       buffer_size=100_000, learning_starts=5_000, target_update_period=250, n_step=3,
                       hidden_sizes=[128], v_min=0.0, v_max=20.0, per_beta_anneal_steps=500_000)
# The peers (one env, as their DQN examples): the MinAtar paper's DQN (Young & Tian 2019) shortened for a
# minutes-long budget: same net, batch 32, replay 100k, gamma 0.99, Huber loss, grad-norm clip 10, Adam lr 2.5e-4,
# one update per 4 env steps (replay ratio 8, as FastDQN's), target copy every 1000 env steps, learning starts
# at 5000 steps, epsilon 1 -> 0.05 over 50k env steps.
PEER_MINATAR = dict(lr=2.5e-4, batch_size=32, buffer_size=100_000, learning_starts=5_000, train_freq=4,
                    target_update_env_steps=1_000, eps_final=0.05, eps_steps=50_000, grad_clip=10.0,
                    conv="16@3x3 stride 1 valid + ReLU", fc=[128])


# ---------------------------------------------------------------------------
# helpers (child side)
# ---------------------------------------------------------------------------
def _finite(x: Any) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def _tuned() -> Dict[str, Dict[str, Any]]:
    from rllib_fast.presets import preset

    # FastDQN's defaults are its CartPole settings (no preset); Rainbow's preset narrows the C51 support
    return dict(dqn={}, rainbow=preset("Rainbow", "CartPole"))


def _minatar_gym_env(game: str, obs_dtype: str):
    """MinAtar's own gymnasium env (``minatar.gym.BaseEnv``, what ``MinAtar/<Game>-v1``
    registers: minimal action set, MinAtar's default sticky actions and ramping)
    with its bool ``[10, 10, C]`` observation cast to ``obs_dtype`` (Box(0, 1)):
    uint8 for SB3 (4x smaller replay; bounds 0..1 keep SB3 from treating it as a
    0..255 image), float32 for RLlib (its conv encoder expects floats)."""
    import gymnasium as gym
    import numpy as np
    from minatar.gym import BaseEnv

    class Cast(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Box(0, 1, shape=env.observation_space.shape, dtype=np.dtype(obs_dtype))

        def observation(self, obs):
            return obs.astype(obs_dtype)

    return Cast(BaseEnv(game=game, use_minimal_action_set=True))


# ---------------------------------------------------------------------------
# arm functions (run in the child process)
# ---------------------------------------------------------------------------
def arm_fastdqn(ctx: H.ArmContext, env: str, algo: str = "dqn", preset: str = "cartpole",
                **overrides: Any) -> None:
    from rllib_fast.algorithms.dqn import FastDQNConfig, RainbowConfig

    if preset == "cartpole":
        kw, source = _tuned()[algo], "rllib_fast/presets.py"
    else:
        kw, source = dict(MINATAR_DQN if algo == "dqn" else MINATAR_RAINBOW), "benchmarks/dqn.py MINATAR_*"
    kw.update(overrides)
    n = int(kw.pop("num_envs"))
    cls = FastDQNConfig if algo == "dqn" else RainbowConfig
    cfg = cls().environment(env, num_envs=n, env_device="cpu").training(**kw).debugging(seed=ctx.seed)
    ctx.note(hyperparameters=dict(num_envs=n, **kw), source=source, config_class=cls.__name__)
    ctx.start_clock()
    a = cfg.build_algo()
    rollout = a.config.rollout_length * n
    ctx.note(effective_lr=a.configured_lr(), q_network=str(a.module).replace("\n", " "))
    ctx.timed(a, "_rollout", lambda out, args, kwargs: rollout)
    try:
        while True:
            r = a.train()
            er = r.get("env_runners", {})
            if ctx.report(r["num_env_steps_sampled_lifetime"], _finite(er.get("episode_return_mean")),
                          episodes=_finite(er.get("num_episodes_lifetime"))):
                break
    finally:
        a.stop()


_RLLIB_RETURNS: collections.deque = collections.deque(maxlen=100)
_RLLIB_EPISODES = [0]


def _rllib_on_episode_end(*, episode, prev_episode_chunks=None, **kwargs) -> None:
    """Runs in the local EnvRunner (same process); the earlier chunks of a long
    episode come in ``prev_episode_chunks``."""
    ret = float(episode.get_return()) + sum(float(c.get_return()) for c in (prev_episode_chunks or []))
    _RLLIB_RETURNS.append(ret)
    _RLLIB_EPISODES[0] += 1


def arm_rllib_dqn(ctx: H.ArmContext, env: str, preset: str = "cartpole") -> None:
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    runners: Dict[str, Any] = dict(num_env_runners=0, num_envs_per_env_runner=1)
    if env.startswith("rllib-fast-gym:"):
        from rllib_fast.envs.gymnasium import register_rllib_gym_envs

        register_rllib_gym_envs()
        runners["gym_env_vectorize_mode"] = "vector_entry_point"
    if env.startswith("minatar-gym:"):
        from ray.tune.registry import register_env

        game = env.split(":", 1)[1]
        register_env(env, lambda cfg: _minatar_gym_env(game, "float32"))
    if preset == "cartpole":
        # RLlib's tuned example rllib/tuned_examples/dqn/cartpole_dqn.py (new API stack)
        hp = dict(lr=5e-4, train_batch_size_per_learner=32,
                  replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50000,
                                        "alpha": 0.6, "beta": 0.4},
                  n_step=(2, 5), double_q=True, dueling=True, epsilon=[(0, 1.0), (10000, 0.02)])
        model = dict(fcnet_hiddens=[256], fcnet_activation="tanh", fcnet_bias_initializer="zeros_",
                     head_fcnet_bias_initializer="zeros_", head_fcnet_hiddens=[256])
    else:
        p = PEER_MINATAR
        hp = dict(lr=p["lr"], train_batch_size_per_learner=p["batch_size"],
                  replay_buffer_config={"type": "EpisodeReplayBuffer", "capacity": p["buffer_size"]},
                  n_step=1, double_q=True, dueling=False, grad_clip=p["grad_clip"],
                  num_steps_sampled_before_learning_starts=p["learning_starts"],
                  target_network_update_freq=p["target_update_env_steps"],
                  training_intensity=float(p["batch_size"] // p["train_freq"]),
                  epsilon=[(0, 1.0), (p["eps_steps"], p["eps_final"])])
        model = dict(conv_filters=[[16, 3, 1, "valid"]], conv_activation="relu", head_fcnet_hiddens=p["fc"],
                     head_fcnet_activation="relu")
        runners["rollout_fragment_length"] = p["train_freq"]
    cfg = (DQNConfig().environment(env).env_runners(**runners)
           .callbacks(on_episode_end=_rllib_on_episode_end)
           .training(**hp).rl_module(model_config=DefaultModelConfig(**model)).debugging(seed=ctx.seed))
    ctx.note(hyperparameters={**hp, **model, **runners})
    ctx.start_clock()
    algo = cfg.build_algo()
    runner = algo.env_runner_group.local_env_runner
    ctx.timed(runner, "sample", lambda out, a, k: sum(len(e) for e in out))
    try:
        while True:
            r = algo.train()
            ret = sum(_RLLIB_RETURNS) / len(_RLLIB_RETURNS) if _RLLIB_RETURNS else None
            if ctx.report(r["num_env_steps_sampled_lifetime"], ret, episodes=_RLLIB_EPISODES[0],
                          lib_ret=_finite(r.get("env_runners", {}).get("episode_return_mean"))):
                break
    finally:
        algo.stop()


def _sb3_minatar_extractor():
    import torch
    from torch import nn
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarCNN(BaseFeaturesExtractor):
        """The MinAtar paper's conv: channels-last [B, 10, 10, C] -> 16@3x3 valid conv + ReLU -> 1024."""

        def __init__(self, observation_space):
            h, w, c = observation_space.shape
            super().__init__(observation_space, features_dim=16 * (h - 2) * (w - 2))
            self.net = nn.Sequential(nn.Conv2d(c, 16, 3, 1), nn.ReLU(), nn.Flatten())

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.net(obs.permute(0, 3, 1, 2).float())

    return MinAtarCNN


def arm_sb3_dqn(ctx: H.ArmContext, env: str, preset: str = "cartpole") -> None:
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    total = 10 ** 8  # run until our callback stops it; exploration_fraction rescaled to keep the schedule
    if preset == "cartpole":
        # rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4: epsilon decays over 8000 steps)
        hp = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                  target_update_interval=10, train_freq=256, gradient_steps=128,
                  exploration_fraction=0.16 * 5e4 / total, exploration_final_eps=0.04,
                  policy_kwargs=dict(net_arch=[256, 256]))
        shown = dict(hp, exploration_fraction="0.16 of 5e4 steps (8000 steps)")
        make_env: Any = env
        policy = "MlpPolicy"
    else:
        p = PEER_MINATAR
        game = env.split(":", 1)[1]
        hp = dict(learning_rate=p["lr"], batch_size=p["batch_size"], buffer_size=p["buffer_size"],
                  learning_starts=p["learning_starts"], gamma=0.99, train_freq=p["train_freq"], gradient_steps=1,
                  target_update_interval=p["target_update_env_steps"], max_grad_norm=p["grad_clip"],
                  exploration_initial_eps=1.0, exploration_final_eps=p["eps_final"],
                  exploration_fraction=p["eps_steps"] / total,
                  policy_kwargs=dict(features_extractor_class=_sb3_minatar_extractor(), net_arch=p["fc"],
                                     normalize_images=False))
        shown = dict({k: v for k, v in hp.items() if k != "policy_kwargs"},
                     exploration_fraction=f"{p['eps_steps']} env steps", features_extractor=p["conv"],
                     net_arch=p["fc"], obs="uint8 Box(0, 1, (10, 10, 4))")
        make_env = lambda: _minatar_gym_env(game, "uint8")  # noqa: E731
        policy = "MlpPolicy"
    ctx.note(hyperparameters=shown)
    every = 0.0 if preset == "cartpole" else REPORT_EVERY_S  # CartPole: every rollout (256 steps)

    class Report(BaseCallback):
        stop = False
        last = -1e9

        def _report(self) -> None:
            buf = self.model.ep_info_buffer
            ret = sum(e["r"] for e in buf) / len(buf) if buf else None
            Report.last = ctx.elapsed
            Report.stop = ctx.report(self.model.num_timesteps, ret, episodes=self.model._episode_num)

        def _on_rollout_end(self) -> None:
            if ctx.elapsed - Report.last >= every:
                self._report()

        def _on_training_end(self) -> None:
            if not Report.stop:
                self._report()

        def _on_step(self) -> bool:
            if ctx.elapsed >= ctx.budget_s and not Report.stop:
                self._report()
            return not Report.stop

    ctx.start_clock()
    venv = make_vec_env(make_env, n_envs=1, seed=ctx.seed)
    model = DQN(policy, venv, seed=ctx.seed, device="cpu", verbose=0, **hp)
    ctx.timed(model, "collect_rollouts", lambda out, a, k: out.episode_timesteps)
    model.learn(total_timesteps=total, callback=Report())
    venv.close()


def arm_inference(ctx: H.ArmContext, envs: Sequence[str], ns: Sequence[int], seconds: float = 1.0,
                  warmup_steps: int = 10) -> None:
    """env-steps/s of acting + stepping: one batched ``algo._act`` for all N
    envs vs N single-row ``algo._act`` calls, with FastDQN's own Q network
    (CartPole: CARTPOLE_DQN's 128-128 MLP; MinAtar: MINATAR_DQN's conv + 128)
    and env (``algo.env``). Epsilon fixed at 0.05; no replay writes, no learning."""
    import torch
    from rllib_fast.algorithms.dqn import FastDQNConfig

    results: List[Dict[str, Any]] = []
    ctx.start_clock()
    for env in envs:
        base = dict(MINATAR_DQN) if env.startswith("minatar:") else _tuned()["dqn"]
        base.pop("num_envs")
        for n in ns:
            kw = dict(base, buffer_size=max(1_000, 4 * n))
            a = FastDQNConfig().environment(env, num_envs=n, env_device="cpu").training(**kw) \
                .debugging(seed=ctx.seed).build_algo()
            for mode in ("batched", "per_env"):
                obs = a.obs
                act_s = step_s = 0.0
                k = 0
                t_start = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    if mode == "batched":
                        act = a._act(obs, INFERENCE_EPS)
                    else:
                        act = torch.cat([a._act(obs[i:i + 1], INFERENCE_EPS) for i in range(n)])
                    t1 = time.perf_counter()
                    obs = a.env.step(act).obs
                    t2 = time.perf_counter()
                    k += 1
                    if k == warmup_steps:
                        act_s = step_s = 0.0
                        t_start = t2
                    elif k > warmup_steps:
                        act_s += t1 - t0
                        step_s += t2 - t1
                        if t2 - t_start >= seconds and k - warmup_steps >= 5:
                            break
                steps = k - warmup_steps
                wall = time.perf_counter() - t_start
                results.append(dict(env=env, n=n, mode=mode, sps=steps * n / wall, act_us=1e6 * act_s / steps,
                                    step_us=1e6 * step_s / steps, steps=steps))
                ctx.note(inference=results)  # rewritten each time: a killed run keeps what it measured
            a.stop()


# ---------------------------------------------------------------------------
# arms
# ---------------------------------------------------------------------------
FAM_FAST = "FastDQN (rllib_fast)"
FAM_RAINBOW = "Rainbow (rllib_fast)"
FAM_RLLIB = "RLlib DQN"
FAM_RLLIB_BRIDGE = "RLlib DQN, bridge (our CartPole)"
FAM_SB3 = "SB3 DQN"
TASK_OF = {"cp": "cartpole", "ma": "minatar"}
OPTIONAL = {"rllib-bridge-cp"}  # run only when named in --arms


def all_arms() -> List[H.Arm]:
    arms: List[H.Arm] = []
    cp, rb = _cartpole_n()
    arms.append(H.Arm("fastdqn-cp", FAM_FAST, f"FastDQN N={cp}", f"{HERE_MOD}:arm_fastdqn",
                      dict(env="CartPole", algo="dqn"), num_envs=cp))
    arms.append(H.Arm("rainbow-cp", FAM_RAINBOW, f"Rainbow N={rb}", f"{HERE_MOD}:arm_fastdqn",
                      dict(env="CartPole", algo="rainbow"), num_envs=rb))
    arms.append(H.Arm("rllib-cp", FAM_RLLIB, "RLlib DQN CartPole-v1", f"{HERE_MOD}:arm_rllib_dqn",
                      dict(env="CartPole-v1"), num_envs=1, needs_ray=True))
    arms.append(H.Arm("rllib-bridge-cp", FAM_RLLIB_BRIDGE, "RLlib DQN bridge", f"{HERE_MOD}:arm_rllib_dqn",
                      dict(env="rllib-fast-gym:CartPole"), num_envs=1, needs_ray=True))
    arms.append(H.Arm("sb3-cp", FAM_SB3, "SB3 DQN (zoo) CartPole-v1", f"{HERE_MOD}:arm_sb3_dqn",
                      dict(env="CartPole-v1"), num_envs=1))
    ma = f"minatar:{MINATAR_GAME}"
    arms.append(H.Arm("fastdqn-ma", FAM_FAST, f"FastDQN N={MINATAR_N}", f"{HERE_MOD}:arm_fastdqn",
                      dict(env=ma, algo="dqn", preset="minatar"), num_envs=MINATAR_N))
    arms.append(H.Arm("rainbow-ma", FAM_RAINBOW, f"Rainbow N={MINATAR_N}", f"{HERE_MOD}:arm_fastdqn",
                      dict(env=ma, algo="rainbow", preset="minatar"), num_envs=MINATAR_N))
    arms.append(H.Arm("rllib-ma", FAM_RLLIB, "RLlib DQN", f"{HERE_MOD}:arm_rllib_dqn",
                      dict(env=f"minatar-gym:{MINATAR_GAME}", preset="minatar"), num_envs=1, needs_ray=True))
    arms.append(H.Arm("sb3-ma", FAM_SB3, "SB3 DQN (MinAtar CNN)", f"{HERE_MOD}:arm_sb3_dqn",
                      dict(env=f"minatar-gym:{MINATAR_GAME}", preset="minatar"), num_envs=1))
    arms.append(H.Arm("inference", "inference", "batched vs per-env inference", f"{HERE_MOD}:arm_inference",
                      dict(envs=list(INFERENCE_ENVS), ns=list(INFERENCE_NS))))
    return arms


def _cartpole_n():
    try:
        t = _tuned()
        return t["dqn"]["num_envs"], t["rainbow"]["num_envs"]
    except Exception:  # noqa: BLE001 - --list without the package
        return 16, 16


def task_of(key: str) -> str:
    return "inference" if key == "inference" else TASK_OF[key.rsplit("-", 1)[1]]


def select(arms: List[H.Arm], spec: str) -> List[H.Arm]:
    words = [w.strip() for w in spec.split(",") if w.strip()]
    tasks = {"cartpole", "minatar", "inference"}
    if spec in ("all", "") or not words:
        return [a for a in arms if a.key not in OPTIONAL]
    out = [a for a in arms if task_of(a.key) in words and a.key not in OPTIONAL]
    rest = [w for w in words if w not in tasks]
    if rest:
        out += [a for a in H.select_arms(arms, ",".join(rest)) if a not in out]
    return [a for a in arms if a in out]  # keep the declared order


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def _fam_rows(rows, task):
    return [r for r in rows if task_of(r["key"]) == task]


def minatar_table(rows: Sequence[Dict[str, Any]]) -> str:
    headers = ["arm", "N", "100-ep mean score at budget end", "best 100-ep mean", "episodes", "env steps",
               "env-steps/s overall", "env-steps/s sampling", "startup (s)", "CPU s (proc)",
               "peak RSS MB (proc)", "peak RSS MB (tree)", "other load (cores)"]
    body = []
    for r in rows:
        runs = r["runs"]
        finals = [x.get("final_return") for x in runs]
        fin = R.median(finals)
        score = R.fmt_num(fin, 2)
        if len(runs) > 1 and fin is not None:
            fs = [f for f in finals if f is not None]
            score += f" [{min(fs):.2f}–{max(fs):.2f}]"
        eps = R.median((x["points"][-1].get("episodes") if x["points"] else None) for x in runs)
        status = r["status"]
        if status != "ok":
            score += f" ({status})"
        body.append([r["label"], r["num_envs"] or "–", score, R.fmt_num(r["best_return"], 2),
                     R.fmt_num(eps, 0), R.fmt_steps(R.median(x.get("final_steps") for x in runs)),
                     R.fmt_sps(r["sps_overall"]), R.fmt_sps(r["sps_sampling"]), R.fmt_num(r["startup_s"]),
                     R.fmt_num(R.median(x.get("cpu_s") for x in runs)), R.fmt_num(r["rss_proc"], 0), R.fmt_num(r["rss_tree"], 0),
                     R.fmt_num(r["foreign"], 2)])
    return R.markdown_table(headers, body)


def inference_results(records) -> List[Dict[str, Any]]:
    for r in records:
        if r["key"] == "inference":
            return list(r.get("notes", {}).get("inference") or [])
    return []


def inference_table(res: Sequence[Dict[str, Any]]) -> str:
    envs = list(dict.fromkeys(x["env"] for x in res))
    ns = sorted({x["n"] for x in res})
    by = {(x["env"], x["n"], x["mode"]): x for x in res}
    headers = ["N"]
    for e in envs:
        headers += [f"{e}: batched", "per-env forwards", "speed-up", "act µs/step (batched / per-env)"]
    body = []
    for n in ns:
        row: List[Any] = [n]
        for e in envs:
            b, p = by.get((e, n, "batched")), by.get((e, n, "per_env"))
            row += [R.fmt_sps(b["sps"]) if b else "–", R.fmt_sps(p["sps"]) if p else "–",
                    R.fmt_ratio(R.ratio(b["sps"], p["sps"])) if b and p else "–",
                    f"{b['act_us']:.0f} / {p['act_us']:.0f}" if b and p else "–"]
        body.append(row)
    return R.markdown_table(headers, body)


def build_report(records: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    target = meta["target"]
    rows = R.aggregate_learn(records)
    cp_rows, ma_rows = _fam_rows(rows, "cartpole"), _fam_rows(rows, "minatar")
    by_key = {r["key"]: r for r in rows}
    out = ["# DQN family: FastDQN / Rainbow vs RLlib DQN vs SB3 DQN", "",
           f"{meta['date']} · {meta['machine']} · torch threads per arm: {meta['threads']} · "
           f"seeds: {meta['seeds']} · CartPole cap {meta['cartpole_budget']:g} s · MinAtar budget "
           f"{meta['minatar_budget']:g} s · full run took {meta['total_min']:.1f} min"
           + (" · **quick smoke run**" if meta.get("quick") else "")
           + (f" (arms re-run on {meta['updated']}: {meta['update_min']:.1f} min)" if meta.get("updated") else ""),
           ""]
    if cp_rows:
        out += [f"## CartPole: wall-clock to a 100-episode mean return of {target:g}", "", R.learn_table(cp_rows), "",
                "*Time to target* counts from algorithm construction (env, network and replay build included); "
                "*startup* (imports, `ray.init`) is separate. *env-steps/s overall* = env steps / wall-clock of the "
                "whole run (acting, env, replay, learning); *sampling* = inside the sampling call only (FastDQN "
                "`_rollout`, RLlib `EnvRunner.sample`, SB3 `collect_rollouts`). FastDQN/Rainbow use gymnasium-exact "
                "CartPole dynamics in batched torch (`CartPole`); the peers use gymnasium's `CartPole-v1`. "
                "Median over seeds.", ""]
    if ma_rows:
        out += [f"## MinAtar {MINATAR_GAME.title()}: score within a fixed {meta['minatar_budget']:g} s budget", "",
                minatar_table(ma_rows), "",
                "*Score* = mean return of the last 100 finished episodes at the end of the budget (budget counted "
                "from algorithm construction); *best* = the highest such value seen during the run. Random play "
                "scores about 0.5. The same game everywhere: MinAtar's `breakout`, minimal action set (3 actions), "
                "sticky actions 0.1, difficulty ramping; FastDQN/Rainbow via `minatar:breakout` (our tensor env, "
                "uint8 `[N,10,10,4]`), the peers via MinAtar's own gymnasium env (`minatar.gym.BaseEnv`, what "
                "`MinAtar/Breakout-v1` registers).", ""]
    inf = inference_results(records)
    if inf:
        out += ["## Sampling throughput: one batched forward vs one forward per env", "", inference_table(inf), "",
                "env-steps/s of `a = algo._act(obs, 0.05); obs = algo.env.step(a).obs` with FastDQN's Q network "
                "(MinAtar: conv 16@3x3 + FC 128; CartPole: MLP 128-128), no replay writes and no learning; "
                "*per-env* replaces the one batched `_act` by N single-row `_act` calls (one forward each). "
                "MinAtar's envs are N Python objects stepped in a loop (the env step is part of both columns). "
                "One torch thread.", "", "![inference](dqn_inference.png)", ""]

    lines: List[str] = []

    def t_of(key):
        r = by_key.get(key)
        return r["t_reach"] if r and r["n_reached"] else None

    for fast_key, fast_name in (("fastdqn-cp", "FastDQN"), ("rainbow-cp", "Rainbow")):
        tf = t_of(fast_key)
        if fast_key not in by_key:
            continue
        for key, name in (("rllib-cp", "RLlib DQN (CartPole-v1)"), ("rllib-bridge-cp", "RLlib DQN (bridge)"),
                          ("sb3-cp", "SB3 DQN (zoo)")):
            if key not in by_key:
                continue
            tr = t_of(key)
            if tf is None:
                lines.append(f"- {fast_name} speed-up in time-to-{target:g} vs {name}: n/a ({fast_name} did not "
                             f"reach {target:g} in {by_key[fast_key]['budget_s']:g} s"
                             + ("" if tr is None else f"; {name} did in {tr:.1f} s") + ")")
            elif tr is None:
                lines.append(f"- {fast_name} speed-up in time-to-{target:g} vs {name}: > "
                             f"{R.fmt_ratio(R.ratio(by_key[key]['budget_s'], tf))} ({name} did not reach {target:g} "
                             f"in {by_key[key]['budget_s']:g} s; best {R.fmt_num(by_key[key]['best_return'], 0)})")
            else:
                lines.append(f"- {fast_name} speed-up in time-to-{target:g} vs {name}: {R.fmt_ratio(R.ratio(tr, tf))} "
                             f"({tf:.1f} s vs {tr:.1f} s)")
    score = {r["key"]: R.median(x.get("final_return") for x in r["runs"]) for r in ma_rows}
    for fast_key, fast_name in (("fastdqn-ma", "FastDQN"), ("rainbow-ma", "Rainbow")):
        if fast_key not in score:
            continue
        for key, name in (("rllib-ma", "RLlib DQN"), ("sb3-ma", "SB3 DQN")):
            if key not in score:
                continue
            a, b = score[fast_key], score[key]
            lines.append(f"- MinAtar score within {meta['minatar_budget']:g} s, {fast_name} vs {name}: "
                         f"{R.fmt_num(a, 2)} vs {R.fmt_num(b, 2)}"
                         + (f" ({R.fmt_ratio(R.ratio(a, b))})" if a is not None and b else ""))
            sa, sb = by_key[fast_key]["sps_overall"], by_key[key]["sps_overall"]
            lines.append(f"  - env-steps/s overall, {fast_name} vs {name}: {R.fmt_sps(sa)} vs {R.fmt_sps(sb)} "
                         f"({R.fmt_ratio(R.ratio(sa, sb))})")
    if inf:
        by = {(x["env"], x["n"], x["mode"]): x["sps"] for x in inf}
        for e in dict.fromkeys(x["env"] for x in inf):
            ns = sorted({x["n"] for x in inf if x["env"] == e})
            big = ns[-1]
            lines.append(f"- {e}: batched inference vs one forward per env at N={big}: "
                         f"{R.fmt_ratio(R.ratio(by.get((e, big, 'batched')), by.get((e, big, 'per_env'))))}; "
                         f"batched N={big} vs N=1: "
                         f"{R.fmt_ratio(R.ratio(by.get((e, big, 'batched')), by.get((e, 1, 'batched'))))}")
    if lines:
        out += ["## Ratios", ""] + lines + [""]
    notes = []
    for r in rows:
        hp = r["notes"].get("hyperparameters")
        if hp:
            src = r["notes"].get("source")
            extra = f"; effective lr {r['notes']['effective_lr']:g}" if r["notes"].get("effective_lr") else ""
            notes.append(f"- {task_of(r['key'])} / {r['label']}: `{json.dumps(hp, default=str)}`"
                         + (f" (from {src}{extra})" if src else ""))
    if notes:
        out += ["## Settings", ""] + notes + [""]
    bad = [f"- {x['label']} ({task_of(x['key'])}, seed {x['seed']}): {x['status']}"
           + (f": {x.get('error')}" if x.get("error") else "") + f" — log `{x.get('log')}`"
           for x in records if x["status"] != "ok"]
    if bad:
        out += ["## Failed or killed runs", ""] + bad + [""]
    return "\n".join(out)


# ---------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------
def plot_learning(records: List[Dict[str, Any]], path: str, meta: Dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    learn = [r for r in records if r["mode"] == "learn" and r["key"] != "inference" and r["points"]]
    fams = list(dict.fromkeys(r["family"] for r in records if r["key"] != "inference"))
    cmap = plt.get_cmap("tab10")
    color = {f: cmap(i % 10) for i, f in enumerate(fams)}
    tasks = [t for t in ("cartpole", "minatar") if any(task_of(r["key"]) == t for r in learn)]
    if not tasks:
        return
    fig, axes = plt.subplots(len(tasks), 2, figsize=(15, 5.2 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        runs = [r for r in learn if task_of(r["key"]) == task]
        for col, (xkey, xlabel) in enumerate((("t", "wall-clock s from algorithm construction"),
                                              ("steps", "env steps (log)"))):
            ax = axes[row][col]
            drawn = set()
            for r in runs:
                pts = [p for p in r["points"] if p["ret"] is not None and p[xkey] > 0]
                if not pts:
                    continue
                xs, ys = [p[xkey] for p in pts], [p["ret"] for p in pts]
                c = color[r["family"]]
                lab = r["label"] if r["label"] not in drawn else None
                drawn.add(r["label"])
                ax.plot(xs, ys, color=c, lw=1.6, alpha=0.85, label=lab)
                if task == "cartpole" and r.get("reached"):
                    ax.plot([r["reached"][xkey]], [r["target"]], "o", color=c, ms=6)
                else:
                    ax.plot([xs[-1]], [ys[-1]], "x", color=c, ms=8, mew=2)
            if task == "cartpole":
                ax.axhline(meta["target"], color="k", ls="--", lw=0.8)
                ax.set_ylim(0, 520)
                ax.set_xscale("log")
                ax.set_title(f"CartPole: return vs {'wall-clock (log)' if xkey == 't' else 'env steps'} "
                             f"(o: reached {meta['target']:g}, x: {meta['cartpole_budget']:g} s cap)")
                if xkey == "t":
                    xlabel = "wall-clock s from algorithm construction (log)"
            else:
                if xkey == "steps":
                    ax.set_xscale("log")
                else:
                    ax.axvline(meta["minatar_budget"], color="k", ls=":", lw=0.8)
                ax.set_ylim(bottom=0)
                ax.set_title(f"MinAtar {MINATAR_GAME}: score vs {'wall-clock' if xkey == 't' else 'env steps'} "
                             f"(x: end of the {meta['minatar_budget']:g} s budget)")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("mean return, last 100 episodes")
            ax.grid(alpha=0.3, which="major")
            ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"DQN family ({meta['machine']}, {meta['threads']} torch thread per arm)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_inference(res: Sequence[Dict[str, Any]], path: str, meta: Dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(x["env"] for x in res))
    if not envs:
        return
    fig, axes = plt.subplots(1, len(envs), figsize=(6.5 * len(envs), 4.8), squeeze=False)
    for ax, e in zip(axes[0], envs):
        for mode, style, lab in (("batched", "o-", "one batched forward for all N envs"),
                                 ("per_env", "s--", "one forward per env (N forwards/step)")):
            pts = sorted((x["n"], x["sps"]) for x in res if x["env"] == e and x["mode"] == mode)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, lw=1.8, ms=5, label=lab)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ns = sorted({x["n"] for x in res if x["env"] == e})
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.set_xlabel("number of envs N (log)")
        ax.set_ylabel("env-steps/s, acting + env step (log)")
        ax.set_title(f"{e}: FastDQN Q-net, epsilon 0.05")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Sampling throughput vs N, batched vs per-env inference ({meta['machine']}, 1 torch thread)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    H.add_common_args(p, budget=180.0, target=TARGET)
    p.set_defaults(arms="all")
    p.add_argument("--cartpole-budget", type=float, default=None, help="time cap per CartPole arm, s "
                   "(default 180; --budget is an alias)")
    p.add_argument("--minatar-budget", type=float, default=180.0, help="fixed training time per MinAtar arm, s "
                   "(default %(default)s; the full protocol: 600)")
    p.add_argument("--inference-s", type=float, default=1.0, help="measured seconds per (env, N, mode) point")
    args = p.parse_args(argv)
    arms = all_arms()
    if args.list:
        for a in arms:
            print(f"{a.key:18s} {task_of(a.key):10s} {a.label}" + ("   (optional: only when named)"
                                                                 if a.key in OPTIONAL else ""))
        print("\n--arms takes keys, families (fastdqn, rainbow, rllib, sb3) or tasks (cartpole, minatar, inference)")
        return
    cartpole_budget = args.cartpole_budget if args.cartpole_budget is not None else args.budget
    results_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    if args.replot:
        with open(args.replot) as f:
            payload = json.load(f)
        records, meta = payload["records"], payload["meta"]
        out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.replot))
    else:
        minatar_budget, inference_s = args.minatar_budget, args.inference_s
        if args.quick:
            cartpole_budget = min(cartpole_budget, 20.0)
            minatar_budget = min(minatar_budget, 20.0)
            inference_s = min(inference_s, 0.2)
            args.quiet_timeout = min(args.quiet_timeout, 10.0)
        arms = select(arms, args.arms)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        logdir = args.logdir or H.default_logdir(NAME)
        out_dir = args.out_dir or (logdir if args.quick else results_dir)
        print(f"{len(arms)} arms ({', '.join(a.key for a in arms)}), seeds {seeds}, CartPole cap "
              f"{cartpole_budget:g}s, MinAtar budget {minatar_budget:g}s, logs in {logdir}", flush=True)
        quiet = dict(quiet_cores=args.wait_quiet if args.wait_quiet >= 0 else None, quiet_timeout_s=args.quiet_timeout)
        t0 = time.time()
        records: List[Dict[str, Any]] = []
        for task in ("cartpole", "minatar", "inference"):
            group = [a for a in arms if task_of(a.key) == task]
            if not group:
                continue
            if task == "inference":
                for a in group:
                    a.kwargs["seconds"] = inference_s
                # ~ (warm-up + measure) per point, plus a FastDQN build per (env, N)
                budget = len(INFERENCE_ENVS) * len(INFERENCE_NS) * (2 * inference_s + 3) + 60
                print(f"-- inference: N in {list(INFERENCE_NS)}, {inference_s:g} s per point", flush=True)
                for a in group:
                    if quiet["quiet_cores"] is not None:
                        H.wait_for_quiet(quiet["quiet_cores"], quiet["quiet_timeout_s"])
                    spec = H.RunSpec(arm=asdict(a), seed=seeds[0], budget_s=budget, target=NO_TARGET,
                                     threads=args.threads)
                    rec = H.run_one(spec, logdir, grace_s=60.0, verbose=False)
                    res = inference_results([rec])
                    print(f"  {a.label} [{rec['status']}] {len(res)} points in {rec['wall_total_s']:.0f} s "
                          f"(other load {R.fmt_num(rec.get('foreign_cpu_cores'), 2)} cores)", flush=True)
                    if rec["status"] != "ok":
                        print(f"    see {rec['log']}", flush=True)
                    records.append(rec)
                continue
            budget = cartpole_budget if task == "cartpole" else minatar_budget
            target = args.target if task == "cartpole" else NO_TARGET
            print(f"-- {task}: {len(group)} arms, {'cap' if task == 'cartpole' else 'budget'} {budget:g} s", flush=True)
            records += H.run_arms(group, seeds, budget_s=budget, target=target, threads=args.threads,
                                  logdir=logdir, grace_s=90.0, **quiet)
        meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU, "
                            f"Python {platform.python_version()}",
                    threads=args.threads, seeds=seeds, cartpole_budget=cartpole_budget,
                    minatar_budget=minatar_budget, target=args.target, inference_s=inference_s,
                    total_min=(time.time() - t0) / 60, quick=args.quick)
        if args.update:
            records, meta, saved_dir = H.merge_update(args.update, records, meta, seeds)
            out_dir = args.out_dir or saved_dir
    os.makedirs(out_dir, exist_ok=True)
    md = build_report(records, meta)
    md_path = os.path.join(out_dir, NAME + ".md")
    png, inf_png = os.path.join(out_dir, NAME + ".png"), os.path.join(out_dir, NAME + "_inference.png")
    with open(md_path, "w") as f:
        f.write(md + f"\n![learning curves]({NAME}.png)\n")
    plot_learning(records, png, meta)
    plot_inference(inference_results(records), inf_png, meta)
    if not args.replot or args.update:
        H.save_json(os.path.join(out_dir, NAME + ".json"), dict(meta=meta, records=records))
    print("\n" + md)
    print(f"\nwrote {md_path}, {png}, {inf_png}")


if __name__ == "__main__":
    main()
