"""FastConfig: the base config of every rllib_fast algorithm (split out of
``core/algorithm.py``, which re-exports it): declared hyperparameters as
top-level attributes (``Param`` specs, merged along the class hierarchy),
RLlib's builder methods accepting them, and validation that names a bad key
or value in one line (including what the algorithm needs of its env's spaces)."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.tune.registry import ENV_CREATOR, _global_registry

from ..envs import registry as env_registry
from ..envs.base import env_share_error
from ..envs.probe import action_space_error, probe_spaces, states_error
from .devices import DeviceUnavailableError, unavailable_device_error
from .params import Param, apply_defaults, unknown_key_message


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
            spec.update(vars(klass).get("HYPERPARAMETERS", {}))
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
        the new-stack branches; with ``api_stack(False, False)`` it takes the old
        stack's branches, which a FastAlgorithm does not feed (FastPPO's first
        ``train()`` then does not come back in any useful time)."""
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
    def configured_lr(self) -> float:
        """The learning rate this config prescribes: ``lr``; a config whose
        algorithm scales it with the batch (FastA2C's ``lr_rule``, FastDQN's
        ``batch_rule``) overrides this. The algorithm reads it through
        ``FastAlgorithm.configured_lr``."""
        return self.lr

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
