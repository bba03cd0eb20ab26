"""Hyperparameters of the population algorithms (Flajolet et al., ICML 2022).

``PopulationConfig`` holds what every population shares: K members, the
envs each member acts on (the population env has ``K * num_envs_per_member``
envs; ``num_envs`` is derived), the replay topology, the fused update loop and
in-trial PBT. Each algorithm lists its *member hyperparameters*
(``MEMBER_HPARAMS``): the config value is every member's initial value (or
members are drawn from the mutation prior, ``pbt_init='sample'``), and inside
the algorithm each is a ``[K]`` tensor that PBT rewrites in place.
"""
from __future__ import annotations

from typing import Any, Dict

from ...core.algorithm import FastConfig
from ...core.nets import ACTIVATIONS, auto_hidden_sizes
from ...core.params import AUTO_OR_INT_LIST, Param, learning_starts_error, space_error, with_defaults
from . import mutations as M


def _mutation_spec_ok(value: Any) -> bool:
    try:
        M.normalize(value)
        return True
    except ValueError:
        return False


def _factors_ok(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(
        isinstance(v, (int, float)) and v > 0 for v in value)


def _schedule_ok(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, (int, float)) for x in p) for p in value)


LR = dict(low=0.0, low_open=True, live=True)


def _pbt_interval_ok(v: Any) -> bool:
    return v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)


