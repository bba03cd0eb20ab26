"""HTSPPO / HTSA2C: High-Throughput Synchronous RL (Liu, Yeh & Schwing 2020).

One round (``_round``) is the whole algorithm:

1. **sync point** -- copy the learner's parameters (and normalisers) into the
   behaviour snapshot for this round; executors load nothing else until the
   next sync, so every transition of a batch comes from one parameter version;
2. release the **executors** for ``alpha`` steps into the *write* storage
   (actors serve them with batched inference on the snapshot; executors sample
   with their own RNG streams; see :mod:`.executors`);
3. meanwhile the **learner** consumes the *read* storage (the previous round's
   batch): it checks ``learner_version - behaviour_version == 1`` (lag exactly
   one, asserted for every batch), then updates
     * A2C: the one-step-delayed gradient of Eq. 6 -- the A2C gradient at the
       behaviour snapshot theta_{j-1} on its own data, applied to theta_j;
     * PPO: the paper's code form -- FastPPO's clipped update from the current
       theta_j with importance ratios against the stored behaviour
       log-probabilities of theta_{j-1};
4. barrier: wait until the executors filled the write storage; only then (and
   with the read storage exhausted) the storages swap roles.

Versions: the initial weights count as versions 0 *and* 1 (Eq. 6 needs
theta_{j-1} at j = 0; the paper's code also acts twice with the initial
weights), so round r acts with version r and the learner, at version r,
consumes round r-1's batch: lag 1 from the first update on.

An iteration (``train()``) is ``rounds_per_iteration`` rounds and ends at a
round boundary: a checkpoint then holds the pending batch, both snapshots,
versions, the executors' RNG streams and envs, so a restore continues exactly
(on CPU; ``RESUME_EXACT``).
"""
from __future__ import annotations

import collections
import contextlib
import copy
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Dict

import numpy as np
import torch
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, NUM_EPISODES

from ...core.rollout import RolloutStorage
from ...envs.base import env_share
from ...envs.parallel import ParallelVecEnv
from ...core.seeding import EXECUTOR, HTS_SHUFFLE, derive_seed, worker_seed
from ..a2c.algorithm import A2CUpdate
from ..onpolicy.algorithm import OnPolicyAlgorithm
from ..ppo.algorithm import PPOUpdate
from .config import HTSA2CConfig, HTSPPOConfig
from .executors import ExecutorGroupEnv, HTSRuntime
from .paper_metrics import PaperMetrics
from .storage import DoubleStorage, clone_storage


#: How many (learner, behaviour) version pairs ``lag_history`` keeps (bounded: a day-long
#: run at alpha=1 has millions of rounds).
LAG_HISTORY = 100_000


def executor_rng_seed(seed: int, e: int) -> int:
    """Seed of executor ``e``'s sampling stream (independent of its env's seed)."""
    return derive_seed(seed, EXECUTOR, e)


