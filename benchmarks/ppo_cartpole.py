"""PPO on CartPole, side by side: FastPPO vs RLlib's PPO vs Stable-Baselines3 vs a single-file PPO.

Every arm runs in its own child process, one after another (see ``_harness.py``),
with the same thread settings (``--threads``, default 1: ``torch.set_num_threads(1)``
and ``OMP/MKL_NUM_THREADS=1`` in every arm; on a 2-core machine this leaves the
second core to Ray's own processes and to the OS, and the tiny MLPs gain nothing
from intra-op threads at N=64).

Two kinds of arms:

* **learn** arms run each library with its own CartPole settings until the mean
  return of the last 100 finished episodes reaches ``--target`` (475) or the
  time cap ``--budget`` runs out. The metric is computed the same way for all:
  FastPPO's own ``env_runners/episode_return_mean`` (a ring of the last 100
  episodes), SB3's ``ep_info_buffer`` (last 100 Monitor episodes), the
  single-file script's deque, and for RLlib a 100-episode deque filled by an
  ``on_episode_end`` callback (RLlib's own ``episode_return_mean`` is a
  differently windowed/smoothed number; it is logged alongside as ``lib_ret``).
* **throughput** arms (``tput:``) run a fixed window of training iterations with
  *matched* PPO settings in every library (horizon T = 32/16/8 at N = 64/1024/4096,
  4 epochs x 4 minibatches, 64-64 tanh actor and critic) and report env-steps/s
  of whole ``train()`` iterations (sampling + learning) and of sampling alone.

    python benchmarks/ppo_cartpole.py --quick            # smoke run, ~5 min
    python benchmarks/ppo_cartpole.py                    # full run, ~15 min
    python benchmarks/ppo_cartpole.py --arms fastppo,single --seeds 0,1,2
    python benchmarks/ppo_cartpole.py --replot benchmarks/results/ppo_cartpole.json
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
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402
import _report as R  # noqa: E402

NAME = "ppo_cartpole"
TARGET = 475.0
# horizon T per N for the matched throughput settings (Stooke & Abbeel: shorter
# horizons as N grows so the batch T*N stays moderate)
MATCHED_T = {8: 32, 64: 32, 1024: 16, 4096: 8}
THROUGHPUT_NS = (64, 1024, 4096)

# FastPPO learn settings per N. N=64: FastPPO's defaults (docs/defaults.md).
# N=1024/4096: picked from ~10 runs on this 2-core machine (Stooke & Abbeel:
# short horizon as N grows, larger lr, more minibatches so the number of updates
# per sample does not collapse); rollout_length=8/4 with 4 minibatches and lr
# 3e-4 did not reach 475 in 70 s at either N.
FASTPPO_LEARN: Dict[int, Dict[str, Any]] = {
    64: {},
    1024: dict(rollout_length=16, num_epochs=4, num_minibatches=8, lr=1e-3, adaptive_lr_kl_target=0.01),
    4096: dict(rollout_length=8, num_epochs=4, num_minibatches=8, lr=1e-3, adaptive_lr_kl_target=0.01),
}


def matched(n: int) -> Dict[str, Any]:
    t = MATCHED_T.get(n, max(1, 32768 // n))
    return dict(T=t, epochs=4, minibatches=4, lr=3e-4, batch=t * n)


# ---------------------------------------------------------------------------
# arm functions (run in the child process)
# ---------------------------------------------------------------------------
def _finite(x: Any) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def fastppo_kwargs(n: int, preset: str) -> Tuple[Dict[str, Any], str]:
    if preset == "defaults":
        return {}, "FastPPOConfig defaults"
    if preset == "matched":
        m = matched(n)
        return dict(rollout_length=m["T"], num_epochs=m["epochs"], num_minibatches=m["minibatches"],
                    lr=m["lr"]), "matched"
    if n in FASTPPO_LEARN:
        return dict(FASTPPO_LEARN[n]), ("FastPPOConfig defaults" if not FASTPPO_LEARN[n] else
                                        "benchmarks/ppo_cartpole.py FASTPPO_LEARN")
    return dict(FASTPPO_LEARN[1024]), "benchmarks/ppo_cartpole.py FASTPPO_LEARN[1024]"


def arm_fastppo(ctx: H.ArmContext, num_envs: int, preset: str = "learn", **overrides: Any) -> None:
    from rllib_fast.algorithms.ppo import FastPPOConfig

    kw, source = fastppo_kwargs(num_envs, preset)
    kw.update(overrides)
    ctx.note(hyperparameters=kw, source=source)
    cfg = (FastPPOConfig().environment("CartPole", num_envs=num_envs, env_device="cpu")
           .training(**kw).debugging(seed=ctx.seed))
    ctx.start_clock()
    algo = cfg.build_algo()
    horizon = algo.horizon
    try:
        ctx.note(decorrelation_steps=float(algo.metrics.peek("num_env_steps_sampled_lifetime", default=0)))
    except Exception:  # noqa: BLE001 - informational only
        pass
    ctx.timed(algo, "_rollout", lambda out, a, k: horizon * num_envs)
    try:
        while True:
            r = algo.train()
            if ctx.report(r["num_env_steps_sampled_lifetime"], _finite(r["env_runners"].get("episode_return_mean"))):
                break
    finally:
        algo.stop()


_RLLIB_RETURNS: collections.deque = collections.deque(maxlen=100)


def _rllib_on_episode_end(*, episode, prev_episode_chunks=None, **kwargs) -> None:
    """Runs in the local EnvRunner (same process). ``episode`` is only the
    chunk sampled since the last ``sample()`` call (~T steps); the earlier
    chunks of the same episode come in ``prev_episode_chunks``."""
    ret = float(episode.get_return()) + sum(float(c.get_return()) for c in (prev_episode_chunks or []))
    _RLLIB_RETURNS.append(ret)


# RLlib PPO settings for the learn arms: (training hyperparameters, model config).
# "example" is RLlib's own tuned example rllib/tuned_examples/ppo/cartpole_ppo.py
# (new API stack). "tuned" is the best of the sweep below (arms `rllib-sweep-*`,
# gymnasium's native vectorised CartPole-v1 at N=64): all 15 with seed 0 (60 s
# cap), the three fastest again with seeds 1 and 2; b4096-m1024-e8-lr1e-3-tanh64
# reached 475 in all three (16.7 / 37.9 / 13.4 s), b2048-m512-e10-tanh64 and the
# SB3-zoo translation zoo-b1024 did not (1/3, 2/3). The table is in
# results/ppo_cartpole.md.
RLLIB_PRESETS: Dict[str, Tuple[Dict[str, Any], Dict[str, Any]]] = {
    "example": (dict(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01, train_batch_size_per_learner=4000, minibatch_size=128),
                dict(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)),
    "tuned": (dict(lr=1e-3, num_epochs=8, vf_loss_coeff=0.5, train_batch_size_per_learner=4096, minibatch_size=1024),
              dict(fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False)),
}
# The small sweep behind "tuned": batch per iteration (T*N at N=64), minibatch,
# epochs, lr, and the two model shapes RLlib's examples use (shared 32-unit linear
# trunk; separate 64-64 tanh, RLlib's default).
_SHARED32 = dict(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)
_TANH64 = dict(fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False)
RLLIB_SWEEP: Dict[str, Dict[str, Any]] = {
    "b4000-m512": dict(hp=dict(train_batch_size_per_learner=4000, minibatch_size=512), model=_SHARED32),
    "b2048-m512": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=512), model=_SHARED32),
    "b2048-m1024-lr1e-3": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=1024, lr=1e-3),
                               model=_SHARED32),
    "b1024-m256-lr1e-3": dict(hp=dict(train_batch_size_per_learner=1024, minibatch_size=256, lr=1e-3),
                              model=_SHARED32),
    "b2048-m512-tanh64": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=512, vf_loss_coeff=0.5),
                              model=_TANH64),
    "b2048-m256-e4-lr1e-3-tanh64": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=256, num_epochs=4,
                                                lr=1e-3, vf_loss_coeff=0.5), model=_TANH64),
    # round 2 (round 1: only the 64-64 tanh model with a separate value net reached 475 within 60 s)
    "b2048-m512-lr1e-3-tanh64": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=512, lr=1e-3,
                                             vf_loss_coeff=0.5), model=_TANH64),
    "b2048-m512-e10-tanh64": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=512, num_epochs=10,
                                          vf_loss_coeff=0.5), model=_TANH64),
    "b1024-m512-tanh64": dict(hp=dict(train_batch_size_per_learner=1024, minibatch_size=512, vf_loss_coeff=0.5),
                              model=_TANH64),
    "b4096-m1024-e8-lr1e-3-tanh64": dict(hp=dict(train_batch_size_per_learner=4096, minibatch_size=1024, num_epochs=8,
                                                 lr=1e-3, vf_loss_coeff=0.5), model=_TANH64),
    # round 3: rounds 1-2 kept RLlib's GAE lambda of 1.0 (Monte-Carlo advantages) and its KL penalty;
    # the other arms here (FastPPO, single file, SB3) all use lambda < 1. Same model, lambda 0.95 ...
    "b2048-m512-l95-tanh64": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=512, vf_loss_coeff=0.5,
                                          lambda_=0.95), model=_TANH64),
    "b2048-m512-e10-lr1e-3-l95-tanh64": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=512,
                                                     num_epochs=10, lr=1e-3, vf_loss_coeff=0.5, lambda_=0.95),
                                             model=_TANH64),
    # ... FastPPO's default schedule in RLlib's terms (T=64 x 64 envs, 5 epochs x 4 minibatches, lr 1e-3;
    # RLlib's KL penalty with target 0.01 instead of the KL-adaptive lr, which it does not have) ...
    "b4096-m1024-e5-lr1e-3-l95-tanh64": dict(hp=dict(train_batch_size_per_learner=4096, minibatch_size=1024,
                                                     num_epochs=5, lr=1e-3, vf_loss_coeff=0.5, lambda_=0.95,
                                                     clip_param=0.2, kl_target=0.01), model=_TANH64),
    # ... and the SB3 zoo's CartPole settings (the sample-efficient arm here: 66k env steps) in RLlib's terms:
    # gamma 0.98, lambda 0.8, 20 epochs, minibatch 256, lr 1e-3, clip 0.2, no KL penalty.
    "zoo-b2048-m256-e20-lr1e-3-tanh64": dict(hp=dict(train_batch_size_per_learner=2048, minibatch_size=256,
                                                     num_epochs=20, lr=1e-3, vf_loss_coeff=0.5, gamma=0.98,
                                                     lambda_=0.8, clip_param=0.2, use_kl_loss=False),
                                             model=_TANH64),
    "zoo-b1024-m256-e10-lr1e-3-tanh64": dict(hp=dict(train_batch_size_per_learner=1024, minibatch_size=256,
                                                     num_epochs=10, lr=1e-3, vf_loss_coeff=0.5, gamma=0.98,
                                                     lambda_=0.8, clip_param=0.2, use_kl_loss=False),
                                             model=_TANH64),
}


def arm_rllib_ppo(ctx: H.ArmContext, env: str, num_envs: int, preset: str = "tuned", **overrides: Any) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if env.startswith("rllib-fast-gym:"):
        from rllib_fast.envs.gymnasium import register_rllib_gym_envs

        register_rllib_gym_envs()
    cfg = (PPOConfig().environment(env)
           .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs,
                        gym_env_vectorize_mode="vector_entry_point")
           .callbacks(on_episode_end=_rllib_on_episode_end)
           .debugging(seed=ctx.seed))
    if preset in RLLIB_PRESETS:
        hp, model = dict(RLLIB_PRESETS[preset][0]), dict(RLLIB_PRESETS[preset][1])
        hp.update(overrides.get("hp", {}))
        model.update(overrides.get("model", {}))
    else:
        m = matched(num_envs)
        hp = dict(lr=m["lr"], num_epochs=m["epochs"], train_batch_size_per_learner=m["batch"],
                  minibatch_size=m["batch"] // m["minibatches"])
        model = dict(fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False)
        cfg = cfg.env_runners(rollout_fragment_length=m["T"])
    cfg = cfg.training(**hp).rl_module(model_config=DefaultModelConfig(**model))
    ctx.note(hyperparameters={**hp, **model})
    ctx.start_clock()
    algo = cfg.build_algo()
    runner = algo.env_runner_group.local_env_runner
    ctx.timed(runner, "sample", lambda out, a, k: sum(len(e) for e in out))
    try:
        while True:
            r = algo.train()
            ret = sum(_RLLIB_RETURNS) / len(_RLLIB_RETURNS) if _RLLIB_RETURNS else None
            if ctx.report(r["num_env_steps_sampled_lifetime"], ret,
                          lib_ret=_finite(r["env_runners"].get("episode_return_mean"))):
                break
    finally:
        algo.stop()


def arm_sb3_ppo(ctx: H.ArmContext, num_envs: int, preset: str = "zoo") -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    if preset == "zoo":
        # rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1
        total = 100_000
        hp = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                  learning_rate=lambda f: f * 1e-3, clip_range=lambda f: f * 0.2)
        shown = dict(n_envs=num_envs, n_timesteps=total, n_steps=32, batch_size=256, gae_lambda=0.8,
                     gamma=0.98, n_epochs=20, ent_coef=0.0, learning_rate="lin_1e-3", clip_range="lin_0.2")
    else:
        m = matched(num_envs)
        total = 10 ** 9
        hp = dict(n_steps=m["T"], batch_size=m["batch"] // m["minibatches"], n_epochs=m["epochs"],
                  learning_rate=m["lr"], gae_lambda=0.95, gamma=0.99)
        shown = dict(hp, n_envs=num_envs)
    ctx.note(hyperparameters=shown)

    class Report(BaseCallback):
        stop = False

        def _report(self) -> None:
            buf = self.model.ep_info_buffer
            ret = sum(e["r"] for e in buf) / len(buf) if buf else None
            Report.stop = ctx.report(self.model.num_timesteps, ret)

        def _on_rollout_start(self) -> None:  # i.e. after the previous iteration's update
            if self.model.num_timesteps > 0:
                self._report()

        def _on_training_end(self) -> None:
            if not Report.stop:
                self._report()

        def _on_step(self) -> bool:
            return not Report.stop

    ctx.start_clock()
    venv = make_vec_env("CartPole-v1", n_envs=num_envs, seed=ctx.seed)
    model = PPO("MlpPolicy", venv, seed=ctx.seed, device="cpu", verbose=0, **hp)
    ctx.timed(model, "collect_rollouts", lambda out, a, k: k.get("n_rollout_steps", a[3] if len(a) > 3 else 0)
              * num_envs)
    model.learn(total_timesteps=total, callback=Report())
    venv.close()


def single_file_like_fastppo_defaults() -> Dict[str, Any]:
    """The single file's knobs set to FastPPO's defaults (horizon, epochs, minibatches, lr
    and its adaptive-KL rule), read in the parent from FastPPOConfig so the two never
    drift apart; what the single file lacks (value clipping, value normalisation) stays off."""
    from rllib_fast.algorithms.ppo import FastPPOConfig

    c = FastPPOConfig()
    return dict(num_steps=c.rollout_length, epochs=c.num_epochs, minibatches=c.num_minibatches, lr=c.lr,
                kl_target=c.adaptive_lr_kl_target or 0.0)


def arm_single_file(ctx: H.ArmContext, num_envs: int, preset: str = "learn", **overrides: Any) -> None:
    import single_file_ppo as sf

    m = matched(num_envs)
    hp = dict(num_steps=m["T"], epochs=m["epochs"], minibatches=m["minibatches"], lr=m["lr"])
    source = "matched"
    if preset == "learn":
        # the same horizon/epochs/minibatches/lr/adaptive-KL rule as the FastPPO learn arm at this N
        # (its explicit settings here; at N=64, FastPPO's defaults come in as overrides from the
        # parent), so the comparison isolates the framework
        fk, fsrc = fastppo_kwargs(num_envs, "learn")
        names = dict(rollout_length="num_steps", num_epochs="epochs", num_minibatches="minibatches", lr="lr",
                     adaptive_lr_kl_target="kl_target")
        hp.update({names[k]: v for k, v in fk.items() if k in names})
        source = f"FastPPO N={num_envs} learn settings ({fsrc})"
    hp.update(overrides)
    args = sf.Args(num_envs=num_envs, seed=ctx.seed, threads=ctx.threads, target=ctx.target,
                   time_budget=ctx.budget_s, **hp)
    ctx.note(hyperparameters=hp, source=source)
    ctx.start_clock()

    def cb(s: dict) -> bool:
        ctx.sample_s, ctx.sample_steps = s["sample_s"], s["sample_steps"]
        return ctx.report(s["env_steps"], _finite(s["return_mean"]))

    sf.train(args, cb)


# ---------------------------------------------------------------------------
# arms
# ---------------------------------------------------------------------------
FAM_FAST = "FastPPO (rllib_fast)"
FAM_SINGLE = "single-file PPO (plain torch)"
FAM_RB = "RLlib PPO, bridge (our CartPole)"
FAM_RG = "RLlib PPO, gymnasium CartPole-v1"
FAM_SB3 = "SB3 PPO, gymnasium CartPole-v1"
FAM_RG_SWEEP = "RLlib PPO sweep, gymnasium CartPole-v1 N=64"
HERE_MOD = "ppo_cartpole"


def all_arms() -> List[H.Arm]:
    arms: List[H.Arm] = []
    arms.append(H.Arm("fastppo-defaults", FAM_FAST, "FastPPO, defaults (N=64)", f"{HERE_MOD}:arm_fastppo",
                      dict(num_envs=64, preset="defaults"), num_envs=64))
    for n in (64, 1024, 4096):
        arms.append(H.Arm(f"fastppo-{n}", FAM_FAST, f"FastPPO N={n}", f"{HERE_MOD}:arm_fastppo",
                          dict(num_envs=n), num_envs=n))
    arms.append(H.Arm("single-64", FAM_SINGLE, "single-file PPO N=64", f"{HERE_MOD}:arm_single_file",
                      dict(num_envs=64, **single_file_like_fastppo_defaults()), num_envs=64))
    arms.append(H.Arm("rllib-bridge-64", FAM_RB, "RLlib PPO bridge N=64", f"{HERE_MOD}:arm_rllib_ppo",
                      dict(env="rllib-fast-gym:CartPole", num_envs=64), num_envs=64, needs_ray=True))
    arms.append(H.Arm("rllib-gym-64", FAM_RG, "RLlib PPO CartPole-v1 N=64 (tuned)", f"{HERE_MOD}:arm_rllib_ppo",
                      dict(env="CartPole-v1", num_envs=64), num_envs=64, needs_ray=True))
    arms.append(H.Arm("rllib-example-64", FAM_RG, "RLlib PPO CartPole-v1 N=64 (RLlib's tuned example)",
                      f"{HERE_MOD}:arm_rllib_ppo", dict(env="CartPole-v1", num_envs=64, preset="example"),
                      num_envs=64, needs_ray=True))
    for name, ov in RLLIB_SWEEP.items():
        arms.append(H.Arm(f"rllib-sweep-{name}", FAM_RG_SWEEP, f"RLlib PPO sweep {name}", f"{HERE_MOD}:arm_rllib_ppo",
                          dict(env="CartPole-v1", num_envs=64, preset="example", **ov), num_envs=64,
                          needs_ray=True))
    arms.append(H.Arm("sb3-8", FAM_SB3, "SB3 PPO (zoo) n_envs=8", f"{HERE_MOD}:arm_sb3_ppo",
                      dict(num_envs=8), num_envs=8))
    # throughput arms: matched settings
    for n in THROUGHPUT_NS:
        arms.append(H.Arm(f"fastppo-{n}", FAM_FAST, f"FastPPO N={n}", f"{HERE_MOD}:arm_fastppo",
                          dict(num_envs=n, preset="matched"), num_envs=n, mode="throughput"))
    for n in THROUGHPUT_NS:
        arms.append(H.Arm(f"single-{n}", FAM_SINGLE, f"single-file PPO N={n}", f"{HERE_MOD}:arm_single_file",
                          dict(num_envs=n, preset="matched"), num_envs=n, mode="throughput"))
    for n in THROUGHPUT_NS:
        arms.append(H.Arm(f"rllib-bridge-{n}", FAM_RB, f"RLlib PPO bridge N={n}", f"{HERE_MOD}:arm_rllib_ppo",
                          dict(env="rllib-fast-gym:CartPole", num_envs=n, preset="matched"), num_envs=n,
                          mode="throughput", needs_ray=True))
    for n in THROUGHPUT_NS:
        arms.append(H.Arm(f"rllib-gym-{n}", FAM_RG, f"RLlib PPO CartPole-v1 N={n}", f"{HERE_MOD}:arm_rllib_ppo",
                          dict(env="CartPole-v1", num_envs=n, preset="matched"), num_envs=n,
                          mode="throughput", needs_ray=True))
    # SB3's DummyVecEnv steps envs in a Python loop; N=64 is its largest sensible size here
    for n in (8, 64):
        arms.append(H.Arm(f"sb3-{n}", FAM_SB3, f"SB3 PPO n_envs={n}", f"{HERE_MOD}:arm_sb3_ppo",
                          dict(num_envs=n, preset="matched"), num_envs=n, mode="throughput"))
    return arms


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def build_report(records: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    target = meta["target"]
    rows = R.aggregate_learn(records)
    by_key = {r["key"]: r for r in rows}
    tp = R.aggregate_throughput(records)
    ns = sorted({n for by in tp.values() for n in by})
    out = [f"# PPO on CartPole: time to mean return {target:g}", "",
           f"{meta['date']} · {meta['machine']} · torch threads per arm: {meta['threads']} · "
           + (f"commit {meta['commit']} · " if meta.get("commit") else "")
           + f"seeds: {meta['seeds']} · time cap per learn arm: {meta['budget']:g} s · "
           f"throughput window: {meta['throughput_s']:g} s · full run took {meta['total_min']:.1f} min"
           + (f" (arms re-run on {meta['updated']}: {meta['update_min']:.1f} min)" if meta.get("updated") else ""),
           ""]
    if rows:
        out += ["## Learning (each library with its own CartPole settings)", "", R.learn_table(rows), ""]
        out += ["*Return* = mean over the last 100 finished episodes, computed the same way for every arm. "
                "*Time to target* counts from algorithm construction (env and module build, FastPPO's start-state "
                "decorrelation included); *startup* (imports, `ray.init`) is separate. "
                "*env-steps/s overall* = env steps / wall-clock over the whole run incl. construction and learning; "
                "*sampling* = env steps / time inside the sampling call only (FastPPO `_rollout`, RLlib "
                "`EnvRunner.sample`, SB3 `collect_rollouts`, the single-file rollout loop). "
                "*CPU s to target*: CPU seconds of the arm's process over the same span (robust to other load "
                "on the machine, unlike wall-clock). "
                "*Peak RSS (proc)*: the arm's process (`ru_maxrss`); *(tree)*: sampled sum over the process and "
                "its children (Ray's gcs/raylet/workers for RLlib arms). Median over seeds; [min–max] when >1 seed.", ""]
    if tp:
        out += ["## Throughput (matched settings: T=32/16/8 at N=64/1024/4096, 4 epochs x 4 minibatches, "
                "64-64 tanh)", "", R.throughput_table(tp, ns), "",
                "env-steps/s of whole `train()` iterations after one warm-up iteration / of sampling alone / "
                "env steps per CPU-second of the arm's process (contention-robust). `*`: other processes used "
                "> 0.25 cores during the measurement.", ""]

    # ratios
    lines = []

    def t_of(key, what="t_reach"):
        r = by_key.get(key)
        return r[what] if r and r["n_reached"] else None

    def both(num_key, den_key):
        """'wall ratio (CPU-s ratio)' of time-to-target, num / den."""
        w = R.ratio(t_of(num_key), t_of(den_key))
        c = R.ratio(t_of(num_key, "cpu_reach"), t_of(den_key, "cpu_reach"))
        return w, c, f"{R.fmt_ratio(w)} wall-clock ({R.fmt_ratio(c)} in CPU-s)"

    fast = {n: t_of(f"fastppo-{n}") for n in (64, 1024, 4096)}
    fast_best_n = min((n for n in fast if fast[n] is not None), key=lambda n: fast[n], default=None)
    refs = [("RLlib PPO bridge N=64", "rllib-bridge-64"), ("RLlib PPO CartPole-v1 N=64", "rllib-gym-64"),
            ("SB3 PPO (zoo) n_envs=8", "sb3-8")]
    for name, key in refs:
        if key not in by_key:
            continue
        tr = t_of(key)
        if fast.get(64) is not None:
            lines.append(f"- FastPPO N=64 speed-up in time-to-{target:g} vs {name}: "
                         + (both(key, "fastppo-64")[2] if tr is not None
                            else f"> {R.fmt_ratio(R.ratio(by_key[key]['budget_s'], fast[64]))} "
                                 f"({name} did not reach {target:g})"))
        if fast_best_n not in (None, 64) and tr is not None:
            lines.append(f"- FastPPO best N (N={fast_best_n}) speed-up vs {name}: "
                         + both(key, f"fastppo-{fast_best_n}")[2])
    # the goal: FastPPO with its defaults vs the best RLlib PPO configuration found (any RLlib
    # arm, sweep included, that reached the target in every seed it ran; ties broken by more seeds)
    rllib = [r for r in rows if r["family"] in (FAM_RB, FAM_RG, FAM_RG_SWEEP)
             and r["n_runs"] and r["n_reached"] == r["n_runs"]]
    if rllib and t_of("fastppo-defaults") is not None:
        best = min(rllib, key=lambda r: (r["t_reach"], -r["n_runs"]))
        w, c, txt = both(best["key"], "fastppo-defaults")
        lines.append(f"- **Goal** (FastPPO defaults >= 3x faster to {target:g} than the best RLlib PPO found): best "
                     f"RLlib configuration = {best['label']} ({best['n_runs']} seed(s), median "
                     f"{best['t_reach']:.1f} s); FastPPO defaults median {t_of('fastppo-defaults'):.1f} s: {txt}: "
                     + ("**met**" if w is not None and w >= 3.0 else "**NOT met**"))
    if fast.get(64) is not None and t_of("single-64") is not None:
        w, c, txt = both("fastppo-64", "single-64")
        verdict = lambda x: "met" if x is not None and x <= 1.3 else "NOT met"  # noqa: E731
        lines.append(f"- FastPPO N=64 time to {target:g} / single-file PPO N=64: {txt}; target <= 1.30x: "
                     f"{verdict(w)} in wall-clock, {verdict(c)} in CPU-s. Same schedule, not the same "
                     "algorithm: FastPPO clips its value loss (0.2, normalised units; the single file does not) "
                     "and needs more env steps for it -- without the clip it reaches 475 in 114k-134k env steps, "
                     "3.0-3.6 s (docs/defaults.md); the matched throughput ratios below isolate the framework")
    fam_fast = tp.get(FAM_FAST, {})
    for fam in (FAM_RB, FAM_RG, FAM_SINGLE, FAM_SB3):
        for n in ns:
            a, b = fam_fast.get(n), tp.get(fam, {}).get(n)
            if a and b and a.get("tput_overall") and b.get("tput_overall"):
                lines.append(f"- env-steps/s ratio at N={n}, FastPPO vs {fam}: "
                             f"{R.fmt_ratio(R.ratio(a['tput_overall'], b['tput_overall']))} overall, "
                             f"{R.fmt_ratio(R.ratio(a.get('tput_sampling'), b.get('tput_sampling')))} sampling")
    if lines:
        out += ["## Ratios", ""] + lines + [""]
    notes = []
    for r in rows:
        hp = r["notes"].get("hyperparameters")
        if hp:
            src = r["notes"].get("source")
            notes.append(f"- {r['label']}: `{json.dumps(hp, default=str)}`" + (f" (from {src})" if src else ""))
    if notes:
        out += ["## Settings of the learn arms", ""] + notes + [""]
    return "\n".join(out)


def _git_commit() -> Optional[str]:
    import subprocess

    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "rllib_fast"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("+uncommitted changes in rllib_fast" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    H.add_common_args(p, budget=120.0, target=TARGET)
    args = p.parse_args(argv)
    arms = all_arms()
    if args.list:
        for a in arms:
            print(f"{a.key if a.mode == 'learn' else 'tput:' + a.key:24s} {a.mode:10s} {a.label}")
        return
    results_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    if args.replot:
        with open(args.replot) as f:
            payload = json.load(f)
        records, meta = payload["records"], payload["meta"]
        out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.replot))
    else:
        if args.quick:
            args.budget = min(args.budget, 20.0)
            args.throughput_s = min(args.throughput_s, 2.0)
            args.quiet_timeout = min(args.quiet_timeout, 10.0)
        arms = H.select_arms(arms, args.arms)
        if args.no_throughput:
            arms = [a for a in arms if a.mode != "throughput"]
        if args.no_learn:
            arms = [a for a in arms if a.mode != "learn"]
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        logdir = args.logdir or H.default_logdir(NAME)
        out_dir = args.out_dir or (logdir if args.quick else results_dir)
        print(f"{len(arms)} arms, seeds {seeds}, budget {args.budget:g}s, logs in {logdir}", flush=True)
        t0 = time.time()
        records = H.run_arms(arms, seeds, budget_s=args.budget, target=args.target, threads=args.threads,
                             logdir=logdir, throughput_s=args.throughput_s,
                             quiet_cores=args.wait_quiet if args.wait_quiet >= 0 else None,
                             quiet_timeout_s=args.quiet_timeout)
        meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU, "
                            f"Python {platform.python_version()}",
                    threads=args.threads, seeds=seeds, budget=args.budget, target=args.target,
                    throughput_s=args.throughput_s, total_min=(time.time() - t0) / 60, quick=args.quick,
                    commit=_git_commit())
        if args.update:
            records, meta, saved_dir = H.merge_update(args.update, records, meta, seeds)
            out_dir = args.out_dir or saved_dir
    os.makedirs(out_dir, exist_ok=True)
    md = build_report(records, meta)
    md_path, png_path = os.path.join(out_dir, NAME + ".md"), os.path.join(out_dir, NAME + ".png")
    with open(md_path, "w") as f:
        f.write(md + f"\n![curves and throughput]({NAME}.png)\n")
    R.plot(records, png_path, target=meta["target"],
           title=f"PPO on CartPole ({meta['machine']}, {meta['threads']} torch thread per arm)")
    if not args.replot or args.update:
        H.save_json(os.path.join(out_dir, NAME + ".json"), dict(meta=meta, records=records))
    print("\n" + md)
    print(f"\nwrote {md_path}, {png_path}")


if __name__ == "__main__":
    main()
