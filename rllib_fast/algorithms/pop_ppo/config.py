"""PopPPO hyperparameters: FastPPO's keys plus the population's.

Every FastPPO key keeps its meaning for each member (``num_envs`` is derived:
``population_size * num_envs_per_member``; ``rollout_length`` and the
minibatching are per member). The in-trial PBT keys are the populations'
own declarations (``population/config.py``), imported, not copied.
``MEMBER_HPARAMS`` are the keys each member holds as a ``[K]`` tensor, with
the prior that ``pbt_init='sample'`` draws from and PBT explores.
"""
from __future__ import annotations

from typing import Any, Dict

from ...core.params import Param, space_error, with_defaults
from ..population.config import PopulationConfig
from ..ppo.config import FastPPOConfig

#: the population keys PopPPO shares with PopTD3/PopSAC/PopDQN (declared there)
_POPULATION_KEYS = ("population_size", "num_envs_per_member", "hyperparam_mutations", "pbt_fraction",
                    "pbt_resample_probability", "pbt_perturbation_factors", "pbt_init", "fitness_window")


def _pbt_interval_ok(v: Any) -> bool:
    return v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)


#: FastPPO keys (rsl_rl's behaviours, docs/sources.md) PopPPO accepts only at their default
POP_UNSUPPORTED = {"init": "orthogonal", "adaptive_lr_every": "epoch", "kl_estimator": "k3", "std_param": "log",
                   "clip_actions": True, "normalize_advantages_over": "minibatch", "grad_clip_scope": "global",
                   "shuffle": "epoch", "adam_eps": 1e-5, "kl_reference": "auto", "surrogate_clip": "hard",
                   "shared_trunk": False, "bounds_loss_coeff": 0.0,
                   "critic_hidden_sizes": None, "update_dtype": "float32"}


