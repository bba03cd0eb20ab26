"""One asynchronous sampler-learner: a plain FastPPO/FastA2C given, by
composition (:class:`CentralStoreSync`), the multi-step Adam of Stooke &
Abbeel App. A against the central store as its optimizer.

The learner samples its own envs with its local copy of the parameters,
computes gradients exactly as the synchronous algorithm does (same losses,
same clipping), takes a *local* Adam step, and every ``sync_every`` steps
folds its accumulated steps into the central store and continues from the
central result (which includes other learners' updates). It also pulls the
central parameters every ``pull_every_sampling_steps`` batched env steps
while sampling (§4.3: "pull the central network weights more frequently").
Every learner keeps its own observation/value normalisation statistics; they
estimate the same task's statistics, so they agree up to sampling noise.
"""
from __future__ import annotations

from typing import Any, Dict

from ray.rllib.core import DEFAULT_MODULE_ID
import ray
import torch
from ray.rllib.utils.metrics import (ALL_MODULES, ENV_RUNNER_RESULTS, LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED,
                                     NUM_ENV_STEPS_TRAINED, NUM_EPISODES)

from .async_adam import MultiStepAdam
from ...core.learner_actor import LearnerActor
from .param_server import RemoteStoreClient
from ...core.seeding import ASYNC_LEARNER, derive_seed
from ...envs.base import env_share



class MultiStepAdamOptimizer(torch.optim.Optimizer):
    """``torch.optim`` face of :class:`MultiStepAdam` so the synchronous
    algorithms' update code runs unchanged: ``step()`` flattens the gradients
    into one local multi-step-Adam step and writes the new local parameters
    back into the module. The learning rate is read from ``param_groups`` at
    every step, so live lr changes (PBT) apply."""

    def __init__(self, params, core: MultiStepAdam):
        super().__init__(list(params), {"lr": core.lr})
        self.core = core
        self._params = self.param_groups[0]["params"]
        self.write_params()

    @torch.no_grad()
    def write_params(self) -> None:
        torch.nn.utils.vector_to_parameters(self.core.theta.to(self._params[0].dtype), self._params)

    @torch.no_grad()
    def step(self, closure=None):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        self.core.lr = self.param_groups[0]["lr"]
        self.core.local_step(torch.cat([g.reshape(-1) for g in grads]))
        self.write_params()

    def state_dict(self) -> Dict[str, Any]:
        # The optimizer state that matters is central (the store's m, v, t);
        # a learner's checkpoint carries only its lr.
        return {"lr": self.param_groups[0]["lr"]}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.param_groups[0]["lr"] = state_dict["lr"]


class CentralStoreSync:
    """What turns a plain FastPPO/FastA2C into one asynchronous learner, by
    composition: the algorithm's optimizer becomes the local multi-step Adam
    against the central store (:class:`MultiStepAdamOptimizer`), and this
    object is its parameter sync, called by the algorithm's on-policy loop:

    * after every optimizer step, fold the local steps into the store once
      ``sync_every`` of them accumulated (:meth:`after_update`);
    * between two batched env steps, pull the central parameters every
      ``pull_every_sampling_steps`` steps when no local step is pending
      (:meth:`after_sampling_step`);
    * at the end of a learning phase, sync what is left, so sampling never
      runs on unsynced local steps (:meth:`after_learn`).

    It also counts syncs, pulls and staleness (other learners' central steps
    absorbed per sync) for the driver's report."""

    def __init__(self, algo, store) -> None:
        cfg = algo.config
        core = MultiStepAdam(store, lr=algo.configured_lr(), betas=tuple(cfg.adam_betas), eps=cfg.adam_eps,
                             device=algo.device)
        self.optimizer = MultiStepAdamOptimizer(algo.params, core)  # writes the central parameters in
        self.sync_every = cfg.sync_every
        self.pull_every = cfg.pull_every_sampling_steps
        self.counters = {"syncs": 0, "pulls": 0, "staleness": 0}

    @property
    def core(self) -> MultiStepAdam:
        return self.optimizer.core

    def after_update(self) -> None:
        if self.core.n_local >= self.sync_every:
            self._sync()

    def after_sampling_step(self, t: int) -> None:
        if self.pull_every is not None and (t + 1) % self.pull_every == 0 and self.core.n_local == 0:
            self.pull()
            self.counters["pulls"] += 1

    def after_learn(self) -> None:
        if self.core.n_local:
            self._sync()

    def pull(self) -> None:
        """Continue from the central parameters (and moments)."""
        self.core.pull()
        self.optimizer.write_params()

    def take_counters(self) -> Dict[str, int]:
        """The counts since the last call (and reset them)."""
        out, self.counters = self.counters, {k: 0 for k in self.counters}
        return out

    def _sync(self) -> None:
        core = self.core
        t_before = core.t
        core.sync()
        # central steps taken by *other* learners since this learner's last pull
        self.counters["staleness"] += core.t - t_before
        self.counters["syncs"] += 1
        self.optimizer.write_params()