class HTSAlgorithm(OnPolicyAlgorithm):
    """HTS-RL's iteration over the on-policy machinery (module, storage,
    targets) and a composed update rule: HTSPPO and HTSA2C differ only in
    ``UPDATE``."""

    SUPPORTS_DATA_PARALLEL = False
    # On CPU a restored run continues bit-identically (tested).
    RESUME_EXACT = True
    # the env is split into one part per executor, and a round's storage is alpha x num_envs
    LAYOUT_KEYS = ("num_envs", "num_executors", "sync_interval")

    # -- env: one part per executor ------------------------------------------------------
    def make_env(self, num_envs: int, seed: int, config=None):
        if config is not None and config is not self.config:
            return super().make_env(num_envs, seed, config)
        cfg = self.config
        E = cfg.num_executors
        share = env_share(num_envs, E, "num_executors", type(self).__name__)
        if cfg.executor_processes:
            parts = self._start_processes(share, seed)
        else:
            parts = []
            try:
                for e in range(E):
                    parts.append(super().make_env(share, worker_seed(seed, e)))
            except BaseException:
                for p in parts:
                    p.close()
                raise
        # process executors: start-state decorrelation and validation step the parts concurrently
        return ExecutorGroupEnv(parts, parallel=cfg.executor_processes)

    def _start_processes(self, n: int, seed: int) -> list:
        """One single-process ``ParallelVecEnv`` per executor, started concurrently:
        a spawned simulator spends seconds importing torch, so starting E of them
        one after the other would cost E times that. If any fails, the others are
        closed and the first error is raised."""
        cfg = self.config

        def start(e: int) -> ParallelVecEnv:
            return ParallelVecEnv.from_name(cfg.env, n, 1, device=self.device, seed=worker_seed(seed, e),
                                            env_kwargs=dict(cfg.env_config))

        with ThreadPoolExecutor(cfg.num_executors, thread_name_prefix="hts-start") as pool:
            futures = [pool.submit(start, e) for e in range(cfg.num_executors)]
            wait(futures)
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            for f in futures:
                if f.exception() is None:
                    f.result().close()
            raise errors[0]
        return [f.result() for f in futures]

    def learns_while_acting(self) -> bool:
        return True   # the executors act while the learner trains

    # -- construction ------------------------------------------------------------------------
    def build(self) -> None:
        super().build()  # module, optimizer, one [alpha, N] storage, start-state decorrelation
        cfg = self.config
        self.alpha = self.horizon
        self.obs = self.obs.clone()          # the shared state buffer: updated in place from now on
        if self.states is not None:          # critic states (asymmetric): shared and updated in place too
            self.states = self.states.clone()
        # observations are stored flat (the policy is an MLP), so image sources such as MinAtar work too
        fields = {k: (tuple(v.shape[2:]), v.dtype) for k, v in self.storage.data.items()}
        obs_dim = int(np.prod(self.env.obs_shape))
        for k in ("obs", "final_obs", "raw_obs"):
            if k in fields:
                fields[k] = ((obs_dim,), torch.float32)
        first = RolloutStorage(self.horizon, self.env.num_envs, fields, self.device)
        self.storage = first
        self.buffers = DoubleStorage(first, clone_storage(first))
        self.snapshots = [self._new_snapshot(), self._new_snapshot()]
        self.version = 1
        self.rounds = 0
        self.executor_generators = [torch.Generator(device=self.device).manual_seed(executor_rng_seed(self.seed, e))
                                    for e in range(cfg.num_executors)]
        self.paper = PaperMetrics()
        self.train_time_s = 0.0
        self.runtime = None
        # (learner_version, behaviour_version) of the consumed batches, the last LAG_HISTORY of them
        self.lag_history: collections.deque = collections.deque(maxlen=LAG_HISTORY)
        self.stopped = False
        self._behaviour = None

    def make_shuffle_generator(self) -> torch.Generator:
        """The learner thread shuffles from its own stream: a source stepped by an
        executor thread meanwhile may draw from torch's global RNG (Isaac Gym
        tasks, mjlab), and the interleaving of the two would decide the shuffles."""
        return torch.Generator(device=self.device).manual_seed(derive_seed(self.seed, HTS_SHUFFLE))

    def _new_snapshot(self):
        snap = copy.deepcopy(self.module)
        snap.requires_grad_(False)
        return snap

    @torch.no_grad()
    def _load_snapshot(self, snap) -> None:
        for dst, src in zip(snap.state_dict().values(), self.module.state_dict().values()):
            dst.copy_(src)

    def _ensure_runtime(self) -> HTSRuntime:
        if self.stopped:
            raise RuntimeError(f"{type(self).__name__} was stopped (its envs are closed); build a new one or "
                               "restore a checkpoint into a new one")
        if self.runtime is None or not self.runtime.alive:
            cfg, env = self.config, self.env
            act = self.module
            dist_shape = (int(env.single_action_space.n),) if env.is_discrete else (act.act_dim,)
            self.runtime = HTSRuntime(env.parts, env.slices, self.obs, self.executor_generators, cfg.num_actors,
                                      cfg.deterministic_inference, self.normalize_obs, dist_shape,
                                      any_invalid=self._mark_invalid, combining=cfg.actor_mode == "combining",
                                      states=self.states)
        return self.runtime

    def _mark_invalid(self) -> None:
        self.any_invalid = True

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> None:
        cfg = self.config
        runtime = self._ensure_runtime()
        t_start = time.perf_counter()
        tot = dict(round=0.0, learner_wait=0.0, busy=0.0, act_wait=0.0, actor_busy=0.0, forwards=0, served=0,
                   trained=0)
        lags = []
        try:
            for _ in range(cfg.rounds_per_iteration):
                lag = self._round(runtime, tot)
                if lag is not None:
                    lags.append(lag)
        except BaseException:
            self._abort_round()
            raise
        elapsed = time.perf_counter() - t_start
        self.train_time_s += elapsed
        N, E = self.env.num_envs, cfg.num_executors
        n = cfg.rounds_per_iteration * self.alpha * N
        self.tracker.log_to(self.metrics)
        self.log_env_steps(n)
        m = self.metrics
        if tot["trained"]:
            self.log_trained_steps(tot["trained"])
        self.log_learner("training_intensity", self.training_intensity())
        rt = max(tot["round"], 1e-12)
        for key, value in (
                ("sps", n / max(elapsed, 1e-12)),
                ("learner_idle_fraction", tot["learner_wait"] / rt),
                ("executor_idle_fraction", 1.0 - tot["busy"] / (E * rt)),
                ("executor_action_wait_fraction", tot["act_wait"] / (E * rt)),
                ("actor_batch_mean", tot["served"] / max(tot["forwards"], 1)),
                ("actor_busy_s", tot["actor_busy"]),
                ("policy_lag", float(np.mean(lags)) if lags else float("nan")),
                ("policy_lag_max", float(max(lags)) if lags else float("nan")),
                ("learner_version", self.version),
                ("rounds", self.rounds),
                ("sync_interval", self.alpha),
                ("train_time_s", self.train_time_s)):
            m.log_value(("hts", key), value, window=1)

    def _round(self, runtime: HTSRuntime, tot: Dict[str, float]):
        """One synchronisation round; returns the lag of the consumed batch (or None)."""
        buf = self.buffers
        behaviour_version = self.version if buf.has_pending else self.version - 1
        snap = self.snapshots[behaviour_version % 2]
        self._load_snapshot(snap)                       # the sync point
        write = buf.begin_fill(behaviour_version)
        t0 = time.perf_counter()
        runtime.start_round(write, snap, self.alpha)
        lag = None
        if buf.has_pending:
            lag = self.version - buf.read_version
            if lag != 1:
                raise AssertionError(f"HTS: policy lag {lag} != 1 (learner version {self.version}, "
                                     f"behaviour version {buf.read_version})")
            self.lag_history.append((self.version, buf.read_version))
            self._consume(buf.read, self.snapshots[buf.read_version % 2])
            self.version += 1
            tot["trained"] += self.alpha * self.env.num_envs
        buf.mark_exhausted()
        t1 = time.perf_counter()
        runtime.wait_round(self.config.wait_timeout_s)
        t2 = time.perf_counter()
        buf.mark_filled()
        buf.swap()
        self.rounds += 1
        tot["round"] += t2 - t0
        tot["learner_wait"] += t2 - t1
        tot["busy"] += sum(runtime.busy_s)
        tot["act_wait"] += sum(runtime.act_wait_s)
        tot["actor_busy"] += runtime.actor_busy_s
        tot["forwards"] += runtime.forwards
        tot["served"] += runtime.served
        return lag

    def _abort_round(self) -> None:
        """Leave a consistent state when a round did not finish (Ctrl-C, a worker
        error, a timeout, an exception while learning): the executors may still
        be writing, the pending batch may be half normalised. The runtime is
        closed (its threads joined; the next ``train()`` starts a new one), both
        storages are dropped (up to two rounds of data), and the next round
        starts as the first one does: the current weights count as two versions
        (``version += 1``), so the lag stays exactly one and labels stay true.
        Episodes in flight are not recorded (the tracker missed the dropped steps)."""
        self._close_runtime()
        self.buffers.discard()
        self.version += 1
        self.tracker.skip_current_episodes()

    def _consume(self, st, behaviour) -> None:
        """Targets and update from a filled storage (the learner's half of a round).

        Executors stored raw observations; they are normalised here with the
        *behaviour* snapshot's statistics -- exactly what the actors fed the
        policy -- and the learner's statistics then absorb the batch."""
        self.storage = st
        valid = st["valid"] if self.any_invalid else None
        if self.normalize_obs:
            st["raw_obs"].copy_(st["obs"])
            st["obs"].copy_(behaviour.obs_norm.normalize(st["obs"]))
            st["final_obs"].copy_(behaviour.obs_norm.normalize(st["final_obs"]))
        self.tracker.update_batch(st["rewards"], st["done"], valid)
        if self.normalize_obs:
            self.module.obs_norm.update(st["raw_obs"], mask=valid)
        self._behaviour = behaviour
        # HTSA2C's delayed gradient evaluates targets and gradient at the behaviour parameters
        with self.metrics.log_time(("timers", "learn")), self.update_rule.acting_parameters(behaviour):
            self._learn(self._targets())

    def _target_values(self, critic_in: torch.Tensor) -> torch.Tensor:
        """``value_targets='behaviour'``: the values of the snapshot that acted,
        with its own value statistics -- what the released HTS-RL code records
        at acting time and builds returns and advantages from (PPO's value
        clipping is then relative to them, as there). 'current': the learner's
        critic (FastPPO/FastA2C's rule)."""
        behaviour = self._behaviour
        if self.config.value_targets != "behaviour" or behaviour is None:
            return super()._target_values(critic_in)
        v_n = behaviour.value(critic_in)
        return behaviour.value_norm.denormalize(v_n) if self.config.normalize_values else v_n

    # -- evaluation with the paper's metrics -------------------------------------------------------
    def evaluate(self, parallel_train_future=None) -> Dict[str, Any]:
        out = super().evaluate(parallel_train_future)
        cfg = self.config
        er = out.get(ENV_RUNNER_RESULTS, {})
        self.paper.record(self.train_time_s, er.get(EPISODE_RETURN_MEAN, float("nan")), er.get(NUM_EPISODES, 0),
                          cfg.required_time_target)
        hts = {"final": self.paper.final(), "train_time_s": self.train_time_s}
        if cfg.required_time_target is not None:
            hts["required_time"] = self.paper.required_time(cfg.required_time_target)
        if cfg.final_time_limit_s is not None:
            hts["final_time"] = self.paper.final_time(cfg.final_time_limit_s)
        out["hts"] = hts
        return out

    # -- checkpoints ------------------------------------------------------------------------------
    def stateful_components(self) -> Dict[str, Any]:
        return {**super().stateful_components(), "snapshot_0": self.snapshots[0], "snapshot_1": self.snapshots[1],
                "buffers": self.buffers, "paper_metrics": self.paper}

    def guarded_components(self) -> Dict[str, Any]:
        """The behaviour snapshots are not rolled back by ``nonfinite_guard='skip'``:
        the pending batch was collected with them, and its importance ratios,
        behaviour values and HTSA2C's delayed gradient need exactly those."""
        return {k: v for k, v in super().guarded_components().items() if not k.startswith("snapshot_")}

    def extra_state(self) -> Dict[str, Any]:
        return {**super().extra_state(), "version": self.version, "rounds": self.rounds,
                "train_time_s": self.train_time_s, "any_invalid": self.any_invalid,
                "executor_rng": [g.get_state() for g in self.executor_generators],
                "shuffle_rng": self.shuffle_generator.get_state()}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        self.obs.copy_(state["obs"])                      # keep the shared buffer object
        if self.states is not None and state.get("states") is not None:
            self.states.copy_(state["states"])
        self.version, self.rounds = int(state["version"]), int(state["rounds"])
        self.train_time_s = float(state["train_time_s"])
        self.any_invalid = bool(state["any_invalid"])
        for g, s in zip(self.executor_generators, state["executor_rng"]):
            g.set_state(torch.as_tensor(s).cpu())
        if state.get("shuffle_rng") is not None:   # a checkpoint without the key keeps the built generator
            self.shuffle_generator.set_state(torch.as_tensor(state["shuffle_rng"]).cpu())

    # -- shutdown ----------------------------------------------------------------------------------
    def _close_runtime(self) -> None:
        if getattr(self, "runtime", None) is not None:
            self.runtime.close()
            self.runtime = None

    def reset_config(self, new_config) -> bool:
        self._close_runtime()
        return super().reset_config(new_config)

    def cleanup(self) -> None:
        self.stopped = True
        self._close_runtime()
        super().cleanup()