class PopulationConfig(FastConfig):
    """Shared keys of PopTD3/PopSAC/PopDQN/CEMRL/DvD."""

    # member hyperparameter -> paper prior (Tune mutation format); subclasses fill it
    MEMBER_HPARAMS: Dict[str, Any] = {}
    # what pbt_interval='auto' means for this algorithm (None: it has no interval of its own, off)
    AUTO_PBT_INTERVAL = None

    HYPERPARAMETERS = {
        # num_envs is derived (population_size * num_envs_per_member); its default says so for help()
        **with_defaults(FastConfig, num_envs=4),
        "population_size": Param(4, "K: members trained together in this trial", (int,), low=1),
        "num_envs_per_member": Param(1, "envs each member acts on (num_envs = K * this, derived)", (int,), low=1),
        "shared_replay": Param(False, "one replay for all members (CEM-RL/DvD) instead of one per member (PBT)",
                               (bool,)),
        "buffer_size": Param(100_000, "replay capacity per member (shared: total = K * this)", (int,), low=1),
        "batch_size": Param(256, "transitions per member per update", (int,), low=1),
        "learning_starts": Param(1_000, "env steps per member with uniform-random actions before updates",
                                 (int,), low=0),
        "rollout_length": Param(50, "env steps per env between learning phases", (int,), low=1),
        "updates_per_step": Param(1.0, "update steps per member env step (paper: 1); fractions carried over",
                                  low=0.0, low_open=True),
        "fused_update_steps": Param(50, "update steps dispatched back to back without host sync "
                                    "(paper: 50 TD3/SAC, 10 DQN)", (int,), low=1),
        "compile": Param(False, "torch.compile the single update step (compile time reported separately) and "
                         "a built-in torch task's step", (bool,)),
        "compile_backend": Param("inductor", "torch.compile backend of the update step and of a built-in torch "
                                 "task's step", (str,),
                                 choices=("inductor", "aot_eager", "eager")),
        "hidden_sizes": Param("auto", "hidden sizes of every member's networks ('auto': the paper's [256, 256] "
                              "for obs_dim >= 16, else [128, 128])", (str, list, tuple), check=AUTO_OR_INT_LIST),
        "activation": Param("relu", "hidden activation", (str,), choices=tuple(ACTIVATIONS)),
        "layer_norm": Param(False, "LayerNorm after hidden layers (ACME-style)", (bool,)),
        "hyperparam_mutations": Param(None, "in-trial PBT mutation spec (Tune's hyperparam_mutations format; "
                                      "None: the paper's prior for this algorithm)", (dict,), optional=True,
                                      check=(_mutation_spec_ok, "a dict key -> list | tune Domain | callable | "
                                             "{loguniform|uniform|randint|choice: [...]}")),
        "pbt_interval": Param(None, "update steps per member between in-trial PBT rounds (paper: 100000; "
                              "None: off; 'auto': the algorithm's own interval when the population has "
                              "2+ members, else off)", (int, str), optional=True,
                              check=(_pbt_interval_ok, "None, 'auto' or a positive int")),
        "pbt_fraction": Param(0.3, "bottom fraction replaced by copies of the top fraction (at least one "
                              "member once the population has 2+)", low=0.0, high=0.5),
        "pbt_resample_probability": Param(1.0, "probability to resample from the prior instead of perturbing",
                                          low=0.0, high=1.0),
        "pbt_perturbation_factors": Param([1.2, 0.8], "perturbation factors (Tune's default)", (list, tuple),
                                          check=(_factors_ok, "a non-empty list of positive numbers")),
        "pbt_exploit_optimizer": Param("reset", "optimizer state of an exploited member", (str,),
                                       choices=("reset", "copy")),
        "pbt_copy_critic": Param(True, "exploit copies the critic (and its target) too, not only the policy",
                                 (bool,)),
        "pbt_init": Param("sample", "initial member hyperparameters: drawn from the mutation prior, or all "
                          "equal to the config values", (str,), choices=("sample", "config")),
        "fitness_window": Param(10, "fitness = mean of each member's last this-many episode returns", (int,),
                                low=1),
        "checkpoint_replay": Param(True, "store the replay in checkpoints (exact resume)", (bool,)),
    }

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class)
        self.num_envs = self.population_size * self.num_envs_per_member  # derived, as in validate()
        self.env = "Pendulum"

    def resolved_mutations(self) -> Dict[str, Any]:
        spec = self.hyperparam_mutations if self.hyperparam_mutations is not None else self.MEMBER_HPARAMS
        return M.normalize(spec)

    def resolved_pbt_interval(self):
        """In-trial PBT's interval in update steps per member, or None (off).
        ``'auto'`` is ``AUTO_PBT_INTERVAL`` (chosen per algorithm; None where an
        algorithm has none) when there is someone to replace, else off."""
        if self.pbt_interval != "auto":
            return self.pbt_interval
        return self.AUTO_PBT_INTERVAL if self.pbt_replaced() else None

    def pbt_replaced(self) -> int:
        """Members one PBT round replaces: floor(pbt_fraction * K), at least one
        once K >= 2 (a population of 2 or 3 would otherwise replace nobody at the
        default 0.3); 0 only for ``pbt_fraction`` 0 or a single member."""
        if self.pbt_fraction <= 0.0 or self.population_size < 2:
            return 0
        return max(1, int(self.pbt_fraction * self.population_size))

    def resolved_hidden(self, obs_dim: int) -> list:
        """The members' hidden sizes for an observation of ``obs_dim`` values."""
        return auto_hidden_sizes(self.hidden_sizes, obs_dim, large=(256, 256))

    def validate_algorithm(self) -> None:
        name = type(self).__name__
        try:
            object.__setattr__(self, "num_envs", self.population_size * self.num_envs_per_member)
        except Exception:  # noqa: BLE001 - frozen configs already carry the derived value
            pass
        bad = [k for k in (self.hyperparam_mutations or {}) if k not in self.MEMBER_HPARAMS]
        if bad:
            self._value_error(f"{name}: `hyperparam_mutations` key {bad[0]!r} is not a member hyperparameter; "
                              f"allowed: {', '.join(sorted(self.MEMBER_HPARAMS))}")
        spec = self.hyperparameter_spec()
        try:
            priors = self.resolved_mutations()
        except ValueError as e:
            self._value_error(f"{name}: `hyperparam_mutations`: {e}")
        for key, prior in priors.items():   # what in-trial PBT may give a member must be allowed for the key
            err = space_error(key, spec[key], prior) if key in spec and not callable(prior) else None
            if err:
                self._value_error(f"{name}: `hyperparam_mutations`: {err}")
        err = learning_starts_error(name, self.learning_starts, self.buffer_size, self.num_envs_per_member)
        if err:   # each member's share of the replay, written num_envs_per_member rows a step
            self._value_error(err)
        if isinstance(self.pbt_interval, int) and self.pbt_replaced() == 0:
            self._value_error(f"{name}: in-trial PBT (`pbt_interval`={self.pbt_interval}) replaces no member "
                              f"(pbt_fraction={self.pbt_fraction}, population_size={self.population_size}); "
                              "allowed: pbt_fraction > 0 and population_size >= 2, or pbt_interval=None "
                              "or 'auto'")


_TD3_PRIOR = {  # Flajolet et al. App. B.1 (TD3 PBT search space)
    "actor_lr": {"loguniform": [3e-5, 3e-3]},
    "critic_lr": {"loguniform": [3e-5, 3e-3]},
    "policy_delay": {"randint": [1, 6]},          # update frequency 1/delay in [0.2, 1]
    "exploration_noise": {"uniform": [0.0, 1.0]},
    "target_noise": {"uniform": [0.0, 1.0]},
    "noise_clip": {"uniform": [0.0, 1.0]},
    "gamma": {"uniform": [0.9, 1.0]},
}


