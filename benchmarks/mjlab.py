"""mjlab side by side: rsl_rl's own runner vs FastPPO vs PQL on Mjlab-Cartpole-Balance.

Every arm runs in its own child process (``_harness.run_arms``), one at a time:

* ``rsl_rl-<N>``: mjlab's own training stack, unchanged: the task's env config with
  mjlab's auto-reset, ``RslRlVecEnvWrapper`` with the registered rsl_rl config's
  ``clip_actions`` and the runner mjlab registers for the task (``MjlabOnPolicyRunner``
  unless the task names another) built from the registered rsl_rl config as is, with
  ``init_at_random_ep_len=True`` as mjlab's train script. The runner is driven one
  iteration at a time (``learn(1)``); its logger only counts returns when it writes
  logs, so the arm sums rewards per env itself (one host copy per step, as rsl_rl's
  logger does) over the last 100 episodes, like FastPPO's ``episode_return_mean``;
* ``fastppo-<N>``: FastPPO with its defaults on ``mjlab:Mjlab-Cartpole-Balance`` (episode
  clocks randomised, no random-action phase; ``normalize_obs='auto'``: off, as the task's
  rsl_rl config);
* ``fastppo_rsl-<N>``: FastPPO tuned rsl_rl-style: the rsl_rl config's PPO schedule
  (32 steps/env, 5 epochs x 4 minibatches, lr 1e-3 held near KL 0.01), no observation
  normalisation (as rsl_rl's Cartpole config), initial std 0.37, FastPPO's other
  defaults. Tried at N=256 (one seed each, 90-120 s caps, partly under load; env
  steps to 45): the test's settings (same but normalised observations) 533k (seed 0)
  and stuck near 28 (seed 1, 0.9M steps); on top of those, KL target 0.02 or 0.005,
  rollout 16, initial std 0.2 or 0.6, entropy 0.01, 8 minibatches, 10 epochs, ELU,
  ``exact_final_obs=False``: none better (680k-0.8M or not reached, seed 1 stuck at
  13-28); normalisation off: 443k (seed 0), 492k (seed 1): the tuned arm. With rsl_rl's
  own ELU network instead of tanh (normalisation off, compile=True, 2026-11-26, seeds 0-3:
  ``fastppo_rsl_elu_c``) it needs 0.63-1.56M env steps (median 1.13M, 106.7 s), so the
  tuned arm keeps tanh;
* ``hts_rsl-<N>``: HTSPPO (HTS-RL) with the same rsl_rl-style settings and one executor
  in its own simulator process (``executor_processes=True``): the simulator steps the
  next batch while the learner updates on the previous one (policy lag exactly one),
  so learning hides behind physics; it uses the second core for that, as the PBT arm
  does (the other arms run one thread). An executor *thread* does not overlap here
  (2026-11-25, N=256: 7.0k env-steps/s overall, 1.17 cores busy, 99 s to 45):
  mjlab's managers run Python on every step, which holds the GIL the learner needs;
* ``pbt-<N>``: Ray Tune PBT over 4 FastPPO trials at N envs each, started from the
  rsl_rl-style settings with seeds ``100 * seed + 0..3``, the project's PBT preset
  (``rllib_fast.tune.pbt.paper_pbt``) every 8 iterations mutating the live
  hyperparameters lr (3e-4..3e-3), entropy_coeff (0..0.01) and clip_param
  (0.1/0.2/0.3), ``reuse_actors=True``; all 4 trials at once on a local loopback Ray
  of 2 CPUs (0.5 CPU each): this arm uses both cores, the others one thread. Time
  to target: from building the Tuner (trial actors, their imports and envs
  included) until the first trial reports a mean return >= the target; env steps:
  the **sum over all 4 trials** at that moment;
* ``pql-<N>``: PQL with the small-task sizes (``rllib_fast/presets.py``);
* throughput arms ``tput:raw-<N>`` (the mjlab env itself, zero actions, mjlab's
  auto-reset: the simulator's ceiling) and ``tput:adapter-<N>`` (the ``mjlab:``
  source with its exact terminal observations, zero actions): every learn arm's
  overall env-steps/s is reported against the raw ceiling at its N.

The target is a mean return of 45 of Cartpole balance's maximum 50 (mjlab scales
rewards by the 0.05 s step). ``--episode-s 10`` runs every arm with 10 s episodes
(200 steps, maximum return 10; the target then defaults to 9.0, 0.9 x the maximum, and
the report goes to ``results/mjlab_10s.md/.json`` so the 50 s rows stay for history);
the children read the length from ``EPISODE_S_ENV`` (``_episode_cfg``). ``--go1`` adds Go1 flat throughput arms (raw, adapter,
rsl_rl, FastPPO) at ``--go1-envs``.

This file is named ``mjlab.py`` as asked; its directory is on ``sys.path`` in the
harness children, where it would shadow the mjlab package, so it removes that
directory from ``sys.path`` on import and every arm renames this module in
``sys.modules`` before importing mjlab.

Examples::

    python benchmarks/mjlab.py --list
    python benchmarks/mjlab.py --quick --arms rsl_rl-256,fastppo_rsl-256,pbt-256,tput:raw-256
    python benchmarks/mjlab.py --seeds 0,1 --budget 600
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
import os
import platform
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import _harness as H  # noqa: E402
import _report as R  # noqa: E402

# -- un-shadow the mjlab package (see the module docstring) ------------------------------
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]


def _unshadow() -> None:
    """In a harness child this file was imported as ``mjlab``: give the name back to
    the package before an arm imports it (after the import finished: importlib
    expects the name to stay registered while it loads a module)."""
    mod = sys.modules.get("mjlab")
    if getattr(mod, "__file__", None) == os.path.abspath(__file__):
        sys.modules["rllib_fast_bench_mjlab"] = sys.modules.pop("mjlab")
    # every arm imports mjlab and its task registry before its clock starts, as rsl_rl's arm
    # always did (~4 s here): until 2026-11-27 the rllib_fast arms imported it inside
    # build_algo (the ``mjlab:`` source imports lazily), so their times carried the import
    import mjlab.envs  # noqa: F401
    import mjlab.tasks  # noqa: F401


os.environ.setdefault("WARP_CACHE_PATH", os.path.join(os.path.dirname(HERE), "build", "warp-cache"))
os.environ.setdefault("MJLAB_WARP_QUIET", "1")

NAME = "mjlab"
TASK = "Mjlab-Cartpole-Balance"
GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
TARGET = 45.0
# Cartpole balance episodes: 50 s of 0.05 s steps, ended only by the time limit
EPISODE_STEPS = 1000
NS = (256, 1024)
# the rsl_rl PPO schedule with FastPPO's other defaults, a 0.37 initial std (tests/envs/test_mjlab.py
# explains why: FastPPO clamps actions to the +-1 bound, rsl_rl's Cartpole config leaves them unclipped)
# and no observation normalisation (rsl_rl's Cartpole config has none either; see the module docstring)
RSL_STYLE = dict(rollout_length=32, num_epochs=5, num_minibatches=4, lr=1e-3, adaptive_lr_kl_target=0.01,
                 init_log_std=-1.0, decorrelate_steps=1, normalize_obs=False)
# PBT arm: 4 FastPPO trials from RSL_STYLE on PBT_RAY_CPUS CPUs at once; only live hyperparameters
# are mutated (num_epochs, rollout_length, minibatches would rebuild the trial's env on reset_config)
PBT_TRIALS, PBT_INTERVAL, PBT_RAY_CPUS = 4, 8, 2
# Go1 FastPPO arms: mjlab's registered rsl_rl settings for Go1 as the shipped tune config maps them
# (24 steps/env, 5 x 4, [512, 256, 128] ELU, init std 1, the critic group as states)
GO1_FILE = "mjlab-go1-flat-fastppo"
PBT_MUTATIONS = {"lr": (3e-4, 3e-3), "entropy_coeff": (0.0, 0.01), "clip_param": (0.1, 0.2, 0.3)}
FN = "mjlab:"  # arm functions: the harness child imports this file by its name
#: the episode length every arm uses (set by --episode-s in the parent, inherited by the children)
EPISODE_S_ENV = "RLLIB_FAST_BENCH_MJLAB_EPISODE_S"
DEFAULT_EPISODE_S = 50.0


def _episode_s() -> float:
    return float(os.environ.get(EPISODE_S_ENV) or DEFAULT_EPISODE_S)


def _episode_cfg(env_config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``env_config`` for the ``mjlab:`` source with this run's episode length merged in
    (nothing added at mjlab's own 50 s, so the historical arms build as before)."""
    out = dict(env_config or {})
    if _episode_s() != DEFAULT_EPISODE_S:
        out["cfg"] = {**dict(out.get("cfg") or {}), "episode_length_s": _episode_s()}
    return out