@ray.remote
class AsyncLearnerActor(LearnerActor):
    """Runs one learner's rollout/learn cycles on request and reports them."""

    def __init__(self, learner_cls, config_state: Dict[str, Any], driver_cls, rank: int, store_handle):
        super().__init__(driver_cls, config_state)
        cfg = self.config.copy(copy_frozen=False)
        # the horizon is the trial's (total_batch_size / the total num_envs): fixed before
        # num_envs becomes this learner's share, which would make it num_async_learners x longer
        cfg.rollout_length, cfg.total_batch_size = self.config.resolved_horizon(), None
        cfg.num_envs = env_share(cfg.num_envs, cfg.num_async_learners, "num_async_learners", driver_cls.__name__)
        cfg.num_async_learners = 1  # this learner's own view: it steps its share alone
        cfg.seed = derive_seed(cfg.seed if cfg.seed is not None else 0, ASYNC_LEARNER, rank)
        cfg.evaluation_interval = None
        self.rank = rank
        self.algo = self.hosted = learner_cls(config=cfg)
        self.sync = CentralStoreSync(self.algo, RemoteStoreClient(store_handle))
        self.algo.use_optimizer(self.sync.optimizer, param_sync=self.sync)

    def run(self, cycles: int) -> Dict[str, Any]:
        """``cycles`` rollout+learn cycles; returns counts, episode window,
        losses and normaliser statistics (for the driver's evaluation copy)."""
        algo = self.algo
        with algo.rng_stream:   # the learner's own stream (core/rng.py)
            for _ in range(cycles):
                algo.training_step()
        results = algo.metrics.reduce(compile=True)   # numbers (without compile: Stats objects)
        learner = {k: float(v) for k, v in results.get(LEARNER_RESULTS, {}).get(DEFAULT_MODULE_ID, {}).items()
                   if isinstance(v, (int, float)) or (torch.is_tensor(v) and v.numel() == 1)}
        trained = results.get(LEARNER_RESULTS, {}).get(ALL_MODULES, {}).get(NUM_ENV_STEPS_TRAINED, 0)
        summary = {k: float(v) for k, v in algo.tracker.summary().items()}
        out = {
            # sampled since the last report (start-state decorrelation included in the first)
            "env_steps": int(results.get(ENV_RUNNER_RESULTS, {}).get(NUM_ENV_STEPS_SAMPLED, 0)),
            # trained on since the last report (the decorrelation steps are sampled, not trained on)
            "trained_steps": int(trained or 0),
            "episodes": summary,
            "episodes_in_window": float(algo.tracker.filled),
            "num_episodes": int(results.get(ENV_RUNNER_RESULTS, {}).get(NUM_EPISODES, 0)),
            "learner": learner,
            "async": self.sync.take_counters(),
            "buffers": {k: v.detach().cpu().clone() for k, v in algo.module.named_buffers()},
        }
        return out

    def set_state(self, state: Dict[str, Any]) -> bool:
        super().set_state(state)
        self.sync.pull()  # parameters come from the (restored) central store
        return True

    def apply_live_config(self, live: Dict[str, Any]) -> None:
        """Apply the driver's live hyperparameters (PBT) to this learner."""
        algo = self.algo
        cfg = algo.config.copy(copy_frozen=False)
        for key, value in live.items():
            setattr(cfg, key, value)
        cfg.freeze()
        algo.config = cfg
        algo.apply_live_hyperparameters()