class PopTD3Config(PopulationConfig):
    """K TD3 agents (Fujimoto et al. 2018) with per-member hyperparameters."""

    MEMBER_HPARAMS = {**_TD3_PRIOR, "tau": {"uniform": [0.001, 0.05]}, "reward_scale": {"loguniform": [0.1, 10.0]}}
    PAPER_PRIOR = _TD3_PRIOR

    HYPERPARAMETERS = {
        "actor_lr": Param(3e-4, "policy learning rate", **LR),
        "critic_lr": Param(3e-4, "critic learning rate", **LR),
        "tau": Param(0.005, "Polyak target step", low=0.0, high=1.0, live=True),
        "policy_delay": Param(2, "critic updates per policy/target update", low=1.0, live=True),
        "exploration_noise": Param(0.1, "Gaussian exploration std (fraction of the action range half-width)",
                                   low=0.0, live=True),
        "target_noise": Param(0.2, "target-policy smoothing std", low=0.0, live=True),
        "noise_clip": Param(0.5, "target-policy smoothing clip", low=0.0, live=True),
        "reward_scale": Param(1.0, "reward multiplier", low=0.0, low_open=True, live=True),
        "adam_eps": Param(1e-8, "Adam epsilon", low=0.0, low_open=True),
        "weight_decay": Param(0.0, "AdamW decoupled weight decay", low=0.0),
    }

    def __init__(self, algo_class=None):
        from .td3 import PopTD3

        super().__init__(algo_class=algo_class or PopTD3)

    def resolved_mutations(self) -> Dict[str, Any]:
        spec = self.hyperparam_mutations if self.hyperparam_mutations is not None else self.PAPER_PRIOR
        return M.normalize(spec)


class PopSACConfig(PopulationConfig):
    """K SAC agents (Haarnoja et al. 2018) with adaptive entropy per member."""

    MEMBER_HPARAMS = {  # Flajolet et al. App. B.1 (SAC PBT search space)
        "actor_lr": {"loguniform": [3e-5, 3e-3]},
        "critic_lr": {"loguniform": [3e-5, 3e-3]},
        "alpha_lr": {"loguniform": [3e-5, 3e-3]},
        "target_entropy_scale": {"uniform": [0.2, 2.0]},
        "reward_scale": {"uniform": [0.1, 10.0]},
        "gamma": {"uniform": [0.9, 1.0]},
        "tau": {"uniform": [0.001, 0.05]},
    }
    PAPER_KEYS = ("actor_lr", "critic_lr", "alpha_lr", "target_entropy_scale", "reward_scale", "gamma")

    HYPERPARAMETERS = {
        "actor_lr": Param(3e-4, "policy learning rate", **LR),
        "critic_lr": Param(3e-4, "critic learning rate", **LR),
        "alpha_lr": Param(3e-4, "entropy-temperature learning rate", **LR),
        "tau": Param(0.005, "Polyak target step", low=0.0, high=1.0, live=True),
        "target_entropy_scale": Param(1.0, "target entropy = scale * (-|A|)", low=0.0, live=True),
        "reward_scale": Param(1.0, "reward multiplier", low=0.0, low_open=True, live=True),
        "initial_alpha": Param(1.0, "initial entropy temperature", low=0.0, low_open=True),
        "adam_eps": Param(1e-8, "Adam epsilon", low=0.0, low_open=True),
    }

    def __init__(self, algo_class=None):
        from .sac import PopSAC

        super().__init__(algo_class=algo_class or PopSAC)

    def resolved_mutations(self) -> Dict[str, Any]:
        spec = self.hyperparam_mutations if self.hyperparam_mutations is not None else {
            k: self.MEMBER_HPARAMS[k] for k in self.PAPER_KEYS}
        return M.normalize(spec)


class PopDQNConfig(PopulationConfig):
    """K DQN agents (double Q, soft or periodic-free Polyak targets) with per-member lr, gamma, epsilon."""

    MEMBER_HPARAMS = {
        "lr": {"loguniform": [3e-5, 3e-3]},
        "gamma": {"uniform": [0.9, 1.0]},
        "epsilon_final": {"uniform": [0.0, 0.2]},
        "tau": {"loguniform": [1e-3, 1e-1]},
    }

    HYPERPARAMETERS = {
        "tau": Param(0.01, "Polyak target step per update", low=0.0, high=1.0, live=True),
        "epsilon_initial": Param(1.0, "epsilon at the start", low=0.0, high=1.0),
        "epsilon_final": Param(0.05, "epsilon after the schedule", low=0.0, high=1.0, live=True),
        "epsilon_timesteps": Param(10_000, "env steps per member to anneal epsilon", (int,), low=1),
        "huber_delta": Param(1.0, "Huber loss threshold", low=0.0, low_open=True),
        "adam_eps": Param(1e-8, "Adam epsilon", low=0.0, low_open=True),
        **with_defaults(PopulationConfig, lr=1e-3, fused_update_steps=10, hidden_sizes=[64, 64], batch_size=64,
                        pbt_interval="auto"),
    }
    # why 2,000 updates per member: docs/defaults.md (PopDQN; without in-trial PBT a seed whose
    # drawn members hold no good one does not recover)
    AUTO_PBT_INTERVAL = 2000

    def __init__(self, algo_class=None):
        from .dqn import PopDQN

        super().__init__(algo_class=algo_class or PopDQN)
        self.env = "CartPole"


