"""HTS-RL hyperparameters (Liu, Yeh & Schwing, NeurIPS 2020).

The HTS keys are declared once (``HTS_KEYS``, checked by :func:`validate_hts`)
and included in the PPO and A2C configs, so ``HTSPPOConfig`` accepts every
FastPPO key plus these (and ``HTSA2CConfig`` every FastA2C key plus these).

``sync_interval`` is the paper's alpha: executors and learner synchronise
every alpha env steps, and alpha is also the rollout length of one batch
(released code: ``sync_every`` = ``num_steps``), so a batch is
``num_envs * alpha`` transitions. Left at None it is ``rollout_length``
(or ``total_batch_size // num_envs``), so a FastPPO config carries over.
"""
from __future__ import annotations

from ...core.params import Param
from ...envs.base import env_share_error
from ..a2c.config import FastA2CConfig
from ..ppo.config import FastPPOConfig


#: keys shared by HTSPPO and HTSA2C
HTS_KEYS = {
    "sync_interval": Param(None, "alpha: env steps between batch synchronisations = rollout length per "
                           "batch (None: rollout_length); alpha = 1 is A2C's loop", (int,), low=1,
                           optional=True),
    "num_executors": Param(4, "executor threads; each steps its own env of num_envs / num_executors slots",
                           (int,), low=1),
    "num_actors": Param(1, "actor threads doing batched inference on the available observations "
                        "(<= num_executors); results do not depend on it", (int,), low=1),
    "actor_mode": Param("combining", "'dedicated': num_actors actor threads poll the state buffer (the "
                        "paper's roles); 'combining': a waiting executor thread takes one of num_actors actor "
                        "slots and serves every published observation (saves a thread hand-off per step)",
                        (str,), choices=("dedicated", "combining")),
    "deterministic_inference": Param(True, "actors forward the fixed-shape [num_envs] state buffer and keep "
                                     "the rows they serve (batch-composition-invariant numerics: bitwise "
                                     "identical for any num_actors); False gathers only the available rows",
                                     (bool,)),
    "executor_processes": Param(False, "step each executor's env in its own simulator process "
                                "(ParallelVecEnv, 1 worker; for CPU-stepped gym:/minatar:/atari: sources "
                                "given by name)", (bool,)),
    "value_targets": Param("behaviour", "critic whose state values enter GAE, the value targets and PPO's "
                           "value clipping: 'behaviour' = the snapshot that acted (the values actors record "
                           "at acting time, as in the released HTS-RL code); 'current' = the learner's "
                           "critic at update time", (str,), choices=("behaviour", "current")),
    "rounds_per_iteration": Param(1, "synchronisation rounds per training iteration (train() call)",
                                  (int,), low=1),
    "wait_timeout_s": Param(600.0, "raise if a round makes no progress for this long (a hung env)",
                            low=0.0, low_open=True),
    "required_time_target": Param(None, "paper's 'required time': report the training seconds until the "
                                  "mean of the latest 100 evaluation episodes first reaches this",
                                  optional=True),
    "final_time_limit_s": Param(None, "paper's 'final time' metric: the final metric restricted to "
                                "evaluations done within this many training seconds", low=0.0,
                                low_open=True, optional=True),
}


def validate_hts(cfg) -> None:
    """The HTS keys' checks that involve other keys (one-line errors)."""
    name = type(cfg).__name__
    split = env_share_error(cfg.num_envs, cfg.num_executors, "num_executors", name)
    if split is not None:
        cfg.reject(split)
    if cfg.num_actors > cfg.num_executors:
        cfg.reject(f"{name}: `num_actors` = {cfg.num_actors} exceeds `num_executors` = "
                   f"{cfg.num_executors}; allowed: 1..num_executors")
    if cfg.acting_threads != "auto":   # torch's thread count is the process's, and HTS learns while it acts
        cfg.reject(f"{name}: `acting_threads` = {cfg.acting_threads!r} is not applied by HTS-RL (its executors act "
                   "while the learner trains, in one process); allowed: 'auto'")
    if cfg.executor_processes and not isinstance(cfg.env, str):
        cfg.reject(f"{name}: `executor_processes` = True needs `env` given by name; allowed: a "
                   "registry name such as 'gym:CartPole-v1' or 'minatar:breakout'")


class HTSPPOConfig(FastPPOConfig):
    """HTS-RL with PPO: concurrent rollout and learning, two storages, batch
    synchronisation every ``sync_interval`` steps, policy lag exactly one.
    The update is FastPPO's (clipped surrogate with ratios against the stored
    behaviour log-probs: the paper's PPO form of the delayed gradient)."""

    # HTSPPO's defaults are FastPPO's (rsl_rl's recipe at 64 envs x 64 steps, adaptive-KL lr,
    # 5 epochs, value clip 0.2 on the behaviour snapshot's values): with the one-step policy lag
    # they still reach the built-in tasks' thresholds, where smaller settings did not
    # (docs/defaults.md).
    HYPERPARAMETERS = dict(HTS_KEYS)

    def __init__(self, algo_class=None):
        from .algorithm import HTSPPO

        super().__init__(algo_class=algo_class or HTSPPO)

    def resolved_horizon(self) -> int:
        return self.sync_interval if self.sync_interval is not None else super().resolved_horizon()

    def validate_algorithm(self) -> None:
        super().validate_algorithm()
        validate_hts(self)


class HTSA2CConfig(FastA2CConfig):
    """HTS-RL with A2C: the one-step-delayed gradient of Eq. 6 -- the A2C
    gradient taken at the behaviour snapshot theta_{j-1} on its own data and
    applied to the current theta_j. Defaults as FastA2C (16 envs, alpha = 5)."""

    HYPERPARAMETERS = dict(HTS_KEYS)

    def __init__(self, algo_class=None):
        from .algorithm import HTSA2C

        super().__init__(algo_class=algo_class or HTSA2C)

    def resolved_horizon(self) -> int:
        return self.sync_interval if self.sync_interval is not None else super().resolved_horizon()

    def validate_algorithm(self) -> None:
        super().validate_algorithm()
        validate_hts(self)
