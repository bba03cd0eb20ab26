"""FastDQN hyperparameters: every Rainbow component switches on or off."""
from __future__ import annotations

from ...core.algorithm import FastConfig
from ...core.compile import COMPILE
from ...core.nets import ACTIVATIONS
from ...core.params import POSITIVE_INT_LIST, Param, learning_starts_error, with_defaults
from .rules import RULES, apply_rule, resolve_rule


class FastDQNConfig(FastConfig):
    """Batched-inference DQN family (Stooke & Abbeel 2018; Hessel et al. 2018).

    One training step = ``rollout_length`` lock-step env steps (one batched
    forward for all N envs each), then ``training_intensity * N *
    rollout_length / batch_size`` gradient updates (fractions carried over), so
    the replay ratio stays constant when N or the batch size change.

    Defaults (``docs/defaults.md``): chosen to learn the built-in discrete
    tasks -- CartPole to 475 and Acrobot to -100 -- on one CPU core; the
    paper's Atari values (training intensity 8, hard target copies every 500
    updates, 1-step returns, [256, 256], lr 5e-4) learn them far more slowly.
    Settings for image tasks (MinAtar): ``tune_configs/sweep-rainbow-minatar.yaml``.
    """

    HYPERPARAMETERS = {
        **with_defaults(FastConfig, lr=1e-3, gamma=0.99, grad_clip=10.0, num_envs=16),
        "rollout_length": Param(4, "env steps per env between learning phases", (int,), low=1),
        "buffer_size": Param(100_000, "total replay capacity (split into N per-env segments)", (int,), low=1),
        "batch_size": Param(128, "transitions per gradient update", (int,), low=1),
        "training_intensity": Param(4.0, "samples consumed / samples generated (paper: DQN 8)", low=0.0,
                                    low_open=True, live=True),
        "learning_starts": Param(1_000, "transitions in the replay (all envs) before updates start", (int,), low=0),
        "target_update_period": Param(200, "gradient updates between hard target copies", (int,), low=1),
        "tau": Param(None, "Polyak target averaging per update instead of hard copies (None: hard)",
                     low=0.0, high=1.0, low_open=True, optional=True, live=True),
        "double_q": Param(True, "select next actions with the online net, evaluate with the target", (bool,)),
        "dueling": Param(False, "dueling value/advantage heads", (bool,)),
        "n_step": Param(3, "n-step returns (windows cut at episode ends)", (int,), low=1),
        "prioritized_replay": Param(False, "proportional prioritized replay (device sum-tree)", (bool,)),
        "per_alpha": Param(0.6, "PER priority exponent", low=0.0, high=1.0),
        "per_beta": Param(0.4, "PER importance-sampling exponent at the start", low=0.0, high=1.0),
        "per_beta_anneal_steps": Param(100_000, "env steps to anneal beta to 1", (int,), low=1),
        "per_eps": Param(1e-6, "added to |TD| priorities", low=0.0, low_open=True),
        "num_atoms": Param(1, "1: scalar Q; >1: categorical (C51) with this many atoms", (int,), low=1),
        "v_min": Param(-10.0, "C51 support minimum"),
        "v_max": Param(10.0, "C51 support maximum"),
        "noisy": Param(False, "factorised-Gaussian noisy layers for exploration", (bool,)),
        "noisy_sigma0": Param(0.5, "noisy layers' initial sigma0", low=0.0, low_open=True),
        "noise_per_env": Param(True, "noisy nets: every env acts under its own noise draw (False: one draw shared "
                               "by all envs per step)", (bool,)),
        "exploration": Param("schedule", "epsilon-greedy: one linear schedule, or a fixed Ape-X spread per env "
                             "('none' with noisy nets)", (str,), choices=("schedule", "per_env", "none")),
        "epsilon_initial": Param(1.0, "schedule start", low=0.0, high=1.0, live=True),
        "epsilon_final": Param(0.02, "schedule end", low=0.0, high=1.0, live=True),
        "epsilon_timesteps": Param(10_000, "env steps (all envs) to anneal epsilon", (int,), low=1, live=True),
        "apex_epsilon": Param(0.4, "per-env spread: eps_i = apex_epsilon ** (1 + apex_alpha * i / (N - 1))",
                              low=0.0, high=1.0),
        "apex_alpha": Param(7.0, "per-env spread exponent", low=0.0),
        "evaluation_epsilon": Param(0.0, "epsilon of evaluation episodes", low=0.0, high=1.0, live=True),
        "huber_delta": Param(1.0, "Huber loss threshold (scalar Q)", low=0.0, low_open=True),
        "batch_rule": Param("none", "large-batch lr/Adam-eps rule of the paper ('auto' picks by components)",
                            (str,), choices=RULES),
        "adam_eps": Param(None, "Adam epsilon (None: 1e-8 unless batch_rule sets it)", low=0.0, low_open=True,
                          optional=True),
        "trunk": Param("auto", "observation encoder", (str,), choices=("auto", "mlp", "nature_cnn", "minatar_cnn")),
        "hidden_sizes": Param([128, 128], "hidden sizes (MLP trunk or head)", (list, tuple), check=POSITIVE_INT_LIST),
        "activation": Param("relu", "hidden activation", (str,), choices=tuple(ACTIVATIONS)),
        "checkpoint_replay": Param(False, "store the replay buffer in checkpoints (exact resume)", (bool,)),
        "compile": COMPILE,
    }

    def __init__(self, algo_class=None):
        from .algorithm import FastDQN

        super().__init__(algo_class=algo_class or FastDQN)
        self.min_sample_timesteps_per_iteration = 1_000  # RLlib's key, not one of ours

    def batch_rule_lr_eps(self) -> tuple:
        """(lr, Adam eps) under the large-batch rule (``batch_rule``); an explicit ``adam_eps`` wins."""
        rule = resolve_rule(self.batch_rule, self.num_atoms, self.noisy, self.prioritized_replay)
        return apply_rule(rule, self.batch_size, self.lr, self.adam_eps)

    def configured_lr(self) -> float:
        """``lr`` under the large-batch rule (``batch_rule``)."""
        return self.batch_rule_lr_eps()[0]

    def validate_algorithm(self) -> None:
        name = type(self).__name__
        if self.num_atoms > 1 and not self.v_min < self.v_max:
            self._value_error(f"{name}: C51 needs `v_min` < `v_max`; got v_min={self.v_min}, v_max={self.v_max}")
        if self.num_atoms == 2:
            self._value_error(f"{name}: `num_atoms` = 2 is not allowed; allowed: 1 (scalar Q) or >= 3 (C51)")
        if self.noisy and self.exploration != "none" and self.epsilon_final > 0.1:
            self._value_error(f"{name}: noisy nets explore by themselves; set `exploration`='none' or a small "
                              f"`epsilon_final` (got {self.epsilon_final})")
        image_source = isinstance(self.env, str) and self.env.split(":")[0] in ("minatar", "atari")
        if image_source and self.trunk == "mlp":
            self._value_error(f"{name}: `trunk` = 'mlp' cannot encode image observations of {self.env!r}; "
                              "allowed: 'auto', 'nature_cnn', 'minatar_cnn'")
        if self.buffer_size < self.num_envs * self.n_step:
            self._value_error(f"{name}: `buffer_size` = {self.buffer_size} is too small for num_envs*n_step = "
                              f"{self.num_envs * self.n_step}; allowed: >= {self.num_envs * self.n_step}")
        envs = max(1, self.num_envs // max(1, int(self.num_learners or 0)))   # one replay per learner
        err = learning_starts_error(name, self.learning_starts, self.buffer_size, envs)
        if err:
            self._value_error(err)


class RainbowConfig(FastDQNConfig):
    """Rainbow (Hessel et al.): double, dueling, prioritized, 3-step, C51 and noisy nets."""

    # lr 5e-4 with soft target updates (tau 0.01) and a 50k-step PER beta schedule learn
    # the built-in tasks (docs/defaults.md); C51 support [-100, 100] covers their
    # discounted returns (CartPole <= 100, Acrobot >= -100) and Atari's clipped ones
    # (the paper's [-10, 10] leaves CartPole's and Acrobot's returns off the support).
    HYPERPARAMETERS = with_defaults(FastDQNConfig, double_q=True, dueling=True, prioritized_replay=True, noisy=True,
                                    n_step=3, num_atoms=51, exploration="none", epsilon_final=0.0, lr=5e-4,
                                    tau=0.01, v_min=-100.0, v_max=100.0, per_beta_anneal_steps=50_000)

    def __init__(self, algo_class=None):
        from .algorithm import Rainbow

        super().__init__(algo_class=algo_class or Rainbow)


class EpsRainbowConfig(FastDQNConfig):
    """Stooke & Abbeel's epsilon-Rainbow: Rainbow without noisy nets, epsilon-greedy
    instead, Adam epsilon 0.005 / batch (``batch_rule='eps_rainbow'``)."""

    HYPERPARAMETERS = with_defaults(FastDQNConfig, double_q=True, dueling=True, prioritized_replay=True, n_step=3,
                                    num_atoms=51, batch_rule="eps_rainbow", lr=5e-4, tau=0.01, v_min=-100.0,
                                    v_max=100.0, per_beta_anneal_steps=50_000, epsilon_timesteps=20_000)

    def __init__(self, algo_class=None):
        from .algorithm import EpsRainbow

        super().__init__(algo_class=algo_class or EpsRainbow)