class CEMRLConfig(PopTD3Config):
    """CEM-RL (Pourchot & Sigaud 2019) as vectorised by Flajolet et al. §5.2."""

    MEMBER_HPARAMS = dict(PopTD3Config.MEMBER_HPARAMS)
    HYPERPARAMETERS = {
        "cem_initial_std": Param(1e-2, "initial diagonal std of the parameter distribution (paper: 1e-2)",
                                 low=0.0, low_open=True),
        "cem_final_noise": Param(1e-5, "variance floor the extra noise decays to", low=0.0),
        "cem_noise_decay": Param(0.95, "per-generation decay of the extra variance noise", low=0.0, high=1.0),
        "cem_num_elites": Param(None, "elites updating mean/variance (None: half the population)", (int,),
                                low=1, optional=True),
        "cem_trained_fraction": Param(0.5, "fraction of the population trained with TD3 each generation",
                                      low=0.0, high=1.0),
        "cem_antithetic": Param(True, "mirrored sampling around the mean", (bool,)),
        "cem_grad_steps_per_env_step": Param(1.0, "TD3 update steps (critic + each trained actor) per env "
                                             "step of the previous generation, all members' episodes together "
                                             "(CEM-RL: 1)",
                                             low=0.0),
        "cem_max_episode_steps": Param(None, "cut evaluation episodes of a generation here (None: env limit)",
                                       (int,), low=1, optional=True),
        **with_defaults(PopTD3Config, population_size=10, num_envs=10, shared_replay=True, policy_delay=1,
                        pbt_init="config"),
    }

    def __init__(self, algo_class=None):
        from .cemrl import CEMRL

        super().__init__(algo_class=algo_class or CEMRL)

    def validate_algorithm(self) -> None:
        super().validate_algorithm()
        if not self.shared_replay:
            self._value_error(f"{type(self).__name__}: CEM-RL trains one shared critic; `shared_replay` = False "
                              "is not allowed; allowed: True")
        if self.pbt_interval is not None:
            self._value_error(f"{type(self).__name__}: `pbt_interval` is not used by CEM-RL (the CEM update "
                              "replaces PBT); allowed: None")
        if self.cem_num_elites is not None and self.cem_num_elites > self.population_size:
            self._value_error(f"{type(self).__name__}: `cem_num_elites` = {self.cem_num_elites} exceeds "
                              f"`population_size` = {self.population_size}; allowed: 1 .. population_size or None")


class DvDConfig(PopTD3Config):
    """DvD-TD3 (Parker-Holder et al. 2020) with a weight schedule (Flajolet et al. §5.3)."""

    MEMBER_HPARAMS = dict(PopTD3Config.MEMBER_HPARAMS)
    HYPERPARAMETERS = {
        "dvd_weight_schedule": Param([[0, 0.0], [50_000, 0.3], [300_000, 0.5], [700_000, 0.2]],
                                     "[[total env steps, diversity weight], ...]: weight from that step on",
                                     (list, tuple), check=(_schedule_ok, "a list of [step, weight] pairs")),
        "dvd_rbf_scale": Param(1.0, "RBF kernel scale: K_ij = exp(-|e_i - e_j|^2 / (2 scale))", low=0.0,
                               low_open=True),
        "dvd_embedding_batch": Param(20, "shared observations embedding each policy (its actions)", (int,),
                                     low=1),
        "dvd_jitter": Param(1e-4, "added to the kernel diagonal before log-det (stability)", low=0.0),
        **with_defaults(PopTD3Config, population_size=5, num_envs=5, shared_replay=True, pbt_init="config"),
    }

    def __init__(self, algo_class=None):
        from .dvd import DvD

        super().__init__(algo_class=algo_class or DvD)

    def validate_algorithm(self) -> None:
        super().validate_algorithm()
        if not self.shared_replay:
            self._value_error(f"{type(self).__name__}: DvD trains one shared critic; `shared_replay` = False "
                              "is not allowed; allowed: True")
