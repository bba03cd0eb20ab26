"""FastAPPO and FastA3C: asynchronous sampler-learners around a central store.

The driver (the Algorithm Tune talks to) owns no training envs. It starts
the parameter-server actor with its freshly initialised parameters and
``num_async_learners`` learner actors (:mod:`.learner`), each a FastPPO or
FastA2C with its own envs and seed whose optimizer is the central multi-step
Adam. One Algorithm iteration asks every learner for ``cycles_per_iteration``
rollout+learn cycles; within that, learners run, pull and write back
independently (no barrier between them), so fast learners contribute more
updates than slow ones, as in the paper. The iteration boundary is the one
barrier: it gives Tune a consistent report and checkpoints a consistent
state (central parameters + moments, every learner's envs/RNG/statistics).

The driver keeps a copy of the central parameters (pulled after every
iteration) and learner 0's normalisation statistics for ``evaluate()``,
``compute_actions()`` and ``get_module()``.
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import ray
import torch
from ray.rllib.utils.metrics import NUM_EPISODES
from ray.tune.execution.placement_groups import PlacementGroupFactory

from ...core.devices import raise_remote_device_error
from ...core.learner_actor import close_actors
from ...core.local_ray import ensure_ray
from ...core.multi_learner import log_learner_episodes
from .param_server import start_parameter_server
from ..a2c.algorithm import A2CUpdate, FastA2C
from ..onpolicy.algorithm import OnPolicyAlgorithm
from ..ppo.algorithm import FastPPO, PPOUpdate
from .config import FastA3CConfig, FastAPPOConfig
from .learner import AsyncLearnerActor



class AsyncDriver(OnPolicyAlgorithm):
    """Driver side of asynchronous learners. It builds the same module (and
    update rule, for the lr and the training intensity it reports) as the
    learners it drives, which are plain ``LEARNER`` algorithms (FastPPO or
    FastA2C) with the central store's optimizer composed in
    (:mod:`.learner`)."""

    LEARNER: type = None
    # Learners interleave through real concurrency, so a resumed run continues
    # from the exact saved state but does not replay the same interleaving.
    RESUME_EXACT = False
    SUPPORTS_DATA_PARALLEL = False

    # -- construction ------------------------------------------------------------
    def local_num_envs(self) -> int:
        return 1  # spaces and evaluation only; the learners own the training envs

    def _decorrelate(self) -> None:
        """The driver does not sample; each learner decorrelates its envs."""

    def build(self) -> None:
        super().build()
        self._check_resources()
        self._start_learners()

    def _check_resources(self) -> None:
        """Outside a Tune placement group, fail clearly instead of waiting
        forever for CPUs the cluster does not have."""
        cfg = self.config
        ensure_ray()   # a plain script's build: a local Ray of our own
        if ray.util.get_current_placement_group() is not None:
            return
        need_cpu = cfg.num_async_learners * cfg.num_cpus_per_async_learner
        need_gpu = cfg.num_async_learners * cfg.num_gpus_per_async_learner
        have = ray.cluster_resources()
        name = type(self).__name__
        if need_cpu > have.get("CPU", 0) + 1e-9:
            raise ValueError(f"{name}: `num_async_learners` = {cfg.num_async_learners} x "
                             f"`num_cpus_per_async_learner` = {cfg.num_cpus_per_async_learner} needs {need_cpu:g} "
                             f"CPUs but the Ray cluster has {have.get('CPU', 0):g}; allowed: fewer learners or a "
                             "fractional `num_cpus_per_async_learner`")
        if need_gpu > have.get("GPU", 0) + 1e-9:
            raise ValueError(f"{name}: learners need {need_gpu:g} GPUs (`num_gpus_per_async_learner`) but the "
                             f"Ray cluster has {have.get('GPU', 0):g}")

    def _start_learners(self) -> None:
        cfg = self.config
        self._server = start_parameter_server(list(self.module.parameters()), cfg.param_store_chunks,
                                              cfg.num_async_learners + 2)
        state = cfg.get_state()
        opts = {"num_cpus": cfg.num_cpus_per_async_learner, "num_gpus": cfg.num_gpus_per_async_learner}
        self._learners = [AsyncLearnerActor.options(**opts).remote(self.LEARNER, state, type(self), rank,
                                                                   self._server)
                          for rank in range(cfg.num_async_learners)]
        try:
            ray.get([w.__ray_ready__.remote() for w in self._learners])  # construction errors surface here
        except ray.exceptions.RayActorError as err:
            close_actors(self._learners)
            raise_remote_device_error(err)   # e.g. env_device='cuda' on learners given no GPU: that one line
            raise

    # -- one iteration -------------------------------------------------------------
    def training_step(self) -> None:
        cfg = self.config
        with self.metrics.log_time(("timers", "learners")):
            outs = ray.get([w.run.remote(cfg.cycles_per_iteration) for w in self._learners])
        self._pull_central(outs[0]["buffers"])
        n = int(sum(o["env_steps"] for o in outs))
        self.log_env_steps(n)
        self.log_trained_steps(int(sum(o["trained_steps"] for o in outs)))
        # the learners' episode windows as one population (as the data-parallel group logs them)
        log_learner_episodes(self.metrics, [{**o["episodes"], "episodes_in_window": o["episodes_in_window"],
                                             NUM_EPISODES: o["num_episodes"]} for o in outs])
        self._log_learner_stats(outs)

    @torch.no_grad()
    def _pull_central(self, buffers: Dict[str, torch.Tensor]) -> None:
        theta, _ = ray.get(self._server.pull_theta.remote())
        params = list(self.module.parameters())
        torch.nn.utils.vector_to_parameters(theta.to(self.device, params[0].dtype), params)
        own = dict(self.module.named_buffers())
        for k, v in buffers.items():
            own[k].copy_(v.to(own[k].device))

    def _log_learner_stats(self, outs: List[Dict[str, Any]]) -> None:
        keys = set.intersection(*(set(o["learner"]) for o in outs))
        for key in sorted(keys):
            self.log_learner(key, float(np.mean([o["learner"][key] for o in outs])),
                                   window=1)
        syncs = sum(o["async"]["syncs"] for o in outs)
        stale = sum(o["async"]["staleness"] for o in outs)
        for key, value in (("num_async_learners", len(outs)), ("syncs", syncs),
                           ("pulls_while_sampling", sum(o["async"]["pulls"] for o in outs)),
                           # other learners' updates absorbed per sync: 0 for one learner
                           ("staleness_per_sync", stale / syncs if syncs else 0.0),
                           ("training_intensity", self.training_intensity())):
            self.log_learner(key, value)

    # -- state -------------------------------------------------------------------
    def get_state(self, *args, **kwargs) -> Dict[str, Any]:
        state = super().get_state(*args, **kwargs)
        state["async"] = {"store": ray.get(self._server.get_state.remote()),
                          "learners": ray.get([w.get_state.remote() for w in self._learners])}
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        if "async" in state:
            ray.get(self._server.set_state.remote(state["async"]["store"]))
            saved = state["async"]["learners"]
            if len(saved) != len(self._learners):
                raise ValueError(f"{type(self).__name__}: checkpoint has {len(saved)} learners, config asks for "
                                 f"`num_async_learners` = {len(self._learners)}; allowed: the saved count")
            ray.get([w.set_state.remote(s) for w, s in zip(self._learners, saved)])

    def apply_live_hyperparameters(self) -> None:
        super().apply_live_hyperparameters()
        if getattr(self, "_learners", None):
            live = {k: getattr(self.config, k) for k, p in self.config.hyperparameter_spec().items() if p.live}
            ray.get([w.apply_live_config.remote(live) for w in self._learners])

    def _close_data_parallel(self) -> None:
        """Stop learners and the store (also when ``reset_config`` rebuilds)."""
        super()._close_data_parallel()
        learners, self._learners = getattr(self, "_learners", []), []
        close_actors(learners)
        if getattr(self, "_server", None) is not None:
            ray.kill(self._server)
            self._server = None

    @classmethod
    def default_resource_request(cls, config):
        """The driver's bundle plus one bundle per learner actor (the store
        needs no CPU of its own: it only copies under locks)."""
        base = super().default_resource_request(config)
        cfg = cls.get_default_config().update_from_dict(config if isinstance(config, dict) else config.to_dict())
        learner = {"CPU": cfg.num_cpus_per_async_learner, "GPU": cfg.num_gpus_per_async_learner}
        return PlacementGroupFactory(bundles=[base.bundles[0]] + [learner] * cfg.num_async_learners,
                                     strategy=cfg.placement_strategy)


class FastAPPO(AsyncDriver):
    """Stooke & Abbeel's asynchronous PPO (8 PPO sampler-learners, central
    chunk-locked store, multi-step Adam). Not RLlib's V-trace APPO."""

    LEARNER, UPDATE = FastPPO, PPOUpdate

    @classmethod
    def get_default_config(cls) -> FastAPPOConfig:
        return FastAPPOConfig()


class FastA3C(AsyncDriver):
    """Asynchronous 16-env A2C units writing to the central store."""

    LEARNER, UPDATE = FastA2C, A2CUpdate

    @classmethod
    def get_default_config(cls) -> FastA3CConfig:
        return FastA3CConfig()
