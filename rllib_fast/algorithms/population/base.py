"""PopulationAlgorithm: K members in one trial, acting on slices of one env.

Top to bottom, one ``training_step``:

1. **act**: the population env has ``K * n`` envs; member m acts on envs
   ``m*n .. m*n+n-1`` with one stacked forward for all members (observations
   viewed as ``[K, n, ...]``), exploration noise from the member's own stream;
2. **store**: one lock-step write into the replay (per-member columns);
3. **learn**: ``updates_per_step * n * rollout_length`` update steps per member,
   dispatched in chunks of ``fused_update_steps`` with no host sync inside;
4. **PBT** (every ``pbt_interval`` update steps): truncation selection on the
   fitness (mean of each member's last 10 returns), exploit (copy member
   slices in place), explore (Tune's rule on the ``[K]`` hyperparameter tensors);
5. **report**: ``population/member_i/...`` for every member and
   ``env_runners/episode_return_mean`` = the best member's fitness, so Tune
   stoppers and schedulers work unchanged. This is the one host sync per
   iteration.

Subclasses write the networks and the update (``build_learner``,
``policy_actions``, ``update_step``, ``exploit_members``, ``learner_components``).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN, EPISODE_RETURN_MAX, EPISODE_RETURN_MEAN,
                                     EPISODE_RETURN_MIN, NUM_EPISODES, NUM_EPISODES_LIFETIME)

from ...core.algorithm import FastAlgorithm
from ...core.metrics import EpisodeTracker
from ...core.seeding import PBT_HOST, derive_seed
from ...core.stacked import FusedSteps
from ...core.state import StateAdapter
from . import mutations as M
from .rng import MemberRNG
from .tracking import MemberReturns


class HyperparameterTensors:
    """Member hyperparameters as ``[K]`` float tensors (checkpointed together).

    ``applied`` remembers the trial-level config values last pushed into all
    members, so a Tune PBT mutation of the trial config (a changed scalar) is
    applied to every member while unchanged keys keep their per-member values.
    """

    def __init__(self, names, K: int, device):
        self.names = list(names)
        self.t: Dict[str, torch.Tensor] = {k: torch.zeros(K, device=device) for k in self.names}
        self.applied: Dict[str, float] = {}

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.t[key]

    def values(self, m: int) -> Dict[str, float]:
        return {k: float(v[m]) for k, v in self.t.items()}

    def state_dict(self):
        return {"t": {k: v.cpu().clone() for k, v in self.t.items()}, "applied": dict(self.applied)}

    def load_state_dict(self, state) -> None:
        for k, v in state["t"].items():
            self.t[k].copy_(v)
        self.applied = dict(state["applied"])


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
        self.returns = MemberReturns(self.K, self.n, self.device, cfg.fitness_window)
        self.rng = MemberRNG.from_seed(self.seed, self.K, self.device)
        self.host_rng = np.random.default_rng(derive_seed(self.seed, PBT_HOST))  # host-side PBT draws
        self.mutations = cfg.resolved_mutations()
        self.hp = HyperparameterTensors(cfg.MEMBER_HPARAMS, self.K, self.device)
        for k in self.hp.names:
            self.hp[k].fill_(float(getattr(cfg, k)))
            self.hp.applied[k] = getattr(cfg, k)
        if cfg.pbt_init == "sample":
            for k, dist in self.mutations.items():
                for m in range(self.K):
                    self.hp[k][m] = float(M.sample(dist, self.host_rng))
        self.env_steps = 0          # total env steps (all members): host count of our own calls
        self.num_updates = 0        # update steps per member
        self.update_credit = 0.0
        self.last_pbt = 0
        self.pbt_interval = cfg.resolved_pbt_interval()   # None: in-trial PBT off
        self.pbt_rounds = 0
        self.last_pbt_info: Dict[str, Any] = {}
        self.episodes_logged = 0
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
        out = {**super().stateful_components(), "returns": self.returns, "rng": self.rng,
               "host_rng": StateAdapter.numpy_generator(self.host_rng), "hp": self.hp,
               **self.learner_components()}
        if self.config.checkpoint_replay:
            out["replay"] = self.replay
        return out

    def extra_state(self) -> Dict[str, Any]:
        return {**super().extra_state(), "env_steps": self.env_steps, "num_updates": self.num_updates,
                "update_credit": self.update_credit, "last_pbt": self.last_pbt, "pbt_rounds": self.pbt_rounds,
                "episodes_logged": self.episodes_logged}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        for k in ("env_steps", "num_updates", "update_credit", "last_pbt", "pbt_rounds", "episodes_logged"):
            setattr(self, k, state[k])
        if not self.config.checkpoint_replay:
            self.replay.clear()   # saved without its replay: restored, it holds none (as FastDQN)

    def on_source_not_restored(self) -> None:
        self.replay.cut_episodes()

    # members' fitness comes from `self.returns`: its running returns belong to the live episodes too
    def _live_episodes(self) -> Dict[str, Any]:
        return {**super()._live_episodes(), "member_returns": self.returns.in_flight()}

    def _keep_live_episodes(self, live: Dict[str, Any]) -> None:
        super()._keep_live_episodes(live)
        self.returns.set_in_flight(live["member_returns"])

    def apply_live_hyperparameters(self) -> None:
        """Trial-level config values that changed since last applied (Tune PBT
        across trials mutated them) go to every member; others keep per-member values."""
        cfg = self.config
        for k in self.hp.names:
            value = getattr(cfg, k)
            if self.hp.applied.get(k) != value:
                self.hp[k].fill_(float(value))
                self.hp.applied[k] = value
        self.optimizer_hparams()

    def get_module(self, module_id: str = DEFAULT_MODULE_ID, member: Optional[int] = None):
        """One member's greedy policy as an RLModule: the best member by fitness
        (what ``compute_actions`` uses; CEM-RL: its mean policy), or ``member``."""
        from .module import population_policy_module

        return population_policy_module(self, member)

    def best_member(self) -> int:
        fit = self.returns.fitness()
        fit = torch.nan_to_num(fit, nan=-math.inf)
        return int(fit.argmax())

    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """Actions of the best member (by fitness) for a batch of observations."""
        with torch.no_grad():
            best = self.best_member()
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
                self.learn(n_updates)
        pbt_info = None
        if self.pbt_interval is not None and self.num_updates - self.last_pbt >= self.pbt_interval:
            pbt_info = self.pbt_round()
        self._report(n_updates, pbt_info)

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

    def learn(self, n_updates: int) -> None:
        chunk = self.config.fused_update_steps
        done = 0
        while done < n_updates:
            k = min(chunk, n_updates - done)
            self._fused(k)
            done += k
        self.num_updates += n_updates

    # -- in-trial PBT ---------------------------------------------------------------------------------
    def select(self, fitness: np.ndarray):
        """Truncation selection: (bottom members, their donors from the top)."""
        cfg, g = self.config, self.host_rng
        q = cfg.pbt_replaced()
        fit = np.where(np.isnan(fitness), -np.inf, fitness)
        order = np.argsort(fit, kind="stable")          # ascending
        bottom, top = order[:q], order[::-1][:q]
        donors = top[g.integers(0, len(top), size=q)] if q else top[:0]
        return bottom, donors

    def pbt_round(self) -> Dict[str, Any]:
        """Exploit (copy the donors' slices) and explore (new hyperparameters) once."""
        cfg = self.config
        fitness = self.returns.fitness().cpu().numpy()
        if np.isnan(fitness).any():
            # A member without a finished episode (since the start or its last exploit) has
            # no fitness; ranking it last would replace it again before it could show
            # anything, and let the truly worst member escape. The round waits (it is
            # retried every iteration until every member has one).
            return {}
        bottom, donors = self.select(fitness)
        self.last_pbt = self.num_updates
        self.pbt_rounds += 1
        if len(bottom) == 0:
            return {}
        dst = torch.as_tensor(bottom, device=self.device, dtype=torch.long)
        src = torch.as_tensor(donors, device=self.device, dtype=torch.long)
        self.exploit_members(src, dst)
        for k in self.hp.names:                                  # inherit, then explore
            self.hp[k][dst] = self.hp[k][src].clone()
        g = self.host_rng
        spec = cfg.hyperparameter_spec()
        for m in bottom.tolist():
            for k, dist in self.mutations.items():
                current = float(self.hp[k][m])
                value, _ = M.explore(int(round(current)) if M.integer_prior(dist) else current, dist, g,
                                     cfg.pbt_resample_probability, cfg.pbt_perturbation_factors)
                self.hp[k][m] = M.within(float(value), spec.get(k))
        self.optimizer_hparams()
        # the replaced members' episodes running now began under the policies they lost:
        # they do not count towards the new members' fitness
        self.returns.reset_members(dst, discard_in_flight=True)
        self.last_pbt_info = {"replaced": bottom.tolist(), "donors": donors.tolist()}
        return self.last_pbt_info

    # -- reporting ------------------------------------------------------------------------------------------
    def _report(self, n_updates: int, pbt_info: Optional[Dict[str, Any]]) -> None:
        cfg = self.config
        fit = self.returns.fitness().cpu().numpy()
        lens = self.returns.mean_length().cpu().numpy()
        hp = {k: v.cpu().numpy() for k, v in self.hp.t.items()}
        finite = fit[~np.isnan(fit)]
        best = int(np.argmax(np.where(np.isnan(fit), -np.inf, fit)))
        for m in range(self.K):
            self.metrics.log_value(("population", f"member_{m}", EPISODE_RETURN_MEAN), float(fit[m]), window=1)
            for k, v in hp.items():
                self.metrics.log_value(("population", f"member_{m}", k), float(v[m]), window=1)
        self.metrics.log_value(("population", "best_member"), best, window=1)
        self.metrics.log_value(("population", "fitness_mean"), float(finite.mean()) if finite.size else math.nan,
                               window=1)
        self.metrics.log_value(("population", "num_updates_lifetime"), self.num_updates, window=1)
        self.metrics.log_value(("population", "pbt_rounds"), self.pbt_rounds, window=1)
        self.metrics.log_value(("population", "compile_time_s"), getattr(getattr(self, "_fused", None),
                                                                          "compile_time_s", 0.0), window=1)
        best_ret = float(fit[best]) if finite.size else math.nan
        self.metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN), best_ret, window=1)
        self.metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN), float(lens[best]), window=1)
        self.metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MAX),
                               float(finite.max()) if finite.size else math.nan, window=1)
        self.metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MIN),
                               float(finite.min()) if finite.size else math.nan, window=1)
        episodes = int(self.returns.episodes.sum())
        self.metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES), episodes - self.episodes_logged, reduce="sum")
        self.metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES_LIFETIME), episodes - self.episodes_logged,
                               reduce="lifetime_sum")
        self.episodes_logged = episodes
        self.tracker.log_source_metrics(self.metrics)   # the source's own (e.g. envpool's reward terms)
        trained = self.trained_env_steps(n_updates)
        self.log_trained_steps(trained)
        self.log_learner("num_updates_lifetime", self.num_updates)
