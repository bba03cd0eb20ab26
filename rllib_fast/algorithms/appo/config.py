"""Hyperparameters of the asynchronous learners (Stooke & Abbeel §4.3, App. A).

``num_envs`` is the total over all learners, as for the synchronous
multi-learner: each of ``num_async_learners`` sampler-learners steps
``num_envs / num_async_learners`` envs of its own.
"""
from __future__ import annotations

from ...core.params import Param, real_pair, with_defaults
from ...envs.base import env_share_error
from ..a2c.config import FastA2CConfig
from ..ppo.config import FastPPOConfig


#: keys shared by FastAPPO and FastA3C
ASYNC_LEARNER_KEYS = {
    "num_async_learners": Param(8, "asynchronous sampler-learners (Ray actors), each with its own envs",
                                (int,), low=1),
    "sync_every": Param(4, "local multi-step-Adam updates between syncs with the central store "
                        "(paper: 1-4 for APPO)", (int,), low=1),
    "pull_every_sampling_steps": Param(64, "pull central parameters every this many batched env steps "
                                       "while sampling (None: only at syncs)", (int,), low=1, optional=True),
    "param_store_chunks": Param(4, "chunks (one lock each) of the central parameter store", (int,), low=1),
    "cycles_per_iteration": Param(1, "rollout+learn cycles each learner runs per Algorithm iteration; "
                                  "learners are asynchronous within an iteration, the iteration boundary "
                                  "is the only barrier (consistent checkpoints and reports)", (int,), low=1),
    "adam_betas": Param([0.9, 0.999], "Adam betas of the central multi-step Adam", (list, tuple),
                        check=(lambda v: real_pair(v) and all(0 <= b < 1 for b in v), "[b1, b2] in [0, 1)")),
    "adam_eps": Param(1e-5, "Adam epsilon (added to sqrt(v), as torch.optim.Adam)", low=0.0, low_open=True),
    "num_cpus_per_async_learner": Param(1.0, "CPUs each learner actor reserves (fractions allowed)",
                                        low=0.0),
    "num_gpus_per_async_learner": Param(0.0, "GPUs each learner actor reserves (fractions allowed)",
                                        low=0.0),
}


def validate_async(cfg) -> None:
    """The asynchronous-learner keys' checks that involve other keys (one-line errors)."""
    name = type(cfg).__name__
    split = env_share_error(cfg.num_envs, cfg.num_async_learners, "num_async_learners", name)
    if split is not None:
        cfg.reject(split)
    if cfg.num_learners > 1:
        cfg.reject(f"{name}: `num_learners` = {cfg.num_learners} (synchronous data-parallel "
                   "learners) is not supported here; allowed: 0 or 1 — use `num_async_learners`")
    if cfg.nonfinite_guard == "skip":
        # the learners have written their updates to the central store by the time the
        # driver sees the iteration's losses: rolling back the driver alone discards nothing
        cfg.reject(f"{name}: `nonfinite_guard` = 'skip' cannot discard an update asynchronous learners have "
                   "already applied to the central store; allowed: 'stop' (the last good checkpoint stays "
                   "intact) or 'off'")


class FastAPPOConfig(FastPPOConfig):
    """Stooke & Abbeel's asynchronous PPO (not RLlib's V-trace APPO): 8 PPO
    sampler-learners with 8 envs each, a central chunk-locked parameter store
    with the optimizer moments, multi-step Adam, gradient-norm clipping, the
    PPO learning rate divided by 4 and no learning-rate schedule, central
    parameters pulled every 64 sampling steps."""

    # The paper's PPO settings (lr/4, no lr schedule), not FastPPO's adaptive-KL defaults.
    HYPERPARAMETERS = {**ASYNC_LEARNER_KEYS,
                       **with_defaults(FastPPOConfig, num_envs=64, lr=3e-4 / 4, grad_clip=0.5, rollout_length=32,
                                       num_epochs=4, adaptive_lr_kl_target=None)}

    def __init__(self, algo_class=None):
        from .algorithm import FastAPPO

        super().__init__(algo_class=algo_class or FastAPPO)

    def validate_algorithm(self) -> None:
        super().validate_algorithm()
        validate_async(self)
        share = self.resolved_horizon() * self.num_envs // max(1, self.num_async_learners)
        if share < self.num_minibatches:   # each sampler-learner splits its own batch
            self._value_error(f"FastAPPOConfig: `num_minibatches` = {self.num_minibatches} exceeds each learner's "
                              f"batch rollout_length*num_envs/num_async_learners = {share} (num_async_learners = "
                              f"{self.num_async_learners}); allowed: num_minibatches <= {share}")
        if self.adaptive_lr_kl_target is not None:
            self._value_error("FastAPPOConfig: `adaptive_lr_kl_target` must be None (the paper removes the lr "
                              "schedule for APPO; per-learner lr adaptation would desynchronise the learners)")


class FastA3CConfig(FastA2CConfig):
    """Asynchronous A2C units (the paper's A3C): 16-env A2C sampler-learners
    writing to the central store after every update (``sync_every=1``).
    The central optimizer is Adam (the only rule with a multi-step form in
    App. A); its shared moments play the part of A3C's shared RMSProp
    statistics."""

    HYPERPARAMETERS = {**ASYNC_LEARNER_KEYS,
                       **with_defaults(ASYNC_LEARNER_KEYS, FastA2CConfig, num_async_learners=4, num_envs=64,
                                       sync_every=1, pull_every_sampling_steps=None, optimizer="adam",
                                       lr_rule="none")}

    def __init__(self, algo_class=None):
        from .algorithm import FastA3C

        super().__init__(algo_class=algo_class or FastA3C)

    def validate_algorithm(self) -> None:
        super().validate_algorithm()
        validate_async(self)
        if self.optimizer != "adam":
            self._value_error(f"FastA3CConfig: `optimizer` = {self.optimizer!r} is not supported for "
                              "asynchronous learners; allowed: 'adam' (central multi-step Adam)")
