"""FastAlgorithm: every RLlib and Tune obligation, written once (with its
bases by role: ``core/config.py`` FastConfig, re-exported here;
``core/checkpoint.py`` what a checkpoint holds and how it is restored;
``core/evaluation.py`` evaluate()).

A FastAlgorithm owns a tensor vector env and its torch modules directly; it
builds no EnvRunnerGroup and no LearnerGroup (RLlib's per-env Python episode
machinery caps the rate whatever the number of envs; docs/architecture.md).
What remains of RLlib is its public
contract, which we honour here so subclasses only write the algorithm:

* ``config.build_algo().train()``, ``tune.Tuner("FastPPO")``, ``tune.run``;
* checkpoints (``save_to_path``/``Algorithm.from_checkpoint``/Tune), with the
  env, RNG and episode trackers included so a restore continues identically;
* ``reset_config`` for Tune's actor reuse (a rebuild: the new trial starts fresh);
* ``evaluate()`` on a separate env, the standard metric keys, GPU resource
  requests and ``get_module()``.

Subclasses implement ``build()``, ``training_step()``, ``compute_actions()``
and list their checkpointed parts in ``stateful_components()``.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.env_context import EnvContext
from ray.rllib.utils.debug.deterministic import update_global_seed_if_necessary
from ray.rllib.utils.metrics import (ALL_MODULES, ENV_RUNNER_RESULTS, FAULT_TOLERANCE_STATS, LEARNER_RESULTS,
                                     NUM_ENV_STEPS_SAMPLED, NUM_ENV_STEPS_SAMPLED_LIFETIME,
                                     NUM_ENV_STEPS_TRAINED, NUM_ENV_STEPS_TRAINED_LIFETIME)
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.registry import ENV_CREATOR, _global_registry

from ..envs import registry as env_registry
from ..envs.base import TensorVecEnv, env_share, validate_env
from ..envs.probe import action_space_error
# FastAlgorithm's obligations by role: checkpoints and evaluation are its bases; the config and
# the checkpoint errors stay importable from here
from .checkpoint import CheckpointedAlgorithm, CheckpointMismatchError, CheckpointReadError  # noqa: F401
from .config import DEVICE_CHECK, FastConfig  # noqa: F401
from .evaluation import Evaluation
from .export import export_policy
from .guard import UpdateGuard
from .metrics import EpisodeTracker
from .rng import RngStream

logger = logging.getLogger(__name__)


class FastAlgorithm(CheckpointedAlgorithm, Evaluation, Algorithm):
    """RLlib ``Algorithm`` whose hot path is a tensor vector env on one device."""

    # Whether `num_learners > 1` (synchronous data-parallel learners) is implemented.
    SUPPORTS_DATA_PARALLEL = False
    #: the action spaces the algorithm acts in: None (any), or one of
    #: ``envs.probe.ACTION_SPACE_KINDS`` ('discrete', 'continuous', 'bounded continuous')
    ACTION_SPACE: Optional[str] = None
    # Config keys a checkpoint must match before anything is loaded (they shape the env
    # state and storages; a mismatch found later would leave a half-restored algorithm).
    LAYOUT_KEYS: tuple = ("num_envs",)

    # Declared here, set by the build (and read by get_module, checkpoints, cleanup even when a
    # build failed part way): the env and evaluation env, the policy module of algorithms that
    # have one, the lr last applied from the config, the data-parallel group and context.
    env: Optional[TensorVecEnv] = None
    _eval_env: Optional[TensorVecEnv] = None
    module: Optional[torch.nn.Module] = None
    _applied_lr: Optional[float] = None
    _dp_group = None
    dist = None

    # -- construction ---------------------------------------------------------
    def setup(self, config: AlgorithmConfig) -> None:  # noqa: D401 - RLlib hook
        # Bookkeeping Algorithm.setup would have done, minus EnvRunnerGroup/LearnerGroup.
        from ray.rllib.utils import force_list
        from ray.rllib.callbacks.utils import make_callback

        self.callbacks = [cls() for cls in force_list(self.config.callbacks_class)]
        self.evaluation_config = self.config.get_evaluation_config_object()
        self.evaluation_config.validate()
        self.evaluation_config.freeze()
        self.env_runner_group = self.eval_env_runner_group = None
        self.offline_data = self.offline_eval_runner_group = None
        self._aggregator_actor_manager = None
        self.spaces = self.env_to_module_connector = self.module_to_env_connector = None
        self._set_up_metrics()
        self._build_all()
        make_callback("on_algorithm_init", self.callbacks, self.config.callbacks_on_algorithm_init,
                      kwargs=dict(algorithm=self, metrics_logger=self.metrics))

    def _build_all(self) -> None:
        cfg = self.config
        self.seed = cfg.seed if cfg.seed is not None else int(np.random.SeedSequence().entropy % (2 ** 31))
        # the algorithm's own random stream (core/rng.py): everything below and every later
        # call into the algorithm draws from it, never from the caller's generators
        self.rng_stream = RngStream(self.seed, seed_fn=lambda s: update_global_seed_if_necessary("torch", s))
        with self.rng_stream:
            self._build_in_scope()

    def _build_in_scope(self) -> None:
        cfg = self.config
        cfg.check_devices_here()   # a device this machine lacks: one line, before torch fails deep inside
        self.device = cfg.resolved_device()
        self.world_size = max(1, cfg.num_learners)
        local_envs = self.local_num_envs()
        self.env = self.make_env(local_envs, self.seed)
        if self.ACTION_SPACE is not None:   # validation checked it already where the spaces were cheap to know
            err = action_space_error(type(self).__name__, self.ACTION_SPACE, self.env.single_action_space, cfg.env)
            if err:
                raise TypeError(err)
        if getattr(cfg, "compile", False):   # the env's part of the hot path (built-in torch tasks)
            self.env.compile_step(cfg.compile, getattr(cfg, "compile_backend", None))
        if cfg.validate_env_on_setup:
            validate_env(self.env)
        self.tracker = EpisodeTracker(local_envs, self.device, cfg.metrics_num_episodes_for_smoothing,
                                      source=self.env)
        self._eval_env: Optional[TensorVecEnv] = None
        #: Optional ``callback(finished_episodes, total_episodes)`` that evaluate() calls at
        #: its host syncs (every 50 steps) and at the end: how `rllib-fast evaluate` draws
        #: its progress bar without a per-step sync.
        self.evaluation_progress = None
        self.obs = self.env.reset(seed=self.seed)
        #: The critic's input for the current observation when the algorithm reads the
        #: source's states (asymmetric actor-critic; ``build()`` sets it), else None. Kept
        #: here so checkpoints and restores carry it with ``obs`` for every algorithm.
        self.states: Optional[torch.Tensor] = None
        self.build()
        self._applied_lr = self.configured_lr()  # what build() gave the optimizers
        self._dp_group = None
        if self.world_size > 1:
            from .multi_learner import DataParallelGroup, remote_learner_rank

            if remote_learner_rank() is None:  # learners 1..L-1 join learner 0's group instead
                self._dp_group = DataParallelGroup(self, self.world_size)

    def local_num_envs(self) -> int:
        """Envs this process steps: its share of data-parallel learners'
        envs (asynchronous drivers, whose learners own all envs, step one)."""
        return env_share(self.config.num_envs, self.world_size, "num_learners", type(self).__name__)

    def make_env(self, num_envs: int, seed: int, config=None) -> TensorVecEnv:
        """Create the tensor env from ``config.env`` (a name, a Tune-registered
        creator or a callable), wrapping gymnasium vector envs if returned.
        ``config``: whose ``env``/``env_config`` (default: the training config)."""
        cfg = config if config is not None else self.config
        ctx = EnvContext({**cfg.env_config, "num_envs": num_envs, "device": str(self.device), "seed": seed},
                         worker_index=0)
        env = cfg.env
        if isinstance(env, str) and env_registry.is_known(env):
            out = env_registry.make_from_context(env, ctx)
        elif isinstance(env, str):
            out = _global_registry.get(ENV_CREATOR, env)(ctx)
        else:
            out = env(ctx)
        if isinstance(out, gym.vector.VectorEnv):
            from ..envs.gymnasium import GymVectorEnvAdapter

            out = GymVectorEnvAdapter(out, device=self.device)
        if not isinstance(out, TensorVecEnv):
            raise TypeError(f"env {env!r} produced {type(out).__name__}; allowed: a subclass of "
                            "rllib_fast.envs.TensorVecEnv or a gymnasium VectorEnv")
        return out

    @staticmethod
    def _get_env_id_and_creator(env_specifier, config):
        """Accept our env forms before RLlib's resolver (which rejects plain
        functions and tries gymnasium for unknown strings). Resolution itself
        happens in :meth:`make_env`."""
        if isinstance(env_specifier, str) or env_specifier is None:
            name = env_specifier
        else:
            name = getattr(env_specifier, "__name__", type(env_specifier).__name__)
        return name, env_specifier

    # -- subclass hooks -------------------------------------------------------
    def build(self) -> None:
        """Create modules, optimizers and storage (env and tracker exist)."""
        raise NotImplementedError("abstract: FastAlgorithm.build")

    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """Batched actions for ``obs`` (used by evaluation and the CLI)."""
        raise NotImplementedError("abstract: FastAlgorithm.compute_actions")


    def pool_over_learners(self, reduce) -> None:
        """Data-parallel learners joining their group: pool what each gathered
        alone while it was built (``reduce``: in-place sum over learners)."""


    def optimizers(self) -> list:
        """Optimizers whose learning rate is the one :meth:`configured_lr` sets."""
        return []

    # -- learning rate: one owner ---------------------------------------------------
    # The algorithm owns the lr in effect. `configured_lr()` is the one place that
    # turns the config into an lr (batch-size rules included); it builds the
    # optimizers and is re-applied only when its value changes (a PBT mutation,
    # a user edit), never merely because the config was re-applied. An lr the
    # algorithm adapted itself (FastPPO's adaptive-KL lr) therefore survives a
    # restore that leaves the lr keys alone.
    def configured_lr(self) -> float:
        """The learning rate the config prescribes (``FastConfig.configured_lr``,
        its one owner). Reads ``self.config``, the trial's config (``num_envs``
        is the total over learners)."""
        return self.config.configured_lr()

    def set_lr(self, lr: float) -> None:
        """Put ``lr`` in effect (every optimizer of :meth:`optimizers`)."""
        for opt in self.optimizers():
            for group in opt.param_groups:
                group["lr"] = lr

    def _apply_configured_lr(self) -> None:
        """Apply :meth:`configured_lr` if it differs from the value last
        applied (or restored with a checkpoint); otherwise keep the lr in effect."""
        lr = self.configured_lr()
        if lr != self._applied_lr:
            self.set_lr(lr)
            self._applied_lr = lr

    def apply_live_hyperparameters(self) -> None:
        """Bring live hyperparameters in line with the config after a config
        change or a restore. Keys read from ``self.config`` at every use need
        nothing; the lr goes through :meth:`_apply_configured_lr`."""
        self._apply_configured_lr()

    # -- RLlib obligations ------------------------------------------------------
    def step(self) -> Dict[str, Any]:
        """``Algorithm.step`` checked by the NaN/exploding-update guard
        (``nonfinite_guard``; see :mod:`rllib_fast.core.guard`)."""
        with self.rng_stream:
            guard = UpdateGuard.from_config(self.config)
            snapshot = guard.snapshot(self)
            results = guard.check(self, super().step(), snapshot)
        # RLlib reports EnvRunner fault tolerance only with an EnvRunnerGroup; we
        # have none (num_env_runners=0), so the numbers are what RLlib reports then.
        results.setdefault(FAULT_TOLERANCE_STATS, {"num_healthy_workers": 0, "num_remote_worker_restarts": 0,
                                                   "num_env_runners_dropped_lifetime": 0})
        return results

    def restore_env_runners(self, env_runner_group) -> list:
        return []

    def get_module(self, module_id: str = DEFAULT_MODULE_ID):
        return self.module

    def policy_module(self, member: Optional[int] = None):
        """The greedy policy an exported file holds, as a module of its own
        (what ``export_policy`` traces): this algorithm's one policy. A population
        overrides it to pick a member (the best by default); ``member`` applies
        to those only (ValueError here)."""
        if member is not None:
            raise ValueError(f"member={member} applies to population algorithms only; {type(self).__name__} "
                             "has one policy")
        return self.get_module()

    def log_env_steps(self, n: int) -> None:
        """Count sampled env steps (standard keys, with throughput)."""
        self.metrics.log_value((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), n,
                               reduce="lifetime_sum", with_throughput=True)
        self.metrics.log_value((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED), n, reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, n, reduce="lifetime_sum")

    def log_learner(self, key: str, value, window: int = 1) -> None:
        """Log one learner statistic under RLlib's single-agent module id
        (``learners/default_policy/<key>``), where RLlib's own learners put theirs."""
        self.metrics.log_value((LEARNER_RESULTS, DEFAULT_MODULE_ID, key), value, window=window)

    def log_trained_steps(self, n: int) -> None:
        """Count env steps trained on (RLlib's three standard keys)."""
        self.metrics.log_value((LEARNER_RESULTS, ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME), n,
                               reduce="lifetime_sum")
        self.metrics.log_value((LEARNER_RESULTS, ALL_MODULES, NUM_ENV_STEPS_TRAINED), n, reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_TRAINED_LIFETIME, n, reduce="lifetime_sum")


    def export_policy(self, path, format: str = "onnx", member: Optional[int] = None) -> str:
        """The greedy policy (observation normalisation and action scaling included)
        as one ONNX or TorchScript file; see :mod:`rllib_fast.core.export`."""
        return export_policy(self, path, format=format, member=member)


    def reset_config(self, new_config: Mapping[str, Any]) -> bool:
        """Reuse this actor for another trial (Tune's ``reuse_actors``).

        The actor starts that trial exactly as a fresh actor built from
        ``new_config`` would: env, modules, optimizers, replay, counters and
        RNG streams are rebuilt. Tune restores the trial's checkpoint afterwards
        when it has one (PBT's exploit); a trial that has none (a new trial
        handed a cached actor) must not continue the previous trial's training,
        even when only live keys such as ``lr`` differ. What reuse saves is the
        process and its start-up (imports, Ray actor, compiled kernels), not
        the env build. Returns True: the actor is always reusable.
        """
        if isinstance(new_config, AlgorithmConfig):
            new_config = new_config.to_dict()
        cfg = self.get_default_config().update_from_dict(dict(new_config))
        cfg.validate()
        cfg.freeze()
        self.config = cfg
        self.evaluation_config = cfg.get_evaluation_config_object()
        self.evaluation_config.validate()
        self.evaluation_config.freeze()
        # A new trial counts from zero, like a fresh actor; the logger exists before the
        # rebuild so what build() logs (start-up decorrelation env steps) is counted.
        self.metrics = MetricsLogger(root=True, stats_cls_lookup=cfg.stats_cls_lookup)
        self._close_data_parallel()
        self.env.close()
        if self._eval_env is not None:
            self._eval_env.close()
        self._build_all()
        return True

    @classmethod
    def default_resource_request(cls, config):
        """One bundle for the main process; it asks for a GPU when the env and
        learner run on CUDA (``env_device='cuda...'`` or ``num_gpus_per_learner``)."""
        cfg = cls.get_default_config()
        cfg = cfg.update_from_dict(config if isinstance(config, dict) else config.to_dict())
        gpus = cfg.num_gpus_per_learner or (1 if str(cfg.env_device).startswith("cuda") else 0)
        # a fraction packs several trials per core (`resources: {cpu: 0.5}`); 0 is not a bundle
        main_cpus = cfg.num_cpus_for_main_process if (cfg.num_cpus_for_main_process or 0) > 0 else 1
        bundles = [{"CPU": main_cpus, "GPU": gpus}]
        if cfg.num_learners > 1:  # learners 1..L-1 are actors in the trial's placement group
            cpus = cfg.num_cpus_per_learner if isinstance(cfg.num_cpus_per_learner, (int, float)) else 1
            bundles += [{"CPU": cpus, "GPU": cfg.num_gpus_per_learner or 0}] * (cfg.num_learners - 1)
        return PlacementGroupFactory(bundles=bundles, strategy=cfg.placement_strategy)


    def _close_data_parallel(self) -> None:
        if self._dp_group is not None:
            self._dp_group.close()
            self._dp_group = None
        if self.dist is not None:
            self.dist.close()
            self.dist = None

    def cleanup(self) -> None:
        self._close_data_parallel()
        for env in (self.env, self._eval_env):
            if env is not None:
                env.close()
