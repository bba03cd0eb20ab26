"""Per-library adapters: each builds and steps one library and hands the harness
(``protocol.Session``) the returns of the training episodes finished since its last
report. Nothing here decides success, keeps a window or reads a clock: the session
does. Imports happen inside the adapters (the child pays for them on its clock).

Adapters that can run the suite's greedy evaluation list themselves in ``EVALUATES``.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

#: adapters that run ``Session.evaluate`` (a suite with an evaluation cadence needs them all)
EVALUATES = {"fake", "rllib_fast_file", "rllib_fast_config"}


# ---------------------------------------------------------------------------
# episode taps: finished-episode returns read from a library's own bookkeeping
# ---------------------------------------------------------------------------
class TrackerTap:
    """The returns an rllib_fast ``EpisodeTracker`` recorded since the last ``take``:
    read from its ring when the algorithm logs (once per iteration, one host read),
    so the hot path is untouched. The ring holds the last ``window`` episodes, so an
    iteration that finishes more than that hands over its last ``window``."""

    def __init__(self, tracker: Any):
        import torch

        self.got: List[float] = []
        self.lost = 0
        orig = tracker.log_to

        def log_to(metrics: Any, *args: Any, **kwargs: Any) -> None:
            n = int(tracker.finished_since_log)
            k = min(n, tracker.window)
            self.lost += n - k
            if k:
                idx = torch.remainder(tracker.ptr - k + torch.arange(k, device=tracker.ptr.device), tracker.window)
                self.got.extend(tracker.ring_ret[idx].tolist())
            orig(metrics, *args, **kwargs)

        tracker.log_to = log_to

    def take(self) -> List[float]:
        out, self.got = self.got, []
        return out


class MemberTap:
    """Per-member finished-episode returns of a population (``MemberReturns``): each
    step's finished returns are kept on the device (no host sync) and read at
    ``take``; a member whose policy a PBT exploit replaced starts a new window."""

    def __init__(self, returns: Any):
        import torch

        self.K, self.pending, self.resets = returns.K, [], set()
        orig_update, orig_reset = returns.update, returns.reset_members

        def update(reward, done, valid=None):
            r = reward.double().view(returns.K, returns.n)
            d = done.view(returns.K, returns.n)
            if valid is not None:
                v = valid.view(returns.K, returns.n)
                r, d = torch.where(v, r, torch.zeros_like(r)), d & v
            keep = d & ~returns.discard
            self.pending.append(torch.where(keep, returns.ret + r, torch.full_like(r, math.nan)))
            orig_update(reward, done, valid)

        def reset_members(idx, discard_in_flight=False):
            # episodes finished before the reset: kept for the other members, dropped for
            # the reset ones (their new window starts with the new policy's episodes)
            self.take_into(self._carry)
            for m in idx.tolist():
                self._carry.pop(f"member_{int(m)}", None)
                self.resets.add(int(m))
            orig_reset(idx, discard_in_flight)

        self._carry: Dict[str, List[float]] = {}
        returns.update, returns.reset_members = update, reset_members

    def take_into(self, out: Dict[str, List[float]]) -> None:
        import torch

        if self.pending:
            vals = torch.stack(self.pending).cpu()
            self.pending = []
            for m in range(self.K):
                col = vals[:, m].reshape(-1)
                out.setdefault(f"member_{m}", []).extend(col[~torch.isnan(col)].tolist())

    def take(self, session: Any) -> Dict[str, List[float]]:
        out, self._carry = self._carry, {}
        for m in self.resets:
            session.reset_group(f"member_{m}")
        self.resets = set()
        self.take_into(out)
        return out


def _finite(x: Any) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


# ---------------------------------------------------------------------------
# rllib_fast
# ---------------------------------------------------------------------------
def file_config(path: str, run: Optional[str] = None, drop: Sequence[str] = (),
                overrides: Optional[Mapping[str, Any]] = None):
    """The experiment file parsed by ``rllib train file``'s own code (its parser,
    validation and defaults): ``(algorithm class, config dict, checkpoint frequency)``.
    ``run`` swaps the algorithm (e.g. DDPGN on PQL's file), ``drop`` removes keys
    the swapped class does not take, ``overrides`` sets keys."""
    from rllib_fast.cli import build_parser
    from rllib_fast.tune.plan import plan_from_file, resolve_algorithm, validate_config

    full = path if os.path.isabs(path) else os.path.join(REPO, path)
    args = build_parser().parse_args(["train", "file", full])
    (spec,) = plan_from_file(full, args).experiments.values()
    cls = resolve_algorithm(run or spec["run"])
    config = {k: v for k, v in spec["config"].items() if k not in set(drop)}
    config.update(overrides or {})
    if run:
        validate_config(cls, config)
    return cls, config, int((spec.get("checkpoint_config") or {}).get("checkpoint_frequency") or 0)


def reward_terms(result: Mapping[str, Any]) -> Dict[str, float]:
    """The task's own reward terms an rllib_fast result carries (``env_runners/reward_terms/<term>``:
    per-episode means of envpool Playground tasks' terms, e.g. ``tracking_lin_vel``), finite ones only."""
    terms = (result.get("env_runners") or {}).get("reward_terms") or {}
    return {k: v for k, v in ((str(k), _finite(v)) for k, v in terms.items()) if v is not None}


def _train_rllib_fast(session: Any, algo: Any, checkpoint_every: int = 0) -> None:
    """The train loop of an rllib_fast algorithm: one report per ``train()``, the
    file's checkpoints at its frequency (on the clock), evaluations when due."""
    tap = MemberTap(algo.returns) if hasattr(algo, "returns") and hasattr(algo.returns, "discard") else None
    tracker = None if tap else TrackerTap(algo.tracker)
    ckpt_dir = tempfile.mkdtemp(prefix="bench_ckpt_") if checkpoint_every else None
    session.training_started()
    it = 0
    try:
        while True:
            r = algo.train()
            it += 1
            if ckpt_dir and it % checkpoint_every == 0:
                algo.save_to_path(ckpt_dir)
            rets = tap.take(session) if tap else tracker.take()
            lib = _finite((r.get("env_runners") or {}).get("episode_return_mean"))
            # the terms of the episodes this iteration finished (none finished: the logger's last value, left out)
            terms = reward_terms(r) if (any(rets.values()) if isinstance(rets, Mapping) else rets) else {}
            if session.report(r["num_env_steps_sampled_lifetime"], rets, lib_return=lib,
                              **({"terms": terms} if terms else {})):
                break
            session.evaluate(lambda: algo.evaluate()["env_runners"]["episode_return_mean"])
    finally:
        if tracker is not None and tracker.lost:
            session.note(episodes_beyond_ring=tracker.lost)
        algo.stop()
        if ckpt_dir:
            shutil.rmtree(ckpt_dir, ignore_errors=True)


def rllib_fast_file(session: Any, path: str, run: Optional[str] = None, drop: Sequence[str] = (),
                    overrides: Optional[Mapping[str, Any]] = None, checkpoints: bool = True) -> None:
    """A shipped experiment file as ``rllib train file`` reads it, trained in this
    process (its checkpoints at the file's frequency). The seed is the run's."""
    cls, config, every = file_config(path, run, drop, dict(overrides or {}, seed=session.seed))
    session.note(algorithm=cls.__name__, config={k: v for k, v in config.items() if k != "env_config"})
    algo = cls.get_default_config().update_from_dict(config).build_algo()
    _train_rllib_fast(session, algo, every if checkpoints else 0)


def rllib_cli(session: Any, path: str, overrides: Optional[Mapping[str, Any]] = None, poll_s: float = 0.1) -> None:
    """A shipped experiment file run exactly as a user runs it: ``rllib train file
    PATH --seed S`` through this interpreter's ``rllib`` console script, in a
    subprocess (Tune, a local Ray, MLflow recording, the file's stop criteria and
    checkpoints; no thread variables). The clock is this
    arm's process start, so Ray's start and Tune's per-iteration overhead are on
    it; the cores column covers the CLI's whole process tree (Ray's own processes
    included). Episodes are not visible from outside the run, so the metric is the
    trial's ``env_runners/episode_return_mean`` (rllib_fast's tracker: the mean of
    the last 100 finished episodes, read once its lifetime count reaches 100), taken
    from ``result.json`` as Tune writes it."""
    import glob
    import json
    import signal
    import subprocess
    import sys
    import time

    out = tempfile.mkdtemp(prefix="bench_cli_")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["MLFLOW_TRACKING_URI"] = "sqlite:///" + os.path.join(out, "mlflow.db")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))  # this checkout's package
    script = os.path.join(os.path.dirname(sys.executable), "rllib")   # the console script a user types
    entry = [script] if os.path.exists(script) else [sys.executable, "-m", "rllib_fast.cli"]
    cmd = entry + ["train", "file", os.path.join(REPO, path), "--seed", str(session.seed), "--storage-path", out, "-q"]
    if overrides:
        cmd += ["--config", json.dumps(dict(overrides))]   # merged into the file's config, as a user would
    session.note(command=" ".join([os.path.basename(cmd[0])] + cmd[1:]))
    proc = subprocess.Popen(cmd, cwd=out, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    session.training_started()
    seen = 0
    try:
        while True:
            files = glob.glob(os.path.join(out, "**", "result.json"), recursive=True)
            lines: List[str] = []
            if files:
                with open(files[0]) as f:
                    lines = f.read().splitlines()
            stop = False
            for line in lines[seen:]:
                try:
                    r = json.loads(line)
                except ValueError:
                    break   # a line Tune is still writing
                seen += 1
                er = r.get("env_runners") or {}
                n = er.get("num_episodes_lifetime") or 0
                mean = _finite(er.get("episode_return_mean")) if n >= 100 else None
                # Tune stamps a result with the whole second it was produced; the storage
                # path receives result files in batches (seconds late), so the point is
                # placed at its stamp (+1 s: the latest it can have happened)
                at = float(r["timestamp"]) + 1.0 if r.get("timestamp") else None
                stop = session.report(int(r.get("num_env_steps_sampled_lifetime") or 0), window_mean=mean, at=at)
                if stop:
                    break
            if stop:
                break
            if proc.poll() is not None:
                session.note(cli_exit=proc.returncode)
                break
            if session.now() > session.budget_s:
                session.report(session.env_steps)
                break
            time.sleep(poll_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(out, ignore_errors=True)


def rllib_fast_config(session: Any, algo: str, env: str, num_envs: Optional[int] = None,
                      env_config: Optional[Mapping[str, Any]] = None, **training: Any) -> None:
    """An rllib_fast algorithm from its config class (defaults plus ``training``)."""
    from rllib_fast.tune.plan import resolve_algorithm

    cls = resolve_algorithm(algo)
    config = dict(training, env=env, seed=session.seed, env_config=dict(env_config or {}))
    if num_envs is not None:
        config["num_envs"] = num_envs
    built = cls.get_default_config().update_from_dict(config).build_algo()
    _train_rllib_fast(session, built)


# ---------------------------------------------------------------------------
# rsl_rl (mjlab's runner; envpool through peers/envpool_rsl_rl.py)
# ---------------------------------------------------------------------------
class StepTap:
    """Wraps an rsl_rl VecEnv's ``step``: per-env returns summed on the device, and
    each step's finished returns kept there (no host sync) until ``take``. Episodes
    already running when training starts (rsl_rl's random initial episode lengths)
    are not counted: only whole episodes are."""

    def __init__(self, env: Any):
        import torch

        n = env.num_envs
        self.acc = torch.zeros(n, dtype=torch.float64, device=env.device)
        self.whole = torch.zeros(n, dtype=torch.bool, device=env.device)
        self.pending: List[Any] = []
        self.steps = 0
        step = env.step

        def counted(actions):
            out = step(actions)
            rew, done = out[1], out[2] > 0
            self.acc.add_(rew.reshape(-1).double())
            self.pending.append(torch.where(done.reshape(-1) & self.whole, self.acc, torch.full_like(self.acc, math.nan)))
            self.acc.masked_fill_(done.reshape(-1), 0.0)
            self.whole |= done.reshape(-1)
            self.steps += n
            return out

        env.step = counted

    def take(self) -> List[float]:
        import torch

        if not self.pending:
            return []
        vals = torch.cat(self.pending).cpu()
        self.pending = []
        return vals[~torch.isnan(vals)].tolist()


def _train_rsl_rl(session: Any, env: Any, runner: Any) -> None:
    """rsl_rl's runner one iteration per report; a VecEnv with ``episode_metrics()`` (the envpool
    peer) has the task's reward terms recorded with each point as rllib_fast's arms do."""
    tap = StepTap(env)
    episode_metrics = getattr(env, "episode_metrics", None)
    session.training_started()
    first = True
    try:
        while True:
            runner.learn(1, init_at_random_ep_len=first)
            first = False
            terms = {k.split("/", 1)[-1]: float(v) for k, v in (episode_metrics() if episode_metrics else {}).items()}
            if session.report(tap.steps, tap.take(), **({"terms": terms} if terms else {})):
                break
    finally:
        env.close()


def _override_rl_cfg(rl_cfg: Any, overrides: Optional[Mapping[str, Any]]) -> None:
    """Set runner keys of mjlab's rsl_rl config dataclass in place: ``"x"`` or ``"section.x"``
    (``"algorithm.entropy_coef"``, ``"actor.distribution_cfg"``). An unknown key is an error,
    so a typo cannot leave the peer silently on its defaults."""
    for k, v in (overrides or {}).items():
        obj, _, attr = k.rpartition(".")
        target = getattr(rl_cfg, obj) if obj else rl_cfg
        if not hasattr(target, attr):
            raise ValueError(f"rsl_rl overrides: no key {k!r} in mjlab's runner config")
        setattr(target, attr, v)


def build_rsl_rl_mjlab(task: str, num_envs: int, seed: int, episode_length_s: Optional[float] = None,
                       overrides: Optional[Mapping[str, Any]] = None, drop_actor_terms: Sequence[str] = (),
                       rnn: Optional[Mapping[str, Any]] = None, rnn_on: str = "actor", device: str = "cpu"):
    """mjlab's env and rsl_rl runner for ``task`` as mjlab's train script builds them
    (the task's registered settings); returns ``(env, runner)``.

    ``overrides``: runner keys (``algorithm.x`` too). ``drop_actor_terms``: observation
    terms removed from mjlab's ``actor`` group on the env cfg (the critic group keeps
    them), the masking ``env_config={"drop_actor_terms": [...]}`` gives our arms.
    ``rnn``: rsl_rl ``RNNModel`` keys (``rnn_type``, ``rnn_hidden_dim``,
    ``rnn_num_layers``) for the networks ``rnn_on`` names ('actor', 'critic', 'both')."""
    import dataclasses

    import torch
    import mjlab.tasks  # noqa: F401 - registers the tasks
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.rl.runner import MjlabOnPolicyRunner
    from mjlab.tasks.registry import load_env_cfg, load_rl_cfg, load_runner_cls

    from rllib_fast.envs.mjlab import drop_terms

    rl_cfg = load_rl_cfg(task)
    rl_cfg.seed = seed
    _override_rl_cfg(rl_cfg, overrides)
    if rnn:
        if rnn_on not in ("actor", "critic", "both"):
            raise ValueError(f"rsl_rl_mjlab: rnn_on = {rnn_on!r}; allowed: actor, critic, both")
        for name in ("actor", "critic"):
            if rnn_on in (name, "both"):
                model = getattr(rl_cfg, name)
                model.class_name = "RNNModel"
                for k, v in rnn.items():
                    if not hasattr(model, k):
                        raise ValueError(f"rsl_rl_mjlab: rnn key {k!r}; allowed: rnn_type, rnn_hidden_dim, "
                                         "rnn_num_layers")
                    setattr(model, k, v)
    torch.manual_seed(seed)
    env_cfg = load_env_cfg(task)
    drop_terms(env_cfg, task, list(drop_actor_terms))
    env_cfg.scene.num_envs, env_cfg.seed = num_envs, seed
    if episode_length_s:
        env_cfg.episode_length_s = episode_length_s
    env = RslRlVecEnvWrapper(ManagerBasedRlEnv(env_cfg, device=device), clip_actions=rl_cfg.clip_actions)
    runner = (load_runner_cls(task) or MjlabOnPolicyRunner)(env, dataclasses.asdict(rl_cfg), None, device)
    return env, runner


def rsl_rl_mjlab(session: Any, task: str, num_envs: int, episode_length_s: Optional[float] = None,
                 overrides: Optional[Mapping[str, Any]] = None, drop_actor_terms: Sequence[str] = (),
                 rnn: Optional[Mapping[str, Any]] = None, rnn_on: str = "actor", device: str = "cpu") -> None:
    """mjlab's own rsl_rl runner with the task's registered settings
    (:func:`build_rsl_rl_mjlab`: masking and rsl_rl's recurrent models as options)."""
    import torch

    env, runner = build_rsl_rl_mjlab(task, num_envs, session.seed, episode_length_s, overrides, drop_actor_terms,
                                     rnn, rnn_on, device)
    session.note(num_steps_per_env=runner.cfg["num_steps_per_env"], torch_threads=torch.get_num_threads())
    _train_rsl_rl(session, env, runner)


def build_rsl_rl_envpool(task: str, num_envs: int, seed: int, mjlab_task: str,
                         overrides: Optional[Mapping[str, Any]] = None):
    """rsl_rl 5.4's OnPolicyRunner on an envpool pool through
    ``peers/envpool_rsl_rl.py``'s ``EnvpoolRslVecEnv(task_id, num_envs, seed, device)``,
    with the PPO settings mjlab registers for ``mjlab_task`` (e.g. its Go1 velocity task);
    ``overrides`` as :func:`build_rsl_rl_mjlab`'s (dotted runner keys). Returns ``(env, runner)``."""
    import dataclasses

    import torch
    import mjlab.tasks  # noqa: F401 - registers the tasks
    from mjlab.tasks.registry import load_rl_cfg
    from mjlab.rl.runner import MjlabOnPolicyRunner

    from peers.envpool_rsl_rl import EnvpoolRslVecEnv

    rl_cfg = load_rl_cfg(mjlab_task)
    _override_rl_cfg(rl_cfg, overrides)   # before the pool: a bad key fails in a second, not after its build
    torch.manual_seed(seed)
    env = EnvpoolRslVecEnv(task.removeprefix("envpool:"), num_envs, seed, "cpu")
    cfg = dataclasses.asdict(rl_cfg)
    cfg["seed"] = seed
    # mjlab's runner: rsl_rl's OnPolicyRunner with mjlab's clean-up of unset model keys (cnn/rnn)
    return env, MjlabOnPolicyRunner(env, cfg, None, "cpu")


def rsl_rl_envpool(session: Any, task: str, num_envs: int, mjlab_task: str,
                   overrides: Optional[Mapping[str, Any]] = None) -> None:
    """rsl_rl's runner on an envpool pool (:func:`build_rsl_rl_envpool`), trained on the clock."""
    env, runner = build_rsl_rl_envpool(task, num_envs, session.seed, mjlab_task, overrides)
    _train_rsl_rl(session, env, runner)


# ---------------------------------------------------------------------------
# rl_games (its own envpool configs)
# ---------------------------------------------------------------------------
class _Stop(Exception):
    pass


def rl_games(session: Any, config: str, num_actors: Optional[int] = None) -> None:
    """rl_games' runner with one of its shipped configs (``configs/mujoco/*.yaml``
    inside the installed package), run on the CPU (its device set to ``cpu`` and its
    CUDA mixed precision off; nothing else changed). Per-episode returns come from
    an algo observer that reads the algorithm's running returns at the done indices,
    in the step where rl_games itself records them (before it zeroes them)."""
    import rl_games
    import torch
    import yaml
    from rl_games.common.algo_observer import AlgoObserver
    from rl_games.torch_runner import Runner

    path = config if os.path.isabs(config) else os.path.join(os.path.dirname(rl_games.__file__), config)
    with open(path) as f:
        conf = yaml.safe_load(f)
    params = conf["params"]
    params["seed"] = session.seed
    params["config"]["env_config"]["seed"] = session.seed
    if num_actors:
        params["config"]["num_actors"] = num_actors
    params["config"]["max_epochs"] = 10 ** 9
    params["config"].pop("max_frames", None)
    # a CPU run: rl_games defaults to cuda:0, and its mixed precision is CUDA autocast
    params["config"].update(device="cpu", device_name="cpu", mixed_precision=False)
    train_dir = tempfile.mkdtemp(prefix="bench_rl_games_")
    params["config"]["train_dir"] = train_dir

    class Observer(AlgoObserver):
        def after_init(self, algo):
            self.algo, self.pending, self.steps = algo, [], 0

        def process_infos(self, infos, done_indices):   # once per vector step, both PPO and SAC
            self.steps += self.algo.num_actors
            if len(done_indices):
                self.pending.append(self.algo.current_rewards[done_indices].reshape(-1).clone())

        def after_print_stats(self, frame, epoch_num, total_time):
            rets = torch.cat(self.pending).tolist() if self.pending else []
            self.pending = []
            if session.report(self.steps, rets, lib_frame=int(frame)):
                raise _Stop

    runner = Runner(algo_observer=Observer())
    runner.load(conf)
    runner.reset()
    session.training_started()
    try:
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    except _Stop:
        pass
    finally:
        shutil.rmtree(train_dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# RLlib's own PPO
# ---------------------------------------------------------------------------
_RLLIB_RETURNS: List[float] = []


def _rllib_on_episode_end(*, episode, prev_episode_chunks=None, **kwargs) -> None:
    """Runs in the local EnvRunner (same process); ``episode`` is the last chunk of
    the episode, its earlier chunks come in ``prev_episode_chunks``."""
    _RLLIB_RETURNS.append(float(episode.get_return()) + sum(float(c.get_return()) for c in prev_episode_chunks or []))


def rllib_ppo(session: Any, env: str, num_envs: int, training: Mapping[str, Any],
              model: Mapping[str, Any]) -> None:
    """RLlib's built-in PPO (new API stack, one local EnvRunner, gymnasium's vector env)."""
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cfg = (PPOConfig().environment(env)
           .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs,
                        gym_env_vectorize_mode="vector_entry_point")
           .callbacks(on_episode_end=_rllib_on_episode_end).debugging(seed=session.seed)
           .training(**training).rl_module(model_config=DefaultModelConfig(**model)))
    algo = cfg.build_algo()
    session.training_started()
    try:
        while True:
            r = algo.train()
            rets = list(_RLLIB_RETURNS)
            _RLLIB_RETURNS.clear()
            if session.report(r["num_env_steps_sampled_lifetime"], rets):
                break
    finally:
        algo.stop()
        ray.shutdown()


# ---------------------------------------------------------------------------
# framework-free single files
# ---------------------------------------------------------------------------
def single_file(session: Any, script: str, **args: Any) -> None:
    """``single_file_ppo.py`` / ``single_file_td3.py``: their ``train(Args, callback)``."""
    import importlib

    mod = importlib.import_module(script)
    a = mod.Args(**dict(args, seed=session.seed, time_budget=1e9))
    session.training_started()
    mod.train(a, lambda s: session.report(s["env_steps"], s.pop("new_returns")))


# ---------------------------------------------------------------------------
# Tune PBT over FastPPO trials
# ---------------------------------------------------------------------------
def tune_pbt(session: Any, path: str, trials: int = 4, interval: int = 8, ray_cpus: int = 2,
             mutations: Optional[Mapping[str, Any]] = None, overrides: Optional[Mapping[str, Any]] = None) -> None:
    """Tune PBT (the project's ``paper_pbt`` preset) over ``trials`` trials of an
    experiment file's algorithm, all at once on a local Ray of ``ray_cpus`` CPUs.

    The trials run in Ray actors, out of the harness's reach: each trial's group
    gets its algorithm's own last-100 window mean (``env_runners/episode_return_mean``,
    rllib_fast's 100-episode ring) as a single value per result, so the group's
    window is that value; the session still takes the best group."""
    from ray import tune
    from ray.tune.registry import get_trainable_cls

    from rllib_fast.tune import session as rf_session
    from rllib_fast.tune.pbt import RETURN_KEY, paper_pbt

    cls, config, _ = file_config(path, overrides=dict(overrides or {}))
    m = dict(mutations or {"lr": [3e-4, 3e-3], "entropy_coeff": [0.0, 0.01], "clip_param": [0.1, 0.2, 0.3]})
    space_mut = {"lr": tune.loguniform(*m["lr"]), "entropy_coeff": tune.uniform(*m["entropy_coeff"]),
                 "clip_param": list(m["clip_param"])}
    config["seed"] = tune.grid_search([100 * session.seed + i for i in range(trials)])
    rf_session.init_ray(num_cpus=ray_cpus)
    storage = tempfile.mkdtemp(prefix="bench_pbt_")

    class Watch(tune.Stopper):
        """Tune's driver calls it with every trial result; it reports to the session.
        Tune pickles the run config, so the session (an open file) stays out of the state."""

        def __init__(self, session):
            self.session, self.steps, self.done = session, {}, False

        def __call__(self, trial_id, result):
            er = result.get("env_runners") or {}
            self.steps[trial_id] = self.steps.get(trial_id, 0.0) + float(er.get("num_env_steps_sampled") or 0)
            ret = _finite(er.get("episode_return_mean"))
            groups = {}
            if ret is not None:   # the trial's own last-100 mean stands for its window
                self.session.reset_group(trial_id)
                groups[trial_id] = [ret] * 100
            if not self.done and self.session.report(sum(self.steps.values()), groups):
                self.done = True
            return False

        def stop_all(self):
            return self.done

        def __getstate__(self):
            return {k: v for k, v in self.__dict__.items() if k != "session"}

    trainable = tune.with_resources(get_trainable_cls(cls.__name__), {"cpu": ray_cpus / trials})
    session.training_started()
    try:
        tune.Tuner(trainable, param_space=config,
                   tune_config=tune.TuneConfig(scheduler=paper_pbt(space_mut, perturbation_interval=interval,
                                                                   metric=None, mode=None),
                                               metric=RETURN_KEY, mode="max", num_samples=1, reuse_actors=True),
                   run_config=tune.RunConfig(storage_path=storage, stop=Watch(session), verbose=0,
                                             checkpoint_config=tune.CheckpointConfig(
                                                 checkpoint_frequency=interval))).fit()
    finally:
        import ray

        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)


# ---------------------------------------------------------------------------
# fake arms (the harness's own tests)
# ---------------------------------------------------------------------------
def _burn(seconds: float) -> None:
    import time

    end = time.time() + seconds
    x = 0
    while time.time() < end:
        x += 1


def fake(session: Any, ramp_s: float = 1.0, top: float = 10.0, step_s: float = 0.05, burn: bool = False,
         helper_processes: int = 0, eval_s: float = 0.0, episodes: int = 100, terms: Sequence[str] = ()) -> None:
    """A known curve: every report hands ``episodes`` returns equal to
    ``top * min(1, training-only time / ramp_s)``, so a target ``g`` is reached after
    ``ramp_s * g / top`` s of training time. ``burn``: the step burns CPU instead of
    sleeping; ``helper_processes``: that many extra processes burn CPU meanwhile.
    ``eval_s``: each greedy evaluation sleeps that long. ``terms``: reward-term names
    reported with each point, each equal to the return / ``top`` (a task's own terms)."""
    import multiprocessing
    import time

    helpers = [multiprocessing.Process(target=_burn, args=(session.budget_s + 5.0,), daemon=True)
               for _ in range(helper_processes)]
    for p in helpers:
        p.start()
    session.training_started()
    steps = 0
    try:
        while True:
            _burn(step_s) if burn else time.sleep(step_s)
            steps += episodes
            value = top * min(1.0, session.train_s() / ramp_s)
            extra = {"terms": {t: value / top for t in terms}} if terms else {}
            if session.report(steps, [value] * episodes, **extra):
                break
            session.evaluate(lambda: (time.sleep(eval_s), top)[1])
    finally:
        for p in helpers:
            p.terminate()
            p.join()
        own = os.times()   # this process alone, next to the harness's reading of the whole tree
        session.note(own_cpu_s=own.user + own.system, tree_cpu_s=session.cpu_s(force=True))
