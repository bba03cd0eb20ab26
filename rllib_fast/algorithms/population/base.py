"""PopulationAlgorithm: K members in one trial, acting on slices of one env.

Top to bottom, one ``training_step``:

1. **act**: the population env has ``K * n`` envs; member m acts on envs
   ``m*n .. m*n+n-1`` with one stacked forward for all members (observations
   viewed as ``[K, n, ...]``), exploration noise from the member's own stream;
2. **store**: one lock-step write into the replay (per-member columns);
3. **learn**: ``updates_per_step * n * rollout_length`` update steps per member,
   dispatched in chunks of ``fused_update_steps`` with no host sync inside;
4. **PBT** (every ``pbt_interval`` update steps): the algorithm's
   :class:`~.pbt.InTrialPBT` component (``self.pbt``): truncation
   selection on the fitness (mean of each member's last 10 returns), exploit
   (``exploit_members``: copy member slices in place), explore (Tune's rule on
   the ``[K]`` hyperparameter tensors, ``self.hp``);
5. **report**: the component's ``population/member_i/...`` for every member and
   ``env_runners/episode_return_mean`` = the best member's fitness, so Tune
   stoppers and schedulers work unchanged. This is the one host sync per
   iteration.

This class is the replay-based population loop (act, store, fused updates);
PBT is the component it holds (PopPPO holds the same one around FastPPO's
on-policy parts). Subclasses write the networks and the update
(``build_learner``, ``policy_actions``, ``update_step``, ``exploit_members``,
``learner_components``).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from ...core.algorithm import FastAlgorithm
from ...core.metrics import EpisodeTracker
from ...core.stacked import FusedSteps
from .pbt import InTrialPBT
from .rng import MemberRNG


class PopulationAlgorithm(FastAlgorithm):
    # -- construction ----------------------------------------------------------------------
    def build(self) -> None:
        cfg, env = self.config, self.env
        self.K, self.n = cfg.population_size, cfg.num_envs_per_member
        self.hidden_sizes = tuple(cfg.resolved_hidden(int(np.prod(env.obs_shape))))  # 'auto' resolved once
        if env.num_envs != self.K * self.n:
            raise ValueError(f"{type(self).__name__}: env has {env.num_envs} envs; expected population_size * "
                             f"num_envs_per_member = {self.K * self.n}")
        self.tracker = EpisodeTracker(env.num_envs, self.device, cfg.metrics_num_episodes_for_smoothing,
                                      source=env)
        self.pbt = InTrialPBT(cfg, self.K, self.n, self.device, self.seed, cfg.MEMBER_HPARAMS,
                                exploit=self.exploit_members,
                                hyperparameters_changed=self.optimizer_hparams,
                                sample_initial=cfg.pbt_init == "sample")
        #: the member hyperparameters (``[K]`` tensors the update reads) and fitness: the PBT component's
        self.hp, self.returns = self.pbt.hp, self.pbt.returns
        self.rng = MemberRNG.from_seed(self.seed, self.K, self.device)   # the members' noise streams
        self.env_steps = 0          # total env steps (all members): host count of our own calls
        self.num_updates = 0        # update steps per member
        self.update_credit = 0.0
        self.build_learner()
        self._fused = FusedSteps(self.update_step, compile=cfg.compile, backend=cfg.compile_backend)

    @property
    def member_env_steps(self) -> int:
        """Env steps taken by each member (= per-env steps * n)."""
        return self.env_steps // self.K

    # -- hooks -------------------------------------------------------------------------------
    def build_learner(self) -> None:
        raise NotImplementedError("abstract: PopulationAlgorithm.build_learner")

    def policy_actions(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """``[K, n, ...]`` observations -> ``[K, n, ...]`` env actions."""
        raise NotImplementedError("abstract: PopulationAlgorithm.policy_actions")

    def random_actions(self) -> torch.Tensor:
        """``[K, n, ...]`` uniform-random env actions from the members' streams (warm-up)."""
        space = self.env.single_action_space
        if self.env.is_discrete:
            return self.rng.randint(int(space.n), self.n)
        low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        return low + (high - low) * self.rng.uniform(self.n, *space.shape)

    def update_step(self) -> None:
        """One update of every member (sample, losses, optimizer steps, targets)."""
        raise NotImplementedError("abstract: PopulationAlgorithm.update_step")

    def exploit_members(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy member slices ``src -> dst`` (networks, targets, optimizer state per config)."""
        raise NotImplementedError("abstract: PopulationAlgorithm.exploit_members")

    def learner_components(self) -> Dict[str, Any]:
        return {}

    def optimizer_hparams(self) -> None:
        """Point optimizer lr tensors at the current member hyperparameters (after PBT/restore)."""

    # -- RLlib obligations -----------------------------------------------------------------------
    def stateful_components(self) -> Dict[str, Any]:
        out = {**super().stateful_components(), **self.pbt.stateful_components(), "rng": self.rng,
               **self.learner_components()}
        if self.config.checkpoint_replay:
            out["replay"] = self.replay
        return out

    def extra_state(self) -> Dict[str, Any]:
        return {**super().extra_state(), **self.pbt.extra_state(), "env_steps": self.env_steps,
                "num_updates": self.num_updates, "update_credit": self.update_credit}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.pbt.set_extra_state(state)
        for k in ("env_steps", "num_updates", "update_credit"):
            setattr(self, k, state[k])
        if not self.config.checkpoint_replay:
            self.replay.clear()   # saved without its replay: restored, it holds none (as FastDQN)

    def on_source_not_restored(self) -> None:
        self.replay.cut_episodes()

    # members' fitness comes from `self.returns`: its running returns belong to the live episodes too
    def _live_episodes(self) -> Dict[str, Any]:
        return {**super()._live_episodes(), **self.pbt.live_episodes()}

    def _keep_live_episodes(self, live: Dict[str, Any]) -> None:
        super()._keep_live_episodes(live)
        self.pbt.keep_live_episodes(live)

    def apply_live_hyperparameters(self) -> None:
        """Trial-level config values that changed go to every member (``pbt.apply_config``)."""
        self.pbt.apply_config(self.config)

    def get_module(self, module_id: str = DEFAULT_MODULE_ID, member: Optional[int] = None):
        """One member's greedy policy as an RLModule: the best member by fitness
        (what ``compute_actions`` uses; CEM-RL: its mean policy), or ``member``."""
        from .module import population_policy_module

        return population_policy_module(self, member)

    def policy_module(self, member: Optional[int] = None):
        """One member's greedy policy as a module of its own (what export writes):
        the best by fitness (CEM-RL: its mean policy), or ``member``."""
        return self.get_module(member=member).select()

    def best_member(self) -> int:
        return self.pbt.best_member()

    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """Actions of the best member (by fitness) for a batch of observations."""
        with torch.no_grad():
            best = self.pbt.best_member()
            x = obs.unsqueeze(0).expand(self.K, *obs.shape)
            return self.policy_actions(x, explore)[best]

    # -- one iteration ---------------------------------------------------------------------------
    def training_step(self) -> None:
        cfg = self.config
        with self.metrics.log_time(("timers", "rollout")):
            self._rollout(cfg.rollout_length)
        self.log_env_steps(cfg.rollout_length * self.env.num_envs)
        n_updates = 0
        # gated on what each member's replay holds, not on env steps: a run restored without
        # its replay (`checkpoint_replay=False`) refills before it learns again
        if self.replay.buf.steps_stored * self.n >= cfg.learning_starts:
            self.update_credit += cfg.updates_per_step * self.n * cfg.rollout_length
            n_updates = int(self.update_credit)
            self.update_credit -= n_updates
            with self.metrics.log_time(("timers", "learn")):
                self.run_updates(n_updates)
        if self.pbt.due(self.num_updates):
            self.pbt.round(self.num_updates)
        self._report(n_updates)

    @torch.no_grad()
    def _rollout(self, steps: int) -> None:
        env, K, n = self.env, self.K, self.n
        for _ in range(steps):
            if self.member_env_steps < self.config.learning_starts:
                action = self.random_actions()
            else:
                action = self.policy_actions(self.obs.view(K, n, *self.obs.shape[1:]), True)
            action = action.reshape(K * n, *action.shape[2:])
            step = env.step(action)
            done = step.terminated | step.truncated
            self.replay.add(self.obs, self.to_replay_action(action), step.reward, step.terminated, done,
                            step.final_obs, step.valid)
            self.returns.update(step.reward, done, step.valid)
            self.obs = step.obs
            self.env_steps += env.num_envs

    def trained_env_steps(self, n_updates: int) -> int:
        """Transitions ``n_updates`` update steps trained on (all members)."""
        return n_updates * self.config.batch_size * self.K

    def to_replay_action(self, action: torch.Tensor) -> torch.Tensor:
        return action

    def run_updates(self, n_updates: int) -> None:
        """``n_updates`` update steps of every member, in fused chunks."""
        chunk = self.config.fused_update_steps
        done = 0
        while done < n_updates:
            k = min(chunk, n_updates - done)
            self._fused(k)
            done += k
        self.num_updates += n_updates

    # -- reporting ------------------------------------------------------------------------------------------
    def _report(self, n_updates: int) -> None:
        self.pbt.report(self.metrics, self.num_updates, getattr(getattr(self, "_fused", None), "compile_time_s", 0.0))
        self.tracker.log_source_metrics(self.metrics)   # the source's own (e.g. envpool's reward terms)
        self.log_trained_steps(self.trained_env_steps(n_updates))
        self.log_learner("num_updates_lifetime", self.num_updates)