class PopPPOConfig(FastPPOConfig):
    """K PPO agents sharing one batched simulator, with in-trial PBT.

    Member hyperparameters (``[K]`` tensors): ``lr`` (the start of each
    member's adaptive-KL lr), ``clip_param``, ``entropy_coeff``,
    ``vf_loss_coeff``, ``lambda_``, ``gamma``, ``adaptive_lr_kl_target``.
    """

    # the prior PBT explores (and `pbt_init='sample'` draws the members from): around the
    # PPO recipes used on control tasks (rsl_rl, Isaac Lab, rl_games: lr 1e-3 with a KL
    # target of 0.01, clip 0.2, gamma 0.99, lambda 0.95), each default inside its range and
    # narrow enough that no member starts far from a working recipe (docs/population.md)
    MEMBER_HPARAMS: Dict[str, Any] = {
        "lr": {"loguniform": [3e-4, 3e-3]},
        "clip_param": {"uniform": [0.1, 0.3]},
        "entropy_coeff": {"uniform": [0.0, 0.005]},
        "vf_loss_coeff": {"uniform": [0.5, 1.0]},
        "lambda_": {"uniform": [0.9, 0.98]},
        "gamma": {"uniform": [0.97, 0.995]},
        "adaptive_lr_kl_target": {"loguniform": [0.005, 0.02]},
    }
    #: what pbt_interval='auto' means (iterations between PBT rounds): the interval the
    #: recorded runs use (docs/population.md)
    AUTO_PBT_INTERVAL = 8

    HYPERPARAMETERS = {
        **{k: PopulationConfig.HYPERPARAMETERS[k] for k in _POPULATION_KEYS},
        **with_defaults(FastPPOConfig, num_envs=256),   # derived: population_size * num_envs_per_member
        # Tune's default: mostly perturb (x1.2 / x0.8) what worked, resample a quarter of the time
        **with_defaults(PopulationConfig, pbt_resample_probability=0.25),
        "num_envs_per_member": Param(64, "envs each member acts on (num_envs = K * this, derived)", (int,), low=1),
        "pbt_interval": Param("auto", "training iterations between in-trial PBT rounds (None: off; 'auto': "
                              f"{AUTO_PBT_INTERVAL} when the population has 2+ members, else off)", (int, str),
                              optional=True, check=(_pbt_interval_ok, "None, 'auto' or a positive int")),
        "pbt_exploit_optimizer": Param("copy", "optimizer state of an exploited member: the donor's Adam "
                                       "moments and adaptive lr ('copy', as Tune's checkpoint exploit) or "
                                       "fresh ('reset')", (str,), choices=("reset", "copy")),
    }

    def __init__(self, algo_class=None):
        from .algorithm import PopPPO

        super().__init__(algo_class=algo_class or PopPPO)
        self.num_envs = self.population_size * self.num_envs_per_member

    # PBT helpers shared with the other populations (same rules, same code)
    resolved_pbt_interval = PopulationConfig.resolved_pbt_interval
    pbt_replaced = PopulationConfig.pbt_replaced

    def member_hparams(self) -> Dict[str, Any]:
        """The member hyperparameters of this config (the adaptive-KL target
        only when the adaptive lr is on)."""
        return {k: v for k, v in self.MEMBER_HPARAMS.items()
                if k != "adaptive_lr_kl_target" or self.adaptive_lr_kl_target is not None}

    def resolved_mutations(self) -> Dict[str, Any]:
        from ..population import mutations as M

        spec = self.hyperparam_mutations if self.hyperparam_mutations is not None else self.member_hparams()
        return M.normalize(spec)

    def resolved_horizon(self) -> int:
        """Env steps per env per iteration; ``total_batch_size`` is per member."""
        if self.total_batch_size is not None:
            return max(1, self.total_batch_size // self.num_envs_per_member)
        return self.rollout_length

    def validate_algorithm(self) -> None:
        self.validate_extensions()   # FastPPO's symmetry: per member (PopPPO.EXTENSIONS); rnd: FastPPO's only
        name = type(self).__name__
        try:
            object.__setattr__(self, "num_envs", self.population_size * self.num_envs_per_member)
        except Exception:  # noqa: BLE001 - frozen configs already carry the derived value
            pass
        for key, only in POP_UNSUPPORTED.items():   # FastPPO's rsl_rl options its stacked update lacks
            if getattr(self, key) != only:
                self._value_error(f"{name}: `{key}` = {getattr(self, key)!r} is not implemented by PopPPO's "
                                  f"stacked networks and update; allowed: {only!r}")
        if self.rnn_type is not None:   # recurrent members: minibatches are sets of each member's envs
            for key, value, allowed in (("compile", self.compile, False), ("symmetry", self.symmetry, None)):
                if value not in (allowed, None):
                    self._value_error(f"{name}: `{key}` = {value!r} does not combine with `rnn_type` = "
                                      f"{self.rnn_type!r}; allowed: {allowed}")
            if self.num_minibatches > self.num_envs_per_member:
                self._value_error(f"{name}: `num_minibatches` = {self.num_minibatches} exceeds "
                                  f"`num_envs_per_member` = {self.num_envs_per_member} (with rnn_type a minibatch "
                                  f"is a set of each member's envs' whole sequences); allowed: "
                                  f"<= {self.num_envs_per_member}")
        batch = self.resolved_horizon() * self.num_envs_per_member
        if batch < self.num_minibatches:
            self._value_error(f"{name}: `num_minibatches` = {self.num_minibatches} exceeds each member's batch "
                              f"rollout_length*num_envs_per_member = {batch}; allowed: <= {batch}")
        allowed = self.member_hparams()
        bad = [k for k in (self.hyperparam_mutations or {}) if k not in allowed]
        if bad:
            why = (" (adaptive_lr_kl_target is None: the adaptive lr is off)"
                   if bad[0] == "adaptive_lr_kl_target" else "")
            self._value_error(f"{name}: `hyperparam_mutations` key {bad[0]!r} is not a member hyperparameter"
                              f"{why}; allowed: {', '.join(sorted(allowed))}")
        spec = self.hyperparameter_spec()
        try:
            priors = self.resolved_mutations()
        except ValueError as e:
            self._value_error(f"{name}: `hyperparam_mutations`: {e}")
        for key, prior in priors.items():
            err = space_error(key, spec[key], prior) if key in spec and not callable(prior) else None
            if err:
                self._value_error(f"{name}: `hyperparam_mutations`: {err}")
        if isinstance(self.pbt_interval, int) and self.pbt_replaced() == 0:
            self._value_error(f"{name}: in-trial PBT (`pbt_interval`={self.pbt_interval}) replaces no member "
                              f"(pbt_fraction={self.pbt_fraction}, population_size={self.population_size}); "
                              "allowed: pbt_fraction > 0 and population_size >= 2, or pbt_interval=None "
                              "or 'auto'")
        if self.num_learners > 1:
            self._value_error(f"{name}: `num_learners` = {self.num_learners}; allowed: 0 or 1 (the population "
                              "is one learner)")


class PopA2CConfig(PopPPOConfig):
    """K A2C agents: PopPPO's code with one full-batch gradient step per
    iteration and no ratio clipping (``num_epochs=1, num_minibatches=1``,
    the surrogate at ratio 1 is the policy gradient)."""

    HYPERPARAMETERS = {
        **with_defaults(PopPPOConfig, num_envs=64, num_epochs=1, num_minibatches=1, rollout_length=8, lr=7e-4,
                        adaptive_lr_kl_target=None, vf_clip_param=None, num_envs_per_member=16),
    }

    def __init__(self, algo_class=None):
        from .algorithm import PopA2C

        super().__init__(algo_class=algo_class or PopA2C)