def _finite(x: Any) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# ---------------------------------------------------------------------------------------
# arms (child side)
# ---------------------------------------------------------------------------------------
def _mjlab_env(task: str, num_envs: int, seed: int, device: str = "cpu"):
    import mjlab.tasks  # noqa: F401
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(task)
    cfg.scene.num_envs, cfg.seed = num_envs, seed
    if _episode_s() != DEFAULT_EPISODE_S:
        cfg.episode_length_s = _episode_s()
    return ManagerBasedRlEnv(cfg, device=device)


def arm_rsl_rl(ctx: H.ArmContext, num_envs: int, task: str = TASK, device: str = "cpu",
               threads: Optional[int] = None, overrides: Optional[Dict[str, Any]] = None) -> None:
    """rsl_rl's runner with mjlab's config for the task, unchanged. ``threads``: torch
    intra-op threads for its update (the peer's use of a second core: its runner
    steps the simulator in this one process). ``overrides``: runner config keys
    (dotted for nested ones, e.g. ``num_steps_per_env`` or
    ``algorithm.num_mini_batches``): the peer's side of a sweep."""
    _unshadow()
    import dataclasses

    import torch

    if threads:
        torch.set_num_threads(int(threads))
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.rl.runner import MjlabOnPolicyRunner
    from mjlab.tasks.registry import load_rl_cfg, load_runner_cls

    rl_cfg = load_rl_cfg(task)
    rl_cfg.seed = ctx.seed
    for key, value in (overrides or {}).items():
        *path, leaf = key.split(".")
        obj = rl_cfg
        for part in path:
            obj = getattr(obj, part)
        if not hasattr(obj, leaf):
            raise ValueError(f"rsl_rl override {key!r}: the runner config has no such key")
        setattr(obj, leaf, value)
    ctx.note(rl_cfg=dataclasses.asdict(rl_cfg), overrides=overrides or {})
    torch.manual_seed(ctx.seed)
    ctx.start_clock()
    env = RslRlVecEnvWrapper(_mjlab_env(task, num_envs, ctx.seed, device), clip_actions=rl_cfg.clip_actions)
    runner = (load_runner_cls(task) or MjlabOnPolicyRunner)(env, dataclasses.asdict(rl_cfg), None, device)
    returns: collections.deque = collections.deque(maxlen=100)
    acc = torch.zeros(num_envs, device=device)
    step = env.step

    def counted(actions):
        out = step(actions)
        acc.add_(out[1])
        done = out[2] > 0
        if bool(done.any()):
            returns.extend(acc[done].tolist())
            acc[done] = 0.0
        return out

    env.step = counted
    ctx.timed(env, "step", lambda out, a, k: num_envs)
    steps, first = 0, True
    while True:
        runner.learn(1, init_at_random_ep_len=first)
        first = False
        steps += rl_cfg.num_steps_per_env * num_envs
        ret = sum(returns) / len(returns) if returns else None
        if ctx.report(steps, ret):
            break


def _train_loop(ctx: H.ArmContext, algo) -> None:
    try:
        while True:
            r = algo.train()
            if ctx.report(r["num_env_steps_sampled_lifetime"], _finite(r["env_runners"].get("episode_return_mean"))):
                break
    finally:
        algo.stop()


def _recipe_experiment(file: str) -> Dict[str, Any]:
    """The one experiment of a shipped ``tune_configs/<file>.yaml`` (run, env, config, ...)."""
    import yaml

    with open(_recipe_path(file)) as f:
        (exp,) = yaml.safe_load(f).values()
    return exp


def _recipe_path(file: str) -> str:
    return os.path.join(os.path.dirname(HERE), "tune_configs", file + ".yaml")


def _shipped_settings(name: str) -> Dict[str, Any]:
    """The algorithm settings of a shipped ``tune_configs/<name>.yaml`` (mjlab's rsl_rl
    config for the task mapped to FastPPO), without its placement keys (device, N, seed)."""
    drop = {"env_device", "num_envs", "seed", "evaluation_interval", "env_config"}
    return {k: v for k, v in _recipe_experiment(name)["config"].items() if k not in drop}


def arm_fastppo(ctx: H.ArmContext, num_envs: int, preset: str = "defaults", task: str = TASK,
                device: str = "cpu", overrides: Optional[Dict[str, Any]] = None,
                env_config: Optional[Dict[str, Any]] = None, workers: int = 0) -> None:
    """FastPPO on the ``mjlab:`` source; ``workers`` > 0 steps the simulator in that
    many processes (``ParallelEnvCreator``, N / workers envs each) while the policy
    and the update stay in this one."""
    _unshadow()
    from rllib_fast.algorithms.ppo import FastPPOConfig

    kw = dict(RSL_STYLE) if preset == "rsl" else _shipped_settings(GO1_FILE) if preset == "go1" else {}
    kw.update(overrides or {})
    env_config = _episode_cfg(env_config)
    ctx.note(hyperparameters=kw, preset=preset, env_config=env_config, workers=workers)
    source: Any = f"mjlab:{task}"
    if workers:
        from rllib_fast.envs.parallel import ParallelEnvCreator

        source = ParallelEnvCreator(source, num_workers=workers)
    cfg = (FastPPOConfig().environment(source, num_envs=num_envs, env_device=device,
                                       env_config=dict(env_config or {}))
           .training(**kw).debugging(seed=ctx.seed))
    ctx.start_clock()
    algo = cfg.build_algo()
    ctx.timed(algo, "_rollout", lambda out, a, k: algo.horizon * num_envs)
    _train_loop(ctx, algo)


def _warm_compile_cache(file: str, seed: int) -> float:
    """Fill torch's on-disk compile cache for a recipe that compiles, in a throw-away
    process (one iteration), so the timed run starts as a user's second run of the file
    does. The simulator's own JIT cache (Warp kernels, ``WARP_CACHE_PATH``) is warm for
    every arm alike; this does the same for ours. Returns its wall seconds (untimed)."""
    import subprocess

    code = ("import sys, yaml, torch; torch.set_num_threads(1); import mjlab.tasks, rllib_fast; "
            "from ray.tune.registry import get_trainable_cls as g; "
            f"(e,) = yaml.safe_load(open({file!r})).values(); "
            f"c = dict(e['config'], seed={seed + 1000}, env=e['env']); "
            "a = g(e['run']).get_default_config().update_from_dict(c).build_algo(); a.train(); a.stop()")
    t = time.time()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=os.path.dirname(HERE))
    return time.time() - t


def arm_recipe(ctx: H.ArmContext, num_envs: int, file: str, compile_cache: str = "warm") -> None:
    """A shipped ``tune_configs/<file>.yaml`` as ``rllib train file`` runs it: its
    algorithm, env, N, env_config and every setting, only the seed replaced
    (``num_envs`` is the file's, given for the tables). For a recipe that compiles,
    ``compile_cache``: ``"warm"`` fills torch's on-disk compile cache first, untimed (a
    user's second run of the file on a machine; the simulator's Warp kernel cache is
    warm for every arm too), ``"cold"`` points torch at an empty cache directory (the
    first run on a fresh machine: every graph compiled inside the clock)."""
    if compile_cache not in ("warm", "cold"):
        raise ValueError(f"arm_recipe: compile_cache = {compile_cache!r}; allowed: 'warm', 'cold'")
    _unshadow()
    import tempfile

    from ray.tune.registry import get_trainable_cls

    import rllib_fast  # noqa: F401 - registers the algorithms

    exp = _recipe_experiment(file)
    config = dict(exp["config"], seed=ctx.seed, env=exp["env"])
    if int(config["num_envs"]) != num_envs:
        raise ValueError(f"{file}.yaml has num_envs={config['num_envs']}, the arm says {num_envs}")
    notes: Dict[str, Any] = {}
    if config.get("compile"):
        notes["compile_cache"] = compile_cache
        if compile_cache == "cold":
            import atexit
            import shutil

            cold = tempfile.mkdtemp(prefix="inductor-cold-")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cold
            atexit.register(shutil.rmtree, cold, ignore_errors=True)
        else:
            notes["cache_warm_up_s"] = round(_warm_compile_cache(_recipe_path(file), ctx.seed), 1)
    ctx.note(recipe=file, run=exp["run"], config=config, **notes)
    cfg = get_trainable_cls(exp["run"]).get_default_config().update_from_dict(config)
    ctx.start_clock()
    algo = cfg.build_algo()
    ctx.timed(algo, "_rollout", lambda out, a, k: algo.horizon * num_envs)
    _train_loop(ctx, algo)


