"""FastConfig / FastAlgorithm: every RLlib and Tune obligation, written once.

A FastAlgorithm owns a tensor vector env and its torch modules directly; it
builds no EnvRunnerGroup and no LearnerGroup (RLlib's per-env Python episode
machinery caps at ~20k env-steps/s on a 2-core CPU; docs/architecture.md).
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
import math
from typing import Any, Dict, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.env_context import EnvContext
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.debug.deterministic import update_global_seed_if_necessary
from ray.rllib.utils.metrics import (ALL_MODULES, ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN, EPISODE_RETURN_MEAN,
                                     FAULT_TOLERANCE_STATS, LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED,
                                     NUM_ENV_STEPS_SAMPLED_LIFETIME, NUM_ENV_STEPS_TRAINED,
                                     NUM_ENV_STEPS_TRAINED_LIFETIME, NUM_EPISODES)
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.registry import ENV_CREATOR, _global_registry

from ..envs import registry as env_registry
from ..envs.base import TensorVecEnv, env_share, env_share_error, validate_env
from ..envs.probe import action_space_error, probe_spaces, states_error
from .devices import DeviceUnavailableError, unavailable_device_error
from .guard import UpdateGuard
from .metrics import EpisodeTracker
from .params import Param, apply_defaults, unknown_key_message
from .seeding import EVALUATION, derive_seed
from .rng import RngStream
from .state import load_optimizer_state

logger = logging.getLogger(__name__)


def _device_ok(value: Any) -> bool:
    if value == "auto":
        return True
    try:
        torch.device(value)
        return True
    except (RuntimeError, TypeError):
        return False


#: the check of every device key ('auto' or what torch.device accepts)
DEVICE_CHECK = (_device_ok, "'auto' or a torch device string such as 'cpu', 'cuda:0'")


class FastConfig(AlgorithmConfig):
    """Base config of every rllib_fast algorithm.

    Hyperparameters are declared in ``HYPERPARAMETERS`` (merged along the class
    hierarchy) and become top-level attributes, so Tune/PBT/Optuna can search
    and mutate them by name. ``training(**kw)`` accepts any declared key.
    """

    HYPERPARAMETERS: Dict[str, Param] = {
        "num_envs": Param(64, "number of parallel envs in the tensor vector env", (int,), low=1),
        "env_device": Param("auto", "torch device of env, storage and learner; 'auto' = cuda if available",
                            (str,), check=DEVICE_CHECK),
        "lr": Param(3e-4, "learning rate", low=0.0, low_open=True, live=True),
        "gamma": Param(0.99, "discount factor", low=0.0, high=1.0, live=True),
        "grad_clip": Param(None, "global gradient-norm clip (None: off)", low=0.0, low_open=True,
                           optional=True, live=True),
        "validate_env_on_setup": Param(True, "check the env against the contract once at setup", (bool,)),
        "evaluation_max_path_length": Param(None, "evaluation: cut an episode after this many steps (counted as "
                                            "finished; None: the env's own limit)", (int,), low=1, optional=True),
        "evaluation_max_env_steps": Param(None, "evaluation: stop after this many steps per eval env even if "
                                          "episodes are unfinished (None: no cap)", (int,), low=1, optional=True),
        # NaN/exploding-update guard (core/guard.py), checked once per iteration
        "nonfinite_guard": Param("stop", "on a NaN/inf or exploding loss/value/parameter: 'stop' the trial "
                                 "(last good checkpoint intact), 'skip' the bad update, or 'off'", (str,),
                                 choices=("stop", "skip", "off")),
        "nonfinite_guard_max_abs": Param(1e10, "nonfinite_guard: a loss/value metric above this magnitude "
                                         "counts as exploding (None: only NaN/inf)", low=0.0, low_open=True,
                                         optional=True),
    }
    # Attributes a config may carry that a fresh instance lacks (set by RLlib/Tune).
    _TOLERATED_EXTRA_KEYS = frozenset({"class", "__trial_info__", "_enable_new_api_stack", "checkpoint_trainable_policies_only"})

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class)
        apply_defaults(self, self.hyperparameter_spec())
        self.num_env_runners = 0
        self.framework_str = "torch"
        # greedy evaluation by default; `evaluation(evaluation_config={"explore": True})` changes it
        self.evaluation_config = {"explore": False}
        # Tune's per-trainable system monitor (perf/cpu_util_percent, perf/ram_util_percent, GPU
        # load with GPUtil) is off by default: without GPUtil every algorithm logged "Install gputil
        # for GPU system monitoring." at build. `config.debugging(log_sys_usage=True)` turns it on.
        self.log_sys_usage = False

    # -- spec helpers ---------------------------------------------------------
    @classmethod
    def hyperparameter_spec(cls) -> Dict[str, Param]:
        spec: Dict[str, Param] = {}
        for klass in reversed(cls.__mro__):
            spec.update(getattr(klass, "HYPERPARAMETERS", {}) if "HYPERPARAMETERS" in vars(klass) else {})
        return spec

    @classmethod
    def help(cls) -> str:
        """A table of this algorithm's own hyperparameters."""
        rows = [f"{k:28s} default={p.default!r:<14} {p.allowed():38s} {p.doc}"
                for k, p in sorted(cls.hyperparameter_spec().items())]
        return "\n".join(rows)

    def hyperparameters(self) -> Dict[str, Any]:
        """Current values of the declared hyperparameters (what MLflow records)."""
        out = {k: getattr(self, k) for k in self.hyperparameter_spec()}
        out.update(env=self.env if isinstance(self.env, str) else getattr(self.env, "__name__", str(self.env)),
                   seed=self.seed)
        return out

    def get_state(self) -> Dict[str, Any]:
        """RLlib's state minus nothing of ours: ``AlgorithmConfig.get_state``
        drops every attribute equal to -1 (its DEPRECATED_VALUE marker), so
        ``lr=-1`` would silently become the default in ``build_algo()`` and in
        remote learners. Declared hyperparameters are kept, whatever their
        value, and ``validate()`` rejects what is out of range."""
        state = super().get_state()
        for key in self.hyperparameter_spec():
            if key not in state and key in vars(self):
                state[key] = getattr(self, key)
        return state

    # -- builder methods -----------------------------------------------------
    def training(self, **kwargs) -> "FastConfig":
        spec = self.hyperparameter_spec()
        ours = {k: v for k, v in kwargs.items() if k in spec}
        rest = {k: v for k, v in kwargs.items() if k not in spec}
        for k, v in ours.items():
            if v is not NotProvided:
                setattr(self, k, v)
        if rest:
            try:
                super().training(**rest)
            except TypeError as err:
                bad = next(iter(rest))
                for k in rest:
                    if k in str(err):
                        bad = k
                owner = _builder_accepting(self, bad)
                if owner:  # a real RLlib key, just not a training() one
                    raise ValueError(f"{type(self).__name__}: `{bad}` is not a training() key; set it with "
                                     f"config.{owner}({bad}=...)") from None
                raise ValueError(unknown_key_message(type(self).__name__, bad,
                                                     set(spec) | set(vars(self)))) from None
        return self

    def evaluation(self, **kwargs) -> "FastConfig":
        """RLlib's ``evaluation()`` plus our declared ``evaluation_*`` keys
        (``update_from_dict`` routes every ``evaluation_*`` key here)."""
        spec = self.hyperparameter_spec()
        for k in [k for k in kwargs if k in spec]:
            value = kwargs.pop(k)
            if value is not NotProvided:
                setattr(self, k, value)
        super().evaluation(**kwargs)
        return self

    def environment(self, env=NotProvided, *, num_envs=NotProvided, env_device=NotProvided, **kwargs):
        super().environment(env, **kwargs)
        if num_envs is not NotProvided:
            self.num_envs = num_envs
        if env_device is not NotProvided:
            self.env_device = env_device
        return self

    # -- validation -----------------------------------------------------------
    def validate(self) -> None:
        name = type(self).__name__
        known = set(vars(type(self)()))
        for key in vars(self):
            if key not in known and key not in self._TOLERATED_EXTRA_KEYS and not (
                    key.startswith("__") and key.endswith("__")):  # Tune's own (__stdout_file__, ...)
                self._value_error(unknown_key_message(name, key, set(self.hyperparameter_spec()) | known))
        # Our keys first: RLlib's own checks misread some bad values (lr="0.001" is
        # reported as a malformed lr schedule).
        for key, p in self.hyperparameter_spec().items():
            msg = p.error(key, getattr(self, key))
            if msg:
                self._value_error(f"{name}: {msg}")
        super().validate()
        self._validate_env_spec()
        if self.num_learners > 1:
            if not getattr(self.algo_class, "SUPPORTS_DATA_PARALLEL", False):
                self._value_error(f"{name}: `num_learners` = {self.num_learners} is not supported by "
                                  f"{getattr(self.algo_class, '__name__', self.algo_class)}; allowed: 0 or 1 "
                                  "(data-parallel learners: FastPPO, FastA2C)")
            split = env_share_error(self.num_envs, self.num_learners, "num_learners", name)
            if split is not None:
                self._value_error(split)
        if self.evaluation_duration_unit != "episodes" and self.evaluation_interval:
            self._value_error(f"{name}: `evaluation_duration_unit` = {self.evaluation_duration_unit!r} "
                              "is not supported; allowed: 'episodes'")
        self.validate_algorithm()
        self._validate_against_env()

    def _validate_new_api_stack_settings(self) -> None:
        """RLlib's checks of its new-API-stack machinery, which a FastAlgorithm does not run.

        Overrides ``AlgorithmConfig``'s: those checks concern RLlib's EnvRunners,
        connectors, Learners and RLModule catalogs (a FastAlgorithm builds none of
        them: see the module docstring), and the first of them logged "You are running
        FastPPO on the new API stack! ..." at every build -- about RLlib, not about
        the user's config. What stays checked is the stack switch itself: RLlib's
        ``Algorithm`` code that we do run (train loop, results, checkpoints) follows
        the new-stack branches; with ``api_stack(False, False)`` FastPPO's first
        ``train()`` did not return within 4 minutes (CartPole, 16 envs)."""
        if not (self.enable_rl_module_and_learner and self.enable_env_runner_and_connector_v2):
            self._value_error(f"{type(self).__name__}: `api_stack` = (enable_rl_module_and_learner="
                              f"{self.enable_rl_module_and_learner}, enable_env_runner_and_connector_v2="
                              f"{self.enable_env_runner_and_connector_v2}); allowed: both True (the default: "
                              "rllib_fast algorithms run on RLlib's new API stack's Algorithm code)")

    def _validate_against_env(self) -> None:
        """What the algorithm needs of its env's spaces (its ``ACTION_SPACE``, critic
        states for ``asymmetric_critic=True``), checked here when the spaces are
        cheap to know (``envs.probe``); otherwise the build checks the same."""
        algo = self.algo_class
        required = getattr(algo, "ACTION_SPACE", None)
        asymmetric = getattr(self, "asymmetric_critic", None)
        if required is None and asymmetric is not True:
            return
        spaces = probe_spaces(self.env, self.env_config)
        if spaces is None:
            return
        owner = getattr(algo, "__name__", type(self).__name__)
        for err in (action_space_error(owner, required, spaces.action, self.env) if required else None,
                    states_error(type(self).__name__, asymmetric, spaces.state, self.env)):
            if err:
                self._value_error(err)

    def reject(self, message: str) -> None:
        """Fail validation with one line naming the key and the allowed values
        (RLlib's config error, so ``experimental(_validate_config=False)`` still
        turns it into a warning). For validators outside the config class."""
        self._value_error(message)

    def validate_algorithm(self) -> None:
        """Cross-key checks of a subclass; call ``self._value_error(msg)``."""

    def _validate_env_spec(self) -> None:
        env = self.env
        if env is None or callable(env):
            return
        if isinstance(env, str):
            if env_registry.is_known(env) or _global_registry.contains(ENV_CREATOR, env):
                return
            msg = env_registry.unknown_env_message(env)
            if ":" not in env and "-v" in env:
                msg += f" (a gymnasium id is written 'gym:{env}')"
            self._value_error(f"{type(self).__name__}: `env` {msg}")
        self._value_error(f"{type(self).__name__}: `env` = {env!r} has type {type(env).__name__}; "
                          "allowed: an env name (str) or a callable returning a TensorVecEnv")

    # -- devices: the form at validation, availability at build --------------------
    def local_device_keys(self) -> Dict[str, Any]:
        """The device keys the process that builds the algorithm uses itself
        (checked there by :meth:`check_devices_here`); subclasses add theirs."""
        return {"env_device": self.env_device}

    def check_devices_here(self) -> None:
        """Raise one line naming the key when a device key names a device this
        machine lacks. Called at build, not in ``validate()``: a CPU driver may
        validate a config meant for GPU workers (see core/devices.py)."""
        for key, value in self.local_device_keys().items():
            err = unavailable_device_error(type(self).__name__, key, value)
            if err:
                raise DeviceUnavailableError(err)

    # -- derived --------------------------------------------------------------
    def resolved_device(self) -> torch.device:
        if self.env_device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.env_device)