class DelayedA2CUpdate(A2CUpdate):
    """A2C's update as the one-step-delayed gradient of Eq. 6.

    Inside :meth:`acting_parameters` the module holds the behaviour snapshot's
    parameters theta_{j-1}, so the targets, loss and gradient are A2C's at
    theta_{j-1} on its own data; :meth:`before_apply` puts theta_j back
    before clipping and the optimizer step, so the delayed gradient (and the
    optimizer's moments) advance theta_j. Normaliser statistics are the
    learner's own (they are state, not parameters)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._live = [p.detach().clone() for p in self.params]   # theta_j while the module holds theta_{j-1}
        self._at_behaviour = False

    @contextlib.contextmanager
    def acting_parameters(self, behaviour):
        self._swap_to(behaviour)
        try:
            yield
        finally:
            if self._at_behaviour:
                self._restore_live()

    def before_apply(self) -> None:
        if self._at_behaviour:
            self._restore_live()

    @torch.no_grad()
    def _swap_to(self, behaviour) -> None:
        for live, p, b in zip(self._live, self.params, behaviour.parameters()):
            live.copy_(p)
            p.copy_(b)
        self._at_behaviour = True

    @torch.no_grad()
    def _restore_live(self) -> None:
        for live, p in zip(self._live, self.params):
            p.copy_(live)
        self._at_behaviour = False


class HTSPPO(HTSAlgorithm):
    """HTS-RL with FastPPO's update (ratios against the stored behaviour log-probs)."""

    UPDATE = PPOUpdate

    @classmethod
    def get_default_config(cls) -> HTSPPOConfig:
        return HTSPPOConfig()


class HTSA2C(HTSAlgorithm):
    """HTS-RL with A2C and the one-step-delayed gradient of Eq. 6 (:class:`DelayedA2CUpdate`)."""

    UPDATE = DelayedA2CUpdate

    @classmethod
    def get_default_config(cls) -> HTSA2CConfig:
        return HTSA2CConfig()