def arm_hts(ctx: H.ArmContext, num_envs: int, task: str = TASK, device: str = "cpu",
            overrides: Optional[Dict[str, Any]] = None) -> None:
    """HTSPPO, rsl_rl-style, one executor process (the whole N-env simulator in it)."""
    _unshadow()
    from rllib_fast.algorithms.hts import HTSPPOConfig

    # HTSPPO's own defaults differ from FastPPO's (its measured PPO settings): set the
    # rsl_rl schedule and FastPPO's value clip explicitly, so only the overlap differs
    kw = dict(RSL_STYLE, vf_clip_param=0.2, num_executors=1, executor_processes=True)
    kw.update(overrides or {})
    ctx.note(hyperparameters=kw)
    cfg = (HTSPPOConfig().environment(f"mjlab:{task}", num_envs=num_envs, env_device=device,
                                      env_config=_episode_cfg())
           .training(**kw).debugging(seed=ctx.seed))
    ctx.start_clock()
    algo = cfg.build_algo()
    _train_loop(ctx, algo)


def _pbt_watch(ctx: H.ArmContext):
    """The PBT arm's ``Stopper`` (built here so the class closes over nothing: Tune pickles
    the run config, and ``ctx`` holds an open file, dropped from the pickled state)."""
    from ray import tune

    class Watch(tune.Stopper):
        def __init__(self, ctx):
            self.ctx = ctx
            self.steps: Dict[str, float] = {}
            self.ret: Dict[str, float] = {}
            self.done = False

        def __call__(self, trial_id, result):
            er = result.get("env_runners") or {}
            self.steps[trial_id] = self.steps.get(trial_id, 0.0) + float(er.get("num_env_steps_sampled") or 0)
            ret = _finite(er.get("episode_return_mean"))
            if ret is not None:
                self.ret[trial_id] = ret
            best = max(self.ret.values()) if self.ret else None
            conf = result.get("config") or {}  # the trial's live hyperparameters: shows PBT's exploits
            if not self.done and self.ctx.report(sum(self.steps.values()), best, trial=trial_id,
                                                 trial_return=ret, lr=conf.get("lr"),
                                                 entropy_coeff=conf.get("entropy_coeff"),
                                                 clip_param=conf.get("clip_param")):
                self.done = True
            return False

        def stop_all(self):
            return self.done

        def __getstate__(self):  # Tune pickles the run config (experiment state); ctx holds an open file
            return {k: v for k, v in self.__dict__.items() if k != "ctx"}

    return Watch(ctx)


def arm_pbt(ctx: H.ArmContext, num_envs: int, task: str = TASK, trials: int = PBT_TRIALS,
            interval: int = PBT_INTERVAL, device: str = "cpu", env_config: Optional[Dict[str, Any]] = None) -> None:
    """Tune PBT over ``trials`` FastPPO trials (rsl_rl-style start, seeds ``100 * seed + i``)
    under the project's PBT preset (``rllib_fast.tune.pbt.paper_pbt``: the bottom 30% exploit the top
    30% and resample their hyperparameters; the Tuner is ``pbt_tuner``'s with a ``Stopper``), all at once on a
    local loopback Ray (``rllib_fast.tune.session.init_ray``) of ``PBT_RAY_CPUS`` CPUs:
    each trial asks for ``PBT_RAY_CPUS / trials`` CPUs (``tune.with_resources``; FastPPO's
    own request rounds a fraction up to 1 CPU, which would run them 2 at a time).

    One report per trial result, from Tune's driver (a ``Stopper``): ``steps`` is the sum
    over all trials of the env steps they sampled so far (per-iteration counts summed,
    so a trial that exploits another's checkpoint does not inherit its step count), and
    the return is the best of the trials' latest ``episode_return_mean``; the clock starts
    before the Tuner is built (it includes starting the trial actors and their envs).
    When one trial reaches the target (or the cap is spent) the whole experiment stops."""
    _unshadow()
    import shutil
    import tempfile

    from ray import tune
    from ray.tune.registry import get_trainable_cls

    from rllib_fast.algorithms.ppo import FastPPOConfig
    from rllib_fast.tune import session
    from rllib_fast.tune.pbt import RETURN_KEY, paper_pbt

    session.init_ray(num_cpus=PBT_RAY_CPUS)
    mutations = {"lr": tune.loguniform(*PBT_MUTATIONS["lr"]),
                 "entropy_coeff": tune.uniform(*PBT_MUTATIONS["entropy_coeff"]),
                 "clip_param": list(PBT_MUTATIONS["clip_param"])}
    seeds = [100 * ctx.seed + i for i in range(trials)]
    ctx.note(hyperparameters=dict(RSL_STYLE), trials=trials, perturbation_interval=interval,
             mutations={k: list(v) for k, v in PBT_MUTATIONS.items()}, trial_seeds=seeds,
             cpus_per_trial=PBT_RAY_CPUS / trials, ray_cpus=PBT_RAY_CPUS,
             loopback=session.loopback_effective())
    cfg = (FastPPOConfig().environment(f"mjlab:{task}", num_envs=num_envs, env_device=device,
                                       env_config=_episode_cfg(env_config))
           .training(**RSL_STYLE))
    space = cfg.to_dict()
    space["seed"] = tune.grid_search(seeds)

    storage = tempfile.mkdtemp(prefix="bench_mjlab_pbt_")
    trainable = tune.with_resources(get_trainable_cls("FastPPO"), {"cpu": PBT_RAY_CPUS / trials})
    try:
        ctx.start_clock()
        tune.Tuner(trainable, param_space=space,
                   tune_config=tune.TuneConfig(scheduler=paper_pbt(mutations, perturbation_interval=interval,
                                                                   metric=None, mode=None),
                                               metric=RETURN_KEY, mode="max", num_samples=1, reuse_actors=True),
                   run_config=tune.RunConfig(storage_path=storage, stop=_pbt_watch(ctx), verbose=0,
                                             checkpoint_config=tune.CheckpointConfig(
                                                 checkpoint_frequency=interval))).fit()
    finally:
        import ray

        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)


def arm_pql(ctx: H.ArmContext, num_envs: int, task: str = TASK) -> None:
    _unshadow()
    from rllib_fast.algorithms.pql import PQLConfig
    from rllib_fast.presets import preset

    kw = {k: v for k, v in preset("PQL", "Pendulum").items() if k != "num_envs"}
    ctx.note(hyperparameters=kw)
    cfg = (PQLConfig().environment(f"mjlab:{task}", num_envs=num_envs, env_config=_episode_cfg())
           .training(**kw).debugging(seed=ctx.seed))
    ctx.start_clock()
    _train_loop(ctx, cfg.build_algo())