_BUILDERS = ("environment", "env_runners", "learners", "reporting", "evaluation", "debugging", "resources",
             "framework", "checkpointing", "fault_tolerance", "callbacks", "rl_module", "api_stack", "multi_agent")


def _builder_accepting(config: AlgorithmConfig, key: str) -> Optional[str]:
    """The AlgorithmConfig builder method that takes ``key`` (for errors)."""
    import inspect

    for name in _BUILDERS:
        method = getattr(config, name, None)
        if method is not None and key in inspect.signature(method).parameters:
            return name
    return None


class CheckpointMismatchError(ValueError):
    """A checkpoint written by another algorithm or setup (num_envs, network
    sizes, ...) than the one restoring it."""

    def __init__(self, detail: str):
        super().__init__(detail if detail.startswith("checkpoint ") else f"checkpoint state {detail}")
        self.detail = detail


class CheckpointReadError(ValueError):
    """A checkpoint whose state file cannot be read (truncated, corrupted, missing)."""


def _to_cpu(tree: Any) -> Any:
    """Deep-copy a state tree with every tensor moved to the CPU (so a GPU
    checkpoint loads on a CPU machine)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_cpu(v) for v in tree)
    return tree


class FastAlgorithm(Algorithm):
    """RLlib ``Algorithm`` whose hot path is a tensor vector env on one device."""

    # Whether `num_learners > 1` (synchronous data-parallel learners) is implemented.
    SUPPORTS_DATA_PARALLEL = False
    #: the action spaces the algorithm acts in: None (any), or one of
    #: ``envs.probe.ACTION_SPACE_KINDS`` ('discrete', 'continuous', 'bounded continuous')
    ACTION_SPACE: Optional[str] = None
    # Config keys a checkpoint must match before anything is loaded (they shape the env
    # state and storages; a mismatch found later would leave a half-restored algorithm).
    LAYOUT_KEYS: tuple = ("num_envs",)

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
        self.tracker = EpisodeTracker(local_envs, self.device, cfg.metrics_num_episodes_for_smoothing)
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

    def stateful_components(self) -> Dict[str, Any]:
        """name -> object with state_dict/load_state_dict, saved in checkpoints."""
        return {"tracker": self.tracker}

    def extra_state(self) -> Dict[str, Any]:
        """Loose tensors/values to checkpoint: the current observation and, when
        the critic reads states, the states that go with it."""
        out = {"obs": self.obs}
        if self.states is not None:
            out["states"] = self.states
        return out

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        self.obs = state["obs"].to(self.device)
        if self.states is not None and state.get("states") is not None:
            self.states = state["states"].to(self.device)

    # -- restoring with a source that cannot restore its own state ---------------------
    # Gymnasium, envpool, Isaac and mjlab sources return no state: after a restore the
    # env keeps running the episodes it runs now (fresh ones after a build), not the
    # checkpoint's. What belongs to those episodes -- the current observation (and
    # critic states), the tracker's running returns -- is therefore kept from the live
    # algorithm, and every episode the checkpoint had in flight ends at the checkpoint.
    def _live_episodes(self) -> Dict[str, Any]:
        states = self.states
        return {"obs": self.obs.clone(), "states": None if states is None else states.clone(),
                "tracker": self.tracker.in_flight()}

    def _keep_live_episodes(self, live: Dict[str, Any]) -> None:
        self.obs.copy_(live["obs"])    # in place: some algorithms share the buffer with workers
        if live["states"] is not None and self.states is not None:
            self.states.copy_(live["states"])
        self.tracker.set_in_flight(live["tracker"])

    def pool_over_learners(self, reduce) -> None:
        """Data-parallel learners joining their group: pool what each gathered
        alone while it was built (``reduce``: in-place sum over learners)."""

    def on_source_not_restored(self) -> None:
        """After a restore whose source kept its own episodes: end the episodes
        the checkpoint had in flight (algorithms with a replay or n-step windows
        cut them, as truncations at the checkpoint's observation)."""

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
        """The learning rate the config prescribes. Reads ``self.config``,
        the trial's config (``num_envs`` is the total over learners)."""
        return self.config.lr

    def set_lr(self, lr: float) -> None:
        """Put ``lr`` in effect (every optimizer of :meth:`optimizers`)."""
        for opt in self.optimizers():
            for group in opt.param_groups:
                group["lr"] = lr

    def _apply_configured_lr(self) -> None:
        """Apply :meth:`configured_lr` if it differs from the value last
        applied (or restored with a checkpoint); otherwise keep the lr in effect."""
        lr = self.configured_lr()
        if lr != getattr(self, "_applied_lr", None):
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
        return getattr(self, "module", None)

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

    def get_state(self, components=None, *, not_components=None, **kwargs) -> Dict[str, Any]:
        env_state = self.env.get_state() if hasattr(self.env, "get_state") else None
        return {
            "components": {k: _to_cpu(v.state_dict()) for k, v in self.stateful_components().items()},
            "extra": _to_cpu(self.extra_state()),
            "env": _to_cpu(env_state),
            "rng": self.rng_stream.state_dict(),
            "metrics_logger": self.metrics.get_state(),
            "training_iteration": self.training_iteration,
            "seed": self.seed,
            "setup": self._setup(),
            # the configured lr this state was trained under (the lr in effect is in the optimizers' state)
            "applied_lr": getattr(self, "_applied_lr", None),
            "remote_learners": self._dp_group.get_states() if self._dp_group is not None else None,
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        self._state_received = True  # restore_from_path: the file was read
        setup = state.get("setup") if isinstance(state, dict) else None
        # A different algorithm or env count fails late and obscurely (a tensor size
        # mismatch steps later), so these are checked before anything is loaded.
        detail = self._setup_mismatch(setup, keys=self.LAYOUT_KEYS)
        if detail is not None:
            raise CheckpointMismatchError(detail)
        source_restores = state.get("env") is not None and hasattr(self.env, "set_state")
        live = None if source_restores else self._live_episodes()
        try:
            for k, v in self.stateful_components().items():
                if isinstance(v, torch.optim.Optimizer):   # moments from the checkpoint, settings from the config
                    load_optimizer_state(v, state["components"][k])
                else:
                    v.load_state_dict(state["components"][k])
            self.set_extra_state(state["extra"])
        except Exception as err:
            detail = self._setup_mismatch(setup)  # e.g. other hidden_sizes: name the keys, not the tensors
            if detail is not None:
                raise CheckpointMismatchError(detail) from err
            raise
        if source_restores:
            self.env.set_state(state["env"])
        else:
            self._keep_live_episodes(live)
            self.on_source_not_restored()
        self.rng_stream.load_state_dict(state["rng"])
        self.metrics.set_state(state["metrics_logger"])
        self._iteration = state["training_iteration"]
        if state.get("seed") is not None and int(state["seed"]) != self.seed:
            # the run's seed goes on with it: evaluation seeds its episodes from it (with
            # `seed=None` every build draws a new one, and a restored run evaluated others;
            # evaluate() reseeds its env from it at every call, so the env itself stays)
            self.seed = int(state["seed"])
        if state.get("remote_learners") and self._dp_group is not None:
            self._dp_group.set_states(state["remote_learners"])
        # Keep the restored lr in effect unless this config prescribes another lr than the
        # one the checkpoint was trained under (PBT mutated it); old checkpoints: the config's.
        self._applied_lr = state.get("applied_lr")
        self.apply_live_hyperparameters()

    def guarded_components(self) -> Dict[str, Any]:
        """The components ``nonfinite_guard='skip'`` snapshots and rolls back
        after a bad iteration (its modules and optimizers are copied): all
        stateful components unless an algorithm keeps some out."""
        return self.stateful_components()

    def get_checkpointable_components(self) -> list:
        return []

    def save_to_path(self, path=None, *, state=None, filesystem=None, use_msgpack=False) -> str:
        """Checkpointable's save, plus the policy as an RLModule checkpoint where RLlib
        puts one (``learner_group/learner/rl_module/default_policy``), so
        ``RLModule.from_checkpoint`` and ``rllib-fast export`` need no algorithm."""
        from ..export import save_policy_module

        path = super().save_to_path(path, state=state, filesystem=filesystem, use_msgpack=use_msgpack)
        save_policy_module(self, path, filesystem=filesystem, use_msgpack=use_msgpack)
        return path

    def export_policy(self, path, format: str = "onnx", member: Optional[int] = None) -> str:
        """The greedy policy (observation normalisation and action scaling included)
        as one ONNX or TorchScript file; see :mod:`rllib_fast.export`."""
        from ..export import export_policy

        return export_policy(self, path, format=format, member=member)

    def _setup(self) -> Dict[str, Any]:
        """What a checkpoint must match to be restored here: the algorithm, the
        env name and the keys that are not live (they shape envs, modules, storage)."""
        cfg = self.config
        keys = {k: getattr(cfg, k) for k, p in cfg.hyperparameter_spec().items() if not p.live}
        if isinstance(cfg.env, str):
            keys["env"] = cfg.env
        return {"algorithm": type(self).__name__, "config": keys}

    def _setup_mismatch(self, saved: Optional[Dict[str, Any]], keys=None) -> Optional[str]:
        """'was written by X with k=v; this algorithm has k=w' for the first
        differences among ``keys`` (all saved keys if None), or None."""
        if not saved:
            return None  # a checkpoint from before setups were recorded
        mine = self._setup()
        if saved["algorithm"] != mine["algorithm"]:
            return f"was written by {saved['algorithm']}; this algorithm is {mine['algorithm']}"
        theirs, ours = saved["config"], mine["config"]
        diff = [k for k in (keys or sorted(theirs)) if k in theirs and k in ours and theirs[k] != ours[k]]
        if not diff:
            return None
        return (f"was written by {saved['algorithm']} with " + ", ".join(f"{k}={theirs[k]!r}" for k in diff)
                + "; this algorithm has " + ", ".join(f"{k}={ours[k]!r}" for k in diff))

    def restore_from_path(self, path, *args, **kwargs):
        """Checkpointable's restore (Algorithm's version touches env_runner_group),
        with one-line errors for an unreadable checkpoint and for one written by
        another setup."""
        self._state_received = False
        try:
            Checkpointable.restore_from_path(self, path, *args, **kwargs)
        except CheckpointMismatchError as err:
            raise CheckpointMismatchError(f"checkpoint {path} {err.detail}") from None
        except Exception as err:
            if self._state_received:
                raise
            reason = (str(err).strip().splitlines() or [""])[0]
            raise CheckpointReadError(f"checkpoint {path} cannot be read ({type(err).__name__}: {reason}); "
                                      "it is incomplete or corrupted") from err

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

    # -- evaluation -------------------------------------------------------------
    def evaluate(self, parallel_train_future=None) -> Dict[str, Any]:
        """Evaluate (see :meth:`_evaluate_episodes`), drawing from the algorithm's own stream."""
        with self.rng_stream:
            return self._evaluate_episodes()

    @torch.no_grad()
    def _evaluate_episodes(self) -> Dict[str, Any]:
        """Run one episode in each of ``evaluation_duration`` fresh envs.

        Stooke & Abbeel's protocol maps onto: ``evaluation_interval`` (every K
        iterations), ``evaluation_max_env_steps`` (up to M steps),
        ``evaluation_max_path_length`` (maximum path length), greedy actions or
        a small epsilon (DQN's ``evaluation_epsilon``). Results are reported
        under ``evaluation/env_runners``.
        Evaluation is greedy unless the evaluation config sets ``explore``; its
        env is built from the evaluation config (``env``, ``env_config``).
        It syncs with the host every 50 steps to check completion (this is not
        the training hot path)."""
        n = max(1, int(self.evaluation_config.evaluation_duration
                       if self.evaluation_config.evaluation_duration != "auto" else 10))
        if self._eval_env is None or self._eval_env.num_envs != n:
            # one plain env (not an algorithm's own layout, e.g. HTS's executor parts) built from
            # the evaluation config, so `evaluation_config={"env_config": ...}` takes effect
            self._eval_env = FastAlgorithm.make_env(self, n, derive_seed(self.seed, EVALUATION),
                                                    config=self.evaluation_config)
        env = self._eval_env
        obs = env.reset(seed=derive_seed(self.seed, EVALUATION, self.training_iteration))
        ret = torch.zeros(n, dtype=torch.float64, device=self.device)
        length = torch.zeros(n, dtype=torch.int64, device=self.device)
        final_ret = torch.zeros_like(ret)
        final_len = torch.zeros_like(length)
        finished = torch.zeros(n, dtype=torch.bool, device=self.device)
        cfg = self.config
        path_limit = cfg.evaluation_max_path_length or env.max_episode_steps or 100_000
        limit = min(path_limit, cfg.evaluation_max_env_steps or path_limit)
        explore = bool(getattr(self.evaluation_config, "explore", False))
        for t in range(limit):
            step = env.step(self.compute_actions(obs, explore=explore))
            valid = step.valid if step.valid is not None else torch.ones_like(finished)
            active = ~finished & valid
            ret += torch.where(active, step.reward.double(), torch.zeros_like(ret))
            length += active.long()
            ended = (step.done | (length >= path_limit)) & active
            final_ret = torch.where(ended, ret, final_ret)
            final_len = torch.where(ended, length, final_len)
            finished |= ended
            obs = step.obs
            if t % 50 == 49:
                done = int(finished.sum())
                if self.evaluation_progress is not None:
                    self.evaluation_progress(done, n)
                if done == n:
                    break
        if self.evaluation_progress is not None:
            self.evaluation_progress(int(finished.sum()), n)
        return {ENV_RUNNER_RESULTS: {
            EPISODE_RETURN_MEAN: float(final_ret[finished].mean()) if finished.any() else math.nan,
            EPISODE_LEN_MEAN: float(final_len[finished].double().mean()) if finished.any() else math.nan,
            NUM_EPISODES: int(finished.sum()),
        }}

    def _close_data_parallel(self) -> None:
        if getattr(self, "_dp_group", None) is not None:
            self._dp_group.close()
            self._dp_group = None
        if getattr(self, "dist", None) is not None:
            self.dist.close()
            self.dist = None

    def cleanup(self) -> None:
        self._close_data_parallel()
        for env in (getattr(self, "env", None), getattr(self, "_eval_env", None)):
            if env is not None:
                env.close()