def _busy_actions(num_envs: int, act_dim: int, seed: int, device: str, std: float = 0.37) -> List[Any]:
    """The busy workload's actions: 16 draws of N(0, ``std``) clipped to +-1, made up
    front (the learners' initial policy: 0.37 for the Cartpole settings, 1.0 for Go1's)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return [(std * torch.randn(num_envs, act_dim, generator=gen, device=device)).clamp(-1, 1) for _ in range(16)]


def _randomize_raw_clocks(env) -> None:
    """Spread a raw mjlab env's episode clocks (rsl_rl's ``init_at_random_ep_len``)."""
    import torch

    env.episode_length_buf = torch.randint_like(env.episode_length_buf, 0, int(env.max_episode_length))


def arm_raw(ctx: H.ArmContext, num_envs: int, source: str = "raw", task: str = TASK, chunk: int = 32,
            device: str = "cpu", busy: bool = False, exact_final_obs: bool = True,
            action_std: float = 0.37) -> None:
    """``chunk`` steps per report of the mjlab env itself (auto-reset) or the ``mjlab:``
    source. Zero actions from one reset: every episode clock is in step, so resets
    happen on one step in 1000 (the simulator's best case). ``busy``: the learners'
    workload instead: episode clocks randomised (rsl_rl's ``init_at_random_ep_len``,
    FastPPO's decorrelation), so some env ends on most steps, and actions ~ N(0,
    ``action_std``) clipped to +-1 (the learners' initial policy: 0.37 for the Cartpole
    settings, 1.0 for Go1's; 16 tensors drawn up front)."""
    _unshadow()
    import torch

    ctx.start_clock()
    if source == "raw":
        env = _mjlab_env(task, num_envs, ctx.seed, device)
        env.reset()
        act_dim = env.single_action_space.shape[0]
        if busy:
            _randomize_raw_clocks(env)
    else:
        from rllib_fast.envs import make

        env = make(f"mjlab:{task}", num_envs=num_envs, device=device, seed=ctx.seed,
                   exact_final_obs=exact_final_obs, **_episode_cfg())
        env.reset()
        act_dim = env.action_shape[0]
        if busy:
            env.randomize_episode_progress()
    acts = (_busy_actions(num_envs, act_dim, ctx.seed, device, action_std) if busy
            else [torch.zeros(num_envs, act_dim, device=device)])
    steps = 0
    while True:
        for i in range(chunk):
            env.step(acts[i % len(acts)])
        steps += chunk * num_envs
        if ctx.report(steps, None):
            break


def arm_paired(ctx: H.ArmContext, num_envs: int, task: str = TASK, device: str = "cpu",
               compile: Any = False, rounds: int = 20) -> None:
    """Overhead over the simulator measured so that the host's drift cancels out.

    The learn and throughput arms run one after another, minutes apart, and this
    host's physics rate moves by up to ~25% within an hour: more than the overheads
    they compare. This arm builds all three in one process and alternates short
    windows, one of each per round: the raw mjlab env under the busy workload (random
    episode clocks, actions ~ N(0, 0.37) clipped), the ``mjlab:`` source under the
    same workload (exact terminal observations, no policy), and one FastPPO
    rsl_rl-style training iteration (its rollout timed on its own). Each window steps
    ``rollout_length x N`` env steps, so a round spans a few seconds and every ratio
    is taken within one round. ``compile``: FastPPO's ``compile`` setting."""
    _unshadow()
    from rllib_fast.algorithms.ppo import FastPPOConfig
    from rllib_fast.envs import make

    kw = dict(RSL_STYLE, compile=compile)
    ctx.note(hyperparameters=kw)
    ctx.start_clock()
    raw = _mjlab_env(task, num_envs, ctx.seed, device)
    raw.reset()
    _randomize_raw_clocks(raw)
    src = make(f"mjlab:{task}", num_envs=num_envs, device=device, seed=ctx.seed, **_episode_cfg())
    src.reset()
    src.randomize_episode_progress()
    algo = (FastPPOConfig().environment(f"mjlab:{task}", num_envs=num_envs, env_device=device,
                                        env_config=_episode_cfg())
            .training(**kw).debugging(seed=ctx.seed).build_algo())
    ctx.timed(algo, "_rollout", lambda out, a, k: algo.horizon * num_envs)
    horizon = algo.horizon
    per_window = horizon * num_envs
    acts = _busy_actions(num_envs, src.action_shape[0], ctx.seed, device)

    def window(env) -> float:
        t = time.perf_counter()
        for i in range(horizon):
            env.step(acts[i % len(acts)])
        return time.perf_counter() - t

    rows, steps = [], 0
    try:
        for r in range(rounds + 2):   # the first two rounds warm up (compilation, caches)
            t_raw, t_src = window(raw), window(src)
            s0 = ctx.sample_s
            t = time.perf_counter()
            algo.train()
            t_it, t_roll = time.perf_counter() - t, ctx.sample_s - s0
            steps += per_window
            if r >= 2:
                rows.append(dict(raw_busy=per_window / t_raw, adapter_busy=per_window / t_src,
                                 rollout=per_window / t_roll, overall=per_window / t_it))
            ctx.note(paired=rows)
            ctx.report(steps, None)
            if ctx.elapsed >= ctx.budget_s:
                break
    finally:
        algo.stop()


def all_arms(go1_envs: int = 0) -> List[H.Arm]:
    arms: List[H.Arm] = []
    for n in NS:
        arms += [
            H.Arm(f"rsl_rl-{n}", "rsl_rl", f"rsl_rl OnPolicyRunner (mjlab's config) N={n}", FN + "arm_rsl_rl",
                  {"num_envs": n}, num_envs=n),
            H.Arm(f"fastppo-{n}", "FastPPO", f"FastPPO defaults N={n}", FN + "arm_fastppo",
                  {"num_envs": n}, num_envs=n),
            H.Arm(f"rsl_rl_t2-{n}", "rsl_rl", f"rsl_rl OnPolicyRunner (mjlab's config), 2 torch threads N={n}",
                  FN + "arm_rsl_rl", {"num_envs": n, "threads": 2}, num_envs=n),
            H.Arm(f"fastppo_rsl-{n}", "FastPPO-rsl", f"FastPPO rsl_rl-style N={n}", FN + "arm_fastppo",
                  {"num_envs": n, "preset": "rsl"}, num_envs=n),
            H.Arm(f"fastppo_rsl_c-{n}", "FastPPO-rsl", f"FastPPO rsl_rl-style, compile=True N={n}",
                  FN + "arm_fastppo", {"num_envs": n, "preset": "rsl", "overrides": {"compile": True}},
                  num_envs=n),
            H.Arm(f"fastppo_rsl_elu_c-{n}", "FastPPO-rsl", f"FastPPO rsl_rl-style, ELU (rsl_rl's network), "
                  f"compile=True N={n}", FN + "arm_fastppo",
                  {"num_envs": n, "preset": "rsl", "overrides": {"compile": True, "activation": "elu"}}, num_envs=n),
            H.Arm(f"fastppo_rsl_w2-{n}", "FastPPO-rsl", f"FastPPO rsl_rl-style, 2 simulator processes N={n}",
                  FN + "arm_fastppo", {"num_envs": n, "preset": "rsl", "workers": 2}, num_envs=n),
            H.Arm(f"hts_rsl-{n}", "HTSPPO-rsl", f"HTSPPO rsl_rl-style, 1 executor process (both cores) N={n}",
                  FN + "arm_hts", {"num_envs": n}, num_envs=n),
            H.Arm(f"pbt-{n}", "FastPPO-PBT", f"FastPPO + PBT ({PBT_TRIALS} trials, rsl_rl-style start, both cores) "
                  f"N={n} per trial", FN + "arm_pbt", {"num_envs": n}, num_envs=n),
            H.Arm(f"pql-{n}", "PQL", f"PQL (small-task sizes) N={n}", FN + "arm_pql", {"num_envs": n}, num_envs=n),
            H.Arm(f"paired-{n}", "paired", f"paired windows, FastPPO rsl_rl-style eager N={n}", FN + "arm_paired",
                  {"num_envs": n}, num_envs=n, mode="paired"),
            H.Arm(f"paired_c-{n}", "paired", f"paired windows, FastPPO rsl_rl-style compile=True N={n}",
                  FN + "arm_paired", {"num_envs": n, "compile": True}, num_envs=n, mode="paired"),
            H.Arm(f"raw-{n}", "raw", "mjlab env, zero actions", FN + "arm_raw", {"num_envs": n},
                  num_envs=n, mode="throughput"),
            H.Arm(f"adapter-{n}", "adapter", "mjlab: source, zero actions", FN + "arm_raw",
                  {"num_envs": n, "source": "adapter"}, num_envs=n, mode="throughput"),
            H.Arm(f"raw_busy-{n}", "raw busy", "mjlab env, random clocks and actions", FN + "arm_raw",
                  {"num_envs": n, "busy": True}, num_envs=n, mode="throughput"),
            H.Arm(f"adapter_busy-{n}", "adapter busy", "mjlab: source, random clocks and actions", FN + "arm_raw",
                  {"num_envs": n, "source": "adapter", "busy": True}, num_envs=n, mode="throughput"),
            H.Arm(f"adapter_approx_busy-{n}", "adapter busy, exact_final_obs=False",
                  "mjlab: source (mjlab's auto-reset), random clocks and actions", FN + "arm_raw",
                  {"num_envs": n, "source": "adapter", "busy": True, "exact_final_obs": False}, num_envs=n,
                  mode="throughput"),
        ]
    if go1_envs:
        n = go1_envs
        arms += [
            H.Arm(f"go1_raw-{n}", "Go1 raw", "Go1 mjlab env, zero actions", FN + "arm_raw",
                  {"num_envs": n, "task": GO1, "chunk": 4}, num_envs=n, mode="throughput"),
            H.Arm(f"go1_adapter-{n}", "Go1 adapter", "Go1 mjlab: source, zero actions", FN + "arm_raw",
                  {"num_envs": n, "task": GO1, "chunk": 4, "source": "adapter"}, num_envs=n, mode="throughput"),
            H.Arm(f"go1_raw_busy-{n}", "Go1 raw busy", "Go1 mjlab env, random clocks and actions ~ N(0, 1)",
                  FN + "arm_raw", {"num_envs": n, "task": GO1, "chunk": 4, "busy": True, "action_std": 1.0},
                  num_envs=n, mode="throughput"),
            H.Arm(f"go1_adapter_busy-{n}", "Go1 adapter busy", "Go1 mjlab: source, random clocks and actions",
                  FN + "arm_raw", {"num_envs": n, "task": GO1, "chunk": 4, "source": "adapter", "busy": True,
                                   "action_std": 1.0}, num_envs=n, mode="throughput"),
            H.Arm(f"go1_adapter_approx_busy-{n}", "Go1 adapter busy, exact_final_obs=False",
                  "Go1 mjlab: source (mjlab's auto-reset), random clocks and actions", FN + "arm_raw",
                  {"num_envs": n, "task": GO1, "chunk": 4, "source": "adapter", "busy": True, "action_std": 1.0,
                   "exact_final_obs": False}, num_envs=n, mode="throughput"),
            H.Arm(f"go1_fastppo_approx-{n}", "Go1 FastPPO, exact_final_obs=False",
                  "Go1 FastPPO (mjlab's rsl_rl settings for Go1), mjlab's auto-reset", FN + "arm_fastppo",
                  {"num_envs": n, "task": GO1, "preset": "go1", "env_config": {"exact_final_obs": False}},
                  num_envs=n, mode="throughput"),
            H.Arm(f"go1_rsl_rl-{n}", "Go1 rsl_rl", "Go1 rsl_rl runner", FN + "arm_rsl_rl",
                  {"num_envs": n, "task": GO1}, num_envs=n, mode="throughput"),
            H.Arm(f"go1_fastppo-{n}", "Go1 FastPPO", "Go1 FastPPO (mjlab's rsl_rl settings for Go1)",
                  FN + "arm_fastppo", {"num_envs": n, "task": GO1, "preset": "go1"}, num_envs=n, mode="throughput"),
        ]
    return arms


# ---------------------------------------------------------------------------------------
# report (parent side)
# ---------------------------------------------------------------------------------------
def build_report(records: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    rows = R.aggregate_learn(records)
    tp = R.aggregate_throughput(records)
    raw = tp.get("raw", {})
    lines = [f"# mjlab: rsl_rl vs FastPPO vs PQL on {TASK} (target mean return {meta['target']:g} of "
             f"{meta.get('episode_s', DEFAULT_EPISODE_S):g}, {meta.get('episode_s', DEFAULT_EPISODE_S):g} s episodes)", "",
             f"{meta['date']}, {meta['machine']}, {meta['threads']} torch thread(s) per arm, seeds {meta['seeds']}, "
             + (f"arms re-run or added {meta['updated']} (each row's cap is its own), " if meta.get("updated")
                else f"{meta['budget']:g} s cap per learn arm, ")
             + f"commit {meta.get('commit')}.", ""]
    if meta.get("note"):   # written by hand into the JSON's meta when rows of different days are mixed
        lines += [meta["note"], ""]
    if meta.get("under_load"):
        lines += [f"**Taken under load** ({meta['under_load']}): absolute times and throughputs are lower "
                  "bounds; compare arms only within this file.", ""]
    lines += ["## Learning", "", R.learn_table(rows), ""]
    busy = tp.get("raw busy", {})

    def share(x, ceiling):
        return f"{100.0 * (1.0 - x / ceiling):.0f}%" if x and ceiling else "–"

    over = []
    for r in rows:
        n = int(r["num_envs"] or 0)
        ceiling = (raw.get(n) or {}).get("tput_overall")
        ceiling_busy = (busy.get(n) or {}).get("tput_overall")
        if (ceiling or ceiling_busy) and r.get("sps_overall"):
            over.append([r["label"], r["num_envs"], R.fmt_sps(r["sps_overall"]), R.fmt_sps(r.get("sps_sampling")),
                         R.fmt_sps(ceiling), share(r["sps_overall"], ceiling), R.fmt_sps(ceiling_busy),
                         share(r["sps_overall"], ceiling_busy), share(r.get("sps_sampling"), ceiling_busy)])
    if over:
        lines += ["## Overhead over the raw simulator (same N)", "",
                  "raw: the mjlab env, zero actions, all episode clocks in step (resets on one step in 1000: "
                  "the simulator's best case); raw busy: the mjlab env with the learners' workload (random "
                  "episode clocks, so some env resets on most steps, and random actions). Overhead = share of "
                  "the arm's time not spent stepping the simulator at that rate. Sampling: rsl_rl's arm times "
                  "only its env.step calls, FastPPO's its whole rollout (policy included), so a negative share "
                  "for rsl_rl means its env steps ran faster than the raw busy window (random actions differ). "
                  "PBT's rate is summed over its 4 trials on both cores.", "",
                  R.markdown_table(["arm", "N", "env-steps/s overall", "env-steps/s sampling", "raw",
                                    "overall vs raw", "raw busy", "overall vs raw busy",
                                    "sampling vs raw busy"], over), ""]
    lines += _paired_section(records)
    lines += _goals(rows, raw, busy, paired_summary(records), meta)
    cart = {f: v for f, v in tp.items() if not f.startswith("Go1")}
    go1 = {f: v for f, v in tp.items() if f.startswith("Go1")}
    if cart:
        ns = sorted({n for by_n in cart.values() for n in by_n})
        lines += ["## Throughput (env-steps/s)", "", R.throughput_table(cart, ns), ""]
    if go1:
        ns = sorted({n for by_n in go1.values() for n in by_n})
        lines += [f"## {GO1} throughput (env-steps/s, CPU)", "",
                  "Learning Go1 needs a GPU (a few hundred env-steps/s here); these rows compare the loops. "
                  "raw / adapter: zero actions (the robot stands: the simulator's best case); busy: random "
                  "episode clocks and actions ~ N(0, 1) clipped to +-1 (both learners' initial std), so robots "
                  "fall and reset; rsl_rl and FastPPO: training iterations with mjlab's rsl_rl settings for Go1 "
                  "(sampling: rsl_rl's env.step calls, FastPPO's whole rollout).", "",
                  R.throughput_table(go1, ns), ""]
    return "\n".join(lines)


def paired_summary(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per paired arm: the median over rounds of each window's env-steps/s and of
    each ratio to the raw busy window of the same round (drift cancels within a round)."""
    out = []
    for rec in records:
        rounds = (rec.get("notes") or {}).get("paired") or []
        if rec.get("mode") != "paired" or not rounds:
            continue
        row = dict(label=rec["label"], num_envs=rec.get("num_envs"), rounds=len(rounds))
        for k in ("raw_busy", "adapter_busy", "rollout", "overall"):
            row[k] = R.median([r[k] for r in rounds])
            if k != "raw_busy":
                ratios = sorted(1.0 - r[k] / r["raw_busy"] for r in rounds)
                row[k + "_below"] = R.median(ratios)
                row[k + "_range"] = (ratios[0], ratios[-1])
        out.append(row)
    return out


def _paired_section(records: List[Dict[str, Any]]) -> List[str]:
    rows = paired_summary(records)
    if not rows:
        return []
    pct = lambda x: f"{100.0 * x:.0f}%"  # noqa: E731

    def cell(r, k):
        lo, hi = r[k + "_range"]
        return f"{R.fmt_sps(r[k])}: {pct(r[k + '_below'])} [{pct(lo)} to {pct(hi)}]"

    table = [[r["label"], r["num_envs"], r["rounds"], R.fmt_sps(r["raw_busy"]), cell(r, "adapter_busy"),
              cell(r, "rollout"), cell(r, "overall")] for r in rows]
    return ["## Paired overhead (one process, alternating windows)", "",
            "Each round steps the raw mjlab env (busy workload), then the `mjlab:` source (same workload, "
            "exact terminal observations, no policy), then runs one FastPPO rsl_rl-style training iteration, "
            "each window rollout_length x N env steps, all in one process: the host's drift, which moves "
            "the separate arms above by up to ~25%, cancels within a round. Cells: median env-steps/s, then "
            "the median share below the same round's raw busy rate [min to max over rounds]. Rollout: "
            "FastPPO's whole rollout (policy forward, sampling, env step, storage); overall: the whole "
            "iteration, PPO update included.", "",
            R.markdown_table(["arm", "N", "rounds", "raw busy", "adapter busy", "FastPPO rollout",
                              "FastPPO overall"], table), ""]


def _goals(rows: List[Dict[str, Any]], raw: Dict[int, Any], busy: Dict[int, Any],
           paired: Optional[List[Dict[str, Any]]] = None, meta: Optional[Dict[str, Any]] = None) -> List[str]:
    """The two goals, computed from this file's rows: FastPPO's best time to
    target over both N (any FastPPO arm; PBT listed apart) at least 1.5x shorter than
    rsl_rl's best, and FastPPO's overall env-steps/s within 10% of the raw simulator's
    at the same N (both ceilings shown; the paired arms, where present, give the
    drift-free reading against raw busy)."""
    def best(families):
        hit = [r for r in rows if r["family"] in families and r["n_reached"]]
        return min(hit, key=lambda r: r["t_reach"]) if hit else None

    out = ["## Goals", ""]
    rsl, ppo, pbt = best({"rsl_rl"}), best({"FastPPO", "FastPPO-rsl"}), best({"FastPPO-PBT"})
    if rsl and ppo:
        x = rsl["t_reach"] / ppo["t_reach"]
        out.append(f"- Time to target: FastPPO's best {ppo['t_reach']:.1f} s ({ppo['label']}, reached "
                   f"{ppo['n_reached']}/{ppo['n_runs']}) vs rsl_rl's best {rsl['t_reach']:.1f} s ({rsl['label']}, "
                   f"reached {rsl['n_reached']}/{rsl['n_runs']}): ratio {x:.2f}; goal 1.5x "
                   f"**{'met' if x >= 1.5 else 'not met'}** (medians over the seeds that reached it).")
    else:
        out.append(f"- Time to target: not comparable (rsl_rl reached: {bool(rsl)}, FastPPO reached: {bool(ppo)}).")
    if rsl:
        n = int(rsl["num_envs"] or 0)
        rate = (busy.get(n) or {}).get("tput_overall")
        if rate:
            episode_steps = int(round(float((meta or {}).get("episode_s", DEFAULT_EPISODE_S)) / 0.05))
            target = float((meta or {}).get("target", TARGET))
            floor = episode_steps * n / rate
            goal = rsl["t_reach"] / 1.5
            out.append(f"- Floor: every counted episode is {episode_steps} steps long, so a mean of {target:g} needs "
                       f"one whole episode per env under a near-perfect policy: at least {episode_steps} x N env "
                       f"steps, {floor:.1f} s at N={n} at the raw busy rate ({R.fmt_sps(rate)}). 1.5x rsl_rl's "
                       f"{rsl['t_reach']:.1f} s is {goal:.1f} s: {goal - floor:.1f} s of physics to learn that policy "
                       f"from scratch, where rsl_rl's runner took {rsl['t_reach'] - floor:.1f} s beyond the floor.")
    if pbt:
        out.append(f"- PBT's best: {pbt['t_reach']:.1f} s ({pbt['label']}, reached {pbt['n_reached']}/"
                   f"{pbt['n_runs']}; env steps summed over its trials).")
    hts = best({"HTSPPO-rsl"})
    if hts:
        vs = f"; {rsl['t_reach'] / hts['t_reach']:.2f}x rsl_rl's best" if rsl else ""
        out.append(f"- HTSPPO's best (learning overlapped with physics, both cores; listed apart): "
                   f"{hts['t_reach']:.1f} s ({hts['label']}, reached {hts['n_reached']}/{hts['n_runs']}){vs}.")
    for r in rows:
        n = int(r["num_envs"] or 0)
        c = (busy.get(n) or {}).get("tput_overall")
        if r["family"] == "HTSPPO-rsl" and r.get("sps_overall") and c:
            out.append(f"- {r['label']}: overall rate {R.fmt_sps(r['sps_overall'])}, "
                       f"{100 * (1.0 - r['sps_overall'] / c):.0f}% below raw busy ({R.fmt_sps(c)}).")
    for n in sorted({int(r["num_envs"] or 0) for r in rows}):
        cands = [r for r in rows if r["family"] in ("FastPPO", "FastPPO-rsl") and int(r["num_envs"] or 0) == n
                 and r.get("sps_overall")]
        if not cands:
            continue
        top = max(cands, key=lambda r: r["sps_overall"])
        parts = []
        for name, ceil in (("raw", raw), ("raw busy", busy)):
            c = (ceil.get(n) or {}).get("tput_overall")
            if c:
                gap = 1.0 - top["sps_overall"] / c
                parts.append(f"{100 * gap:.0f}% below {name} ({R.fmt_sps(c)}): "
                             f"**{'met' if gap <= 0.10 else 'not met'}**")
        same_n = [p for p in paired or [] if int(p["num_envs"] or 0) == n]
        if parts and same_n:
            best_p = min(same_n, key=lambda p: p["overall_below"])
            parts.append(f"these compare arms run minutes apart (the host drifts ~+-15%); the paired reading, "
                         f"{100 * best_p['overall_below']:.0f}% below raw busy in the same rounds ({best_p['label']}), "
                         f"decides: **{'met' if best_p['overall_below'] <= 0.10 else 'not met'}**")
        if parts:
            out.append(f"- N={n}: FastPPO's best overall rate {R.fmt_sps(top['sps_overall'])} ({top['label']}); "
                       + "; ".join(parts) + " (goal: within 10%).")
        # the hot path alone: FastPPO's rollout (batched policy forward, sampling, env step,
        # storage writes) against the simulator stepping the same workload with no policy
        c = (busy.get(n) or {}).get("tput_overall")
        samp = [r for r in cands if r.get("sps_sampling")]
        if c and samp:
            worst = min(samp, key=lambda r: r["sps_sampling"])
            gap = 1.0 - worst["sps_sampling"] / c
            out.append(f"- N={n}: the hot path alone (FastPPO's whole rollout: policy forward, sampling, env step, "
                       f"storage) runs at {R.fmt_sps(worst['sps_sampling'])} in its slowest arm ({worst['label']}), "
                       f"{100 * gap:.0f}% below raw busy: **{'within' if gap <= 0.10 else 'not within'} 10%**. "
                       "The overall rate above adds the PPO update, which on this CPU runs on the same core "
                       "between rollouts (as rsl_rl's does).")
    for r in paired or []:
        gap = r["overall_below"]
        update_share = 1.0 - r["overall"] / r["rollout"] if r.get("rollout") else float("nan")
        out.append(f"- Paired ({r['label']}, {r['rounds']} rounds): overall {100 * gap:.0f}% below raw busy in the "
                   f"same rounds, rollout alone {100 * r['rollout_below']:.0f}%, the source without a policy "
                   f"{100 * r['adapter_busy_below']:.0f}%; the PPO update (and the rest of the iteration) takes "
                   f"{100 * update_share:.0f}% of the iteration's time: overall goal "
                   f"**{'met' if gap <= 0.10 else 'not met'}** against raw busy.")
    return out + [""]


# ---------------------------------------------------------------------------------------
# --recipes: the shipped fastest recipes vs rsl_rl's runner at its best N (10 s episodes)
# ---------------------------------------------------------------------------------------
#: (key, task, target, recipe file): issue 25's part 3
RECIPES = (("balance", "Mjlab-Cartpole-Balance", 9.0, "mjlab-cartpole-balance-fast"),
           ("swingup", "Mjlab-Cartpole-Swingup", 8.0, "mjlab-cartpole-swingup-fast"))
#: rsl_rl's candidates: its best of these is the reference
RSL_NS = (64, 128, 256, 1024)
RECIPE_EPISODE_S = 10.0


#: FastPPO schedule keys -> (rsl_rl runner config key, mjlab's registered value): the
#: recipe's values that differ are given to rsl_rl's side of the sweep
RSL_SCHEDULE = {"rollout_length": ("num_steps_per_env", 32),
                "num_epochs": ("algorithm.num_learning_epochs", 5),
                "num_minibatches": ("algorithm.num_mini_batches", 4),
                "gamma": ("algorithm.gamma", 0.99),
                "lambda_": ("algorithm.lam", 0.95),
                "adaptive_lr_kl_target": ("algorithm.desired_kl", 0.01)}


def _recipe_schedule(file: str) -> tuple:
    """(N, rsl_rl overrides) of a shipped recipe file: its schedule settings that differ
    from mjlab's registered rsl_rl config, as rsl_rl runner keys."""
    cfg = _recipe_experiment(file)["config"]
    over = {rsl: cfg[ours] for ours, (rsl, default) in RSL_SCHEDULE.items()
            if ours in cfg and cfg[ours] != default}
    return int(cfg["num_envs"]), over


def _schedule_label(over: Dict[str, Any]) -> str:
    names = {"num_steps_per_env": "steps/env", "algorithm.num_learning_epochs": "epochs",
             "algorithm.num_mini_batches": "minibatches", "algorithm.gamma": "gamma", "algorithm.lam": "lambda",
             "algorithm.desired_kl": "KL target"}
    return ", ".join(f"{v} {names[k]}" for k, v in over.items())


def recipe_arms(key: str) -> List[H.Arm]:
    """rsl_rl's runner (mjlab's registered config) at every N of RSL_NS, and (the peer's
    side of the sweep that found the recipe) with the recipe's N and schedule (steps/env,
    epochs, minibatches, gamma, lambda, KL target where they differ); the shipped recipe;
    the simulator alone (busy workload) at each N for the physics floor."""
    _, task, _, file = next(r for r in RECIPES if r[0] == key)
    n_recipe, over = _recipe_schedule(file)
    arms = [H.Arm(f"rsl_rl_{key}-{n}", "rsl_rl", f"{key}: rsl_rl runner (mjlab's config) N={n}", FN + "arm_rsl_rl",
                  {"num_envs": n, "task": task}, num_envs=n) for n in RSL_NS]
    if over:
        arms.append(H.Arm(f"rsl_rl_recipe_{key}-{n_recipe}", "rsl_rl",
                          f"{key}: rsl_rl runner, mjlab's config with the recipe's {_schedule_label(over)}, "
                          f"N={n_recipe}",
                          FN + "arm_rsl_rl", {"num_envs": n_recipe, "task": task, "overrides": over},
                          num_envs=n_recipe))
    compiles = bool(_recipe_experiment(file)["config"].get("compile", False))
    arms.append(H.Arm(f"recipe_{key}-{n_recipe}", "recipe",
                      f"{key}: tune_configs/{file}.yaml" + (" (compile cache warm)" if compiles else ""),
                      FN + "arm_recipe", {"num_envs": n_recipe, "file": file}, num_envs=n_recipe))
    if compiles:
        arms.append(H.Arm(f"recipe_cold_{key}-{n_recipe}", "recipe cold",
                          f"{key}: tune_configs/{file}.yaml, compile cache cold (first run on a machine)",
                          FN + "arm_recipe", {"num_envs": n_recipe, "file": file, "compile_cache": "cold"},
                          num_envs=n_recipe))
    arms += [H.Arm(f"raw_busy_{key}-{n}", f"raw busy {key}", f"{key}: mjlab env, random clocks and actions",
                   FN + "arm_raw", {"num_envs": n, "task": task, "busy": True}, num_envs=n, mode="throughput")
             for n in sorted(set(RSL_NS) | {n_recipe})]
    return arms


def _median_with_misses(row: Dict[str, Any]) -> float:
    """Median time to target over all seeds, a seed that did not reach it counting as infinite."""
    ts = sorted(math.inf if t is None else t for t in row["t_reach_all"])
    if not ts:
        return math.inf
    mid = len(ts) // 2
    return ts[mid] if len(ts) % 2 else 0.5 * (ts[mid - 1] + ts[mid])


def recipe_goal_lines(key: str, records: List[Dict[str, Any]]) -> List[str]:
    """The goal (recipe median >= 1.5x sooner than rsl_rl's best N's median), the physics
    floor, and each arm's time split: simulator (env steps at the raw busy rate of its N),
    the rest of its rollout (policy inference, sampling, storage, adapter), the update
    (the rest of the iteration), waiting (0 for these synchronous arms)."""
    _, task, target, file = next(r for r in RECIPES if r[0] == key)
    recs = [r for r in records if f"_{key}-" in r["key"]]   # this task's arms (every key names it)
    rows = R.aggregate_learn(recs)
    busy = R.aggregate_throughput(recs).get(f"raw busy {key}", {})
    out = [f"## {key.capitalize()} ({task}, target {target:g} of 10)", "", R.learn_table(rows), ""]
    rsl = [r for r in rows if r["family"] == "rsl_rl"]
    registered = [r for r in rsl if "recipe" not in r["key"]]   # mjlab's registered config, N in RSL_NS
    rec = next((r for r in rows if r["family"] == "recipe"), None)
    if registered and rec:
        best = min(registered, key=_median_with_misses)
        t_rsl, t_rec = _median_with_misses(best), _median_with_misses(rec)
        ratio = t_rsl / t_rec if math.isfinite(t_rsl) and t_rec > 0 else float("nan")
        out.append(f"- Goal (issue 25: rsl_rl's runner with mjlab's registered config at its best N of "
                   f"{', '.join(map(str, RSL_NS))}): recipe median {t_rec:.1f} s vs {best['label']} median "
                   f"{t_rsl:.1f} s (a seed that did not reach counts as infinite): {ratio:.2f}x sooner; goal 1.5x "
                   f"**{'met' if ratio >= 1.5 else 'not met'}**.")
        tuned = [r for r in rsl if "recipe" in r["key"]]
        if tuned:
            t_tuned = _median_with_misses(tuned[0])
            r2 = t_tuned / t_rec if math.isfinite(t_tuned) and t_rec > 0 else float("nan")
            out.append(f"- Against rsl_rl's runner given the recipe's own schedule ({tuned[0]['label']}): median "
                       f"{t_tuned:.1f} s, the recipe {r2:.2f}x sooner"
                       f"{'' if r2 >= 1.5 else ' (below 1.5x: part of the gain is the schedule, which rsl_rl can use too)'}.")
        cold = next((r for r in rows if r["family"] == "recipe cold"), None)
        if cold is not None:
            t_cold = _median_with_misses(cold)
            out.append(f"- The same recipe with torch's compile cache cold (its first run on a machine, every "
                       f"graph compiled inside the clock): median {t_cold:.1f} s, "
                       f"{t_rsl / t_cold if t_cold > 0 else float('nan'):.2f}x sooner than rsl_rl's registered "
                       "config at its best N.")
    split = []
    for r in rows:
        n = int(r["num_envs"] or 0)
        rate = (busy.get(n) or {}).get("tput_overall")
        if not (rate and r.get("sps_overall") and r.get("sps_sampling")):
            continue
        sim = r["sps_overall"] / rate              # share of wall time the simulator needs at raw busy speed
        sampling = r["sps_overall"] / r["sps_sampling"]   # share of wall time inside rollout / env.step
        label = "env.step" if r["family"] == "rsl_rl" else "rollout"
        split.append([r["label"], n, R.fmt_sps(rate), f"{100 * sim:.0f}%",
                      f"{100 * max(0.0, sampling - sim):.0f}%" + ("" if r["family"] != "rsl_rl" else " (in env.step)"),
                      f"{100 * (1 - sampling):.0f}%" + (" (policy and update)" if r["family"] == "rsl_rl" else ""),
                      "0%", label])
        if n and rate:
            floor = 200 * n / rate
            split[-1].append(f"{floor:.1f} s")
    if split:
        out += ["", "Time split (share of wall time; simulator = env steps at the raw busy rate of the same N; "
                "rsl_rl's arm times only env.step, so its policy inference counts with its update). Physics floor: "
                "one whole 200-step episode per env at the raw busy rate (a mean over finished episodes cannot "
                "reach the target sooner).", "",
                R.markdown_table(["arm", "N", "raw busy", "simulator", "rest of sampling", "update and the rest (build included)", "waiting",
                                  "timed", "physics floor"], split)]
    return out + [""]


def recipes_main(args) -> None:
    """``--recipes``: each task's rsl_rl arms and recipe, seeds as given, in one run."""
    os.environ[EPISODE_S_ENV] = repr(RECIPE_EPISODE_S)
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    logdir = args.logdir or H.default_logdir(NAME + "_recipes")
    out_dir = args.out_dir or os.path.join(HERE, "results")
    if args.replot:
        with open(args.replot) as f:
            payload = json.load(f)
        records, meta = payload["records"], payload["meta"]
    else:
        records, t0 = [], time.time()
        wanted = {a.key for a in H.select_arms([a for k, *_ in RECIPES for a in recipe_arms(k)], args.arms)}
        for key, _, target, _ in RECIPES:
            arms = [a for a in recipe_arms(key) if a.key in wanted]
            if arms:
                print(f"{key}: {len(arms)} arms, seeds {seeds}, target {target:g}, logs in {logdir}", flush=True)
                records += H.run_arms_with_args(arms, seeds, args, target=target, logdir=logdir)
        meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU",
                    threads=args.threads, seeds=seeds, budget=args.budget, commit=_git_commit(),
                    total_min=(time.time() - t0) / 60, under_load=args.under_load)
        if args.update:
            records, meta, _ = H.merge_update(args.update, records, meta, seeds)
    lines = [f"# mjlab Cartpole: the shipped recipes vs rsl_rl's runner at its best N ({meta['date']})", "",
             f"{meta['machine']}, {meta['threads']} torch thread(s) per arm, seeds {meta['seeds']}, "
             f"{meta['budget']:g} s cap, 10 s episodes (200 steps, maximum return 10), commit {meta.get('commit')}; "
             "one arm at a time. Time to target counts from building the algorithm (envs included).", ""]
    if meta.get("updated"):
        lines += [f"Rows re-run on {meta['updated']}: {meta.get('update_note') or 'see the JSON'} "
                  "(the other rows are from the first date).", ""]
    if meta.get("under_load"):
        lines += [f"**Taken under load** ({meta['under_load']}).", ""]
    for key, *_ in RECIPES:
        lines += recipe_goal_lines(key, records)
    md = "\n".join(lines)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "mjlab_recipes.md"), "w") as f:
        f.write(md + "\n")
    if not args.replot:
        H.save_json(os.path.join(out_dir, "mjlab_recipes.json"), dict(meta=meta, records=records))
    print("\n" + md)


def gpu_kit(device: str, num_envs: int, seconds: float) -> Dict[str, Any]:
    """Entry point of benchmarks/gpu.py: Go1 flat env-steps/s of rsl_rl's runner and
    FastPPO (rsl_rl settings) on ``device`` at ``num_envs``, each in a child process
    with half of ``seconds``."""
    logdir = H.default_logdir(NAME + "_gpu")
    arms = [H.Arm(f"go1_rsl_rl-{num_envs}", "Go1 rsl_rl", "Go1 rsl_rl runner", FN + "arm_rsl_rl",
                  {"num_envs": num_envs, "task": GO1, "device": device}, num_envs=num_envs, mode="throughput"),
            H.Arm(f"go1_fastppo-{num_envs}", "Go1 FastPPO", "Go1 FastPPO", FN + "arm_fastppo",
                  {"num_envs": num_envs, "task": GO1, "preset": "go1", "device": device}, num_envs=num_envs,
                  mode="throughput")]
    recs = H.run_arms(arms, [0], budget_s=seconds / 2, target=TARGET, threads=1, logdir=logdir,
                      throughput_s=max(2.0, seconds / 4), throughput_budget_s=seconds / 2)
    return {r["family"]: {"env_steps_per_s": r.get("tput_overall"), "status": r["status"]} for r in recs}


def _git_commit() -> Optional[str]:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=HERE, timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    H.add_common_args(p, budget=600.0, target=TARGET)
    p.add_argument("--go1", action="store_true", help="add the Go1 flat throughput arms")
    p.add_argument("--go1-envs", type=int, default=64, help="N for the Go1 arms (default %(default)s)")
    p.add_argument("--under-load", default="", help="say so in the report (what else ran)")
    p.add_argument("--episode-s", type=float, default=DEFAULT_EPISODE_S,
                   help="episode length of every arm in seconds (default %(default)s, mjlab's; 10: the "
                        "learning-speed setting, target 9.0 unless --target is given, report mjlab_10s.md)")
    p.add_argument("--recipes", action="store_true",
                   help="the shipped fastest recipes (tune_configs/mjlab-cartpole-*-fast.yaml) vs rsl_rl's runner "
                        "at N = 64, 128, 256, 1024 on Balance and Swingup, 10 s episodes (results/mjlab_recipes.md)")
    args = p.parse_args(argv)
    if args.recipes:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        root = os.path.dirname(HERE)
        os.environ["PYTHONPATH"] = os.pathsep.join([root] + [q for q in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if q and os.path.abspath(q) != root])
        if args.list:
            for key, *_ in RECIPES:
                for a in recipe_arms(key):
                    print(f"{a.key if a.mode == 'learn' else 'tput:' + a.key:28s} {a.mode:10s} {a.label}")
            return
        return recipes_main(args)
    os.environ[EPISODE_S_ENV] = repr(float(args.episode_s))
    name = NAME if args.episode_s == DEFAULT_EPISODE_S else f"{NAME}_{args.episode_s:g}s"
    if args.episode_s != DEFAULT_EPISODE_S and args.target == TARGET:
        args.target = 0.9 * args.episode_s  # 0.9 x the maximum return (reward <= 1 per 0.05 s step)
    # the PBT arm starts a local Ray in its child: loopback only, the switch rllib_fast.tune.session
    # documents (LOOPBACK_ENV, read when ray is first imported, so it must be in the children's env)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # the children import rllib_fast from this checkout (their sys.path has benchmarks/, not the root)
    root = os.path.dirname(HERE)
    os.environ["PYTHONPATH"] = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and os.path.abspath(p) != root])
    arms = all_arms(args.go1_envs if args.go1 else 0)
    if args.list:
        for a in arms:
            print(f"{a.key if a.mode == 'learn' else 'tput:' + a.key:24s} {a.mode:10s} {a.label}")
        return
    results_dir = os.path.join(HERE, "results")
    if args.replot:
        with open(args.replot) as f:
            payload = json.load(f)
        records, meta = payload["records"], payload["meta"]
        out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.replot))
    else:
        if args.quick:
            args.budget = min(args.budget, 30.0)
            args.throughput_s = min(args.throughput_s, 3.0)
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
        records = H.run_arms_with_args(arms, seeds, args, target=args.target, logdir=logdir)
        meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU, "
                            f"Python {platform.python_version()}",
                    threads=args.threads, seeds=seeds, budget=args.budget, target=args.target,
                    throughput_s=args.throughput_s, total_min=(time.time() - t0) / 60, quick=args.quick,
                    commit=_git_commit(), under_load=args.under_load, episode_s=args.episode_s)
        if args.update:
            records, meta, saved_dir = H.merge_update(args.update, records, meta, seeds)
            out_dir = args.out_dir or saved_dir
    os.makedirs(out_dir, exist_ok=True)
    md = build_report(records, meta)
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(md + "\n")
    if not args.replot or args.update:
        H.save_json(os.path.join(out_dir, name + ".json"), dict(meta=meta, records=records))
    print("\n" + md)
    print(f"\nwrote {os.path.join(out_dir, name + '.md')}")


if __name__ == "__main__":
    main()
