"""FastDQN (and its presets Rainbow, EpsRainbow): batched-inference Q-learning.

Top to bottom: act (one batched forward for all N envs, per-env or scheduled
epsilon, or noisy nets), store (lock-step write into per-env replay
segments), learn (``training_intensity`` x generated / batch updates: n-step
targets from the replay, double-Q selection, scalar Huber or C51 cross-entropy
loss, PER weights and priority updates), and sync the target net.
All on the env's device; no per-step host sync.
"""
from __future__ import annotations

import copy
from typing import Any, Dict

import torch
from torch.nn import functional as F
from ray.rllib.core import DEFAULT_MODULE_ID

from ...core.algorithm import FastAlgorithm
from ...core.compile import compiled
from ...core.qnets import QNetwork, categorical_projection
from ...core.replay import SegmentedReplay
from .config import EpsRainbowConfig, FastDQNConfig, RainbowConfig



class FastDQN(FastAlgorithm):
    ACTION_SPACE = "discrete"
    @classmethod
    def get_default_config(cls) -> FastDQNConfig:
        return FastDQNConfig()

    # -- construction ----------------------------------------------------------------
    def build(self) -> None:
        cfg, env = self.config, self.env
        self.num_actions = int(env.single_action_space.n)
        self.module = QNetwork(env.obs_shape, self.num_actions, trunk=cfg.trunk, hidden_sizes=tuple(cfg.hidden_sizes),
                               activation=cfg.activation, dueling=cfg.dueling, num_atoms=cfg.num_atoms,
                               noisy=cfg.noisy, sigma0=cfg.noisy_sigma0, v_min=cfg.v_min,
                               v_max=cfg.v_max).to(self.device)
        self.target = copy.deepcopy(self.module).requires_grad_(False)
        lr, adam_eps = self.config.batch_rule_lr_eps()
        self.params = list(self.module.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=lr, eps=adam_eps, fused=True)
        obs_dtype = torch.uint8 if self.env.single_observation_space.dtype == "uint8" else torch.float32
        self.replay = SegmentedReplay(cfg.buffer_size, env.num_envs, env.obs_shape, obs_dtype, (), torch.int64,
                                      self.device, prioritized=cfg.prioritized_replay, alpha=cfg.per_alpha)
        n = env.num_envs
        if cfg.exploration == "per_env":  # Ape-X: a fixed spread from greedy-ish to exploratory envs
            i = torch.arange(n, device=self.device, dtype=torch.float32)
            self.per_env_eps = cfg.apex_epsilon ** (1 + cfg.apex_alpha * i / max(1, n - 1))
        self.env_steps = 0          # host counters (counts of our own calls: no device sync)
        self.num_updates = 0
        self.update_credit = 0.0    # fractional updates carried over between iterations
        # the hot path's pure tensor functions, compiled when `compile` is set (same functions eager)
        self._select_action = compiled(self._epsilon_greedy, cfg.compile, self.device)
        self._update_loss = compiled(self._weighted_loss, cfg.compile, self.device)

    def optimizers(self) -> list:
        return [self.optimizer]

    def get_module(self, module_id: str = DEFAULT_MODULE_ID):
        """The greedy policy as an RLModule sharing the online Q-network."""
        from .module import dqn_policy_module

        return dqn_policy_module(self)

    def stateful_components(self) -> Dict[str, Any]:
        out = {**super().stateful_components(), "module": self.module, "target": self.target,
               "optimizer": self.optimizer}
        if self.config.checkpoint_replay:
            out["replay"] = self.replay
        return out

    def extra_state(self) -> Dict[str, Any]:
        return {**super().extra_state(), "env_steps": self.env_steps, "num_updates": self.num_updates,
                "update_credit": self.update_credit}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.env_steps, self.num_updates = state["env_steps"], state["num_updates"]
        self.update_credit = state["update_credit"]
        if not self.config.checkpoint_replay:
            # saved without its replay: restored, it holds none, whatever this object held
            # before (a rollback or a PBT exploit would otherwise learn on the other run's
            # data, and n-step windows would join its steps to the restored episodes)
            self.replay.clear()

    def on_source_not_restored(self) -> None:
        self.replay.cut_episodes()

    # -- acting ----------------------------------------------------------------------
    def epsilon(self) -> float:
        cfg = self.config
        if cfg.exploration == "none":
            return 0.0
        frac = min(1.0, self.env_steps / cfg.epsilon_timesteps)
        return cfg.epsilon_initial + frac * (cfg.epsilon_final - cfg.epsilon_initial)

    @torch.no_grad()
    def _act(self, obs: torch.Tensor, eps) -> torch.Tensor:
        n = obs.shape[0]
        if self.config.noisy:  # each env its own draw: N actors exploring independently
            self.module.reset_noise(n if self.config.noise_per_env else None)
        random_a = torch.randint(0, self.num_actions, (n,), device=obs.device)
        explore = torch.rand(n, device=obs.device) < eps
        return self._select_action(obs, random_a, explore)

    def _epsilon_greedy(self, obs: torch.Tensor, random_a: torch.Tensor, explore: torch.Tensor) -> torch.Tensor:
        """The act step's tensor work (what ``compile`` compiles): random
        draws come in as arguments, so a schedule's changing epsilon is data,
        not a constant baked into (and recompiling) the graph."""
        return torch.where(explore, random_a, self.module(obs).argmax(-1))

    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        if explore:
            return self._act(obs, self.epsilon())
        was_training = self.module.training
        self.module.eval()  # noisy layers act on their means
        try:
            return self._act(obs, self.config.evaluation_epsilon)
        finally:
            self.module.train(was_training)

    # -- one iteration ---------------------------------------------------------------------
    def training_step(self) -> None:
        cfg = self.config
        with self.metrics.log_time(("timers", "rollout")):
            self._rollout()
        generated = cfg.rollout_length * self.env.num_envs
        self.log_env_steps(generated)
        trained = 0
        # gated on what the replay holds, not on env steps: a run restored without its
        # replay (`checkpoint_replay=False`, a PBT exploit) refills before it learns again
        if len(self.replay) >= cfg.learning_starts:
            self.update_credit += cfg.training_intensity * generated / cfg.batch_size
            n_updates = int(self.update_credit)
            self.update_credit -= n_updates
            with self.metrics.log_time(("timers", "learn")):
                self._learn(n_updates)
            trained = n_updates * cfg.batch_size
        self.tracker.log_to(self.metrics)
        self.log_trained_steps(trained)
        self.log_learner("training_intensity", cfg.training_intensity)
        eps = self.per_env_eps.mean() if cfg.exploration == "per_env" else self.epsilon()  # what acting used
        self.log_learner("epsilon", eps)
        self.log_learner("num_updates_lifetime", self.num_updates)
        self.log_learner("curr_lr", self.optimizer.param_groups[0]["lr"])

    @torch.no_grad()
    def _rollout(self) -> None:
        cfg, env = self.config, self.env
        eps = self.per_env_eps if cfg.exploration == "per_env" else self.epsilon()
        for _ in range(cfg.rollout_length):
            action = self._act(self.obs, eps)
            step = env.step(action)
            done = step.terminated | step.truncated
            self.replay.add(self.obs, action, step.reward, step.terminated, done, step.final_obs, step.valid)
            self.tracker.update(step.reward, done, step.valid)
            self.obs = step.obs
            self.env_steps += env.num_envs
            if cfg.exploration == "schedule":
                eps = self.epsilon()

    def _beta(self) -> float:
        cfg = self.config
        return min(1.0, cfg.per_beta + (1.0 - cfg.per_beta) * self.env_steps / cfg.per_beta_anneal_steps)

    def _learn(self, n_updates: int) -> None:
        cfg = self.config
        stats = torch.zeros(3, device=self.device)
        for _ in range(n_updates):
            if cfg.prioritized_replay:
                flat, w = self.replay.sample_prioritized(cfg.batch_size, self._beta())
            else:
                flat, w = self.replay.sample_uniform(cfg.batch_size)
            b = self.replay.gather(flat, cfg.n_step, cfg.gamma)
            if cfg.noisy:
                self.module.reset_noise()
                self.target.reset_noise()
            loss, q_sa, priority = self._update_loss(b, w)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip, foreach=True)
            self.optimizer.step()
            if cfg.prioritized_replay:
                self.replay.update_priorities(flat, priority, cfg.per_eps)
            self.num_updates += 1
            self._sync_target()
            stats += torch.stack([loss.detach(), q_sa.detach().mean(), torch.ones((), device=self.device)])
        if n_updates:
            self.log_learner("td_loss", stats[0] / stats[2])
            self.log_learner("q_mean", stats[1] / stats[2])
            if cfg.prioritized_replay:
                self.log_learner("per_beta", self._beta())

    def _weighted_loss(self, b: Dict[str, torch.Tensor], w: torch.Tensor):
        """The update step's forward (what ``compile`` compiles; its backward
        is compiled with it): the importance-weighted batch loss, Q(s, a) and
        the new priorities.

        The weighted mean is self-normalised, ``sum(w l) / sum(w)``: under
        uniform sampling ``w`` is the 0/1 validity mask (a mean over valid
        rows); under PER it is Schaul et al.'s weights, and dividing by their
        sum instead of the batch size keeps the step size independent of how
        skewed the batch's priorities are (Schaul's ``mean(w l)`` with
        ``w / max w`` shrinks the step as beta anneals to 1)."""
        loss_i, q_sa, priority = self._loss(b)
        return (w * loss_i).sum() / w.sum().clamp_min(1.0), q_sa, priority

    def _loss(self, b: Dict[str, torch.Tensor]):
        """Per-sample losses (Huber TD or C51 cross-entropy), Q(s, a) and the
        new replay priorities.

        Priorities are |TD error| for scalar Q (Schaul et al.; the Huber loss
        would store (delta^2 / 2)^alpha for |delta| < 1, squashing small errors
        far below their proportional share) and, for C51, the KL divergence
        from the projected target to the predicted distribution, as Rainbow
        prioritises (the cross-entropy loss minus the target's entropy: the
        same gradient, but a well-fitted bootstrapped target, whose projected
        distribution spreads over atoms, gets a low priority like a fitted
        terminal one).

        With double Q, one online forward over ``[obs; next_obs]`` serves both
        the loss (first half, with gradients) and the next-action selection
        (second half, detached)."""
        cfg, a = self.config, b["action"]
        B = a.shape[0]
        idx = torch.arange(B, device=self.device)
        c51 = cfg.num_atoms > 1
        online_in = torch.cat([b["obs"], b["next_obs"]]) if cfg.double_q else b["obs"]
        out = self.module.logits(online_in) if c51 else self.module(online_in)
        out_obs = out[:B]
        with torch.no_grad():
            if c51:
                target_probs = F.softmax(self.target.logits(b["next_obs"]), dim=-1)
                support = self.target.support
                if cfg.double_q:
                    selector = self.module.q_from_logits(out[B:].detach())
                else:
                    selector = (target_probs * support).sum(-1)
                next_a = selector.argmax(-1)
                target_dist = categorical_projection(target_probs[idx, next_a], b["return"], b["discount"], support)
            else:
                q_next_target = self.target(b["next_obs"])
                if cfg.double_q:
                    next_v = q_next_target[idx, out[B:].detach().argmax(-1)]
                else:
                    next_v = q_next_target.max(-1).values
                target = b["return"] + b["discount"] * next_v
        if not c51:
            q_sa = out_obs[idx, a]
            loss_i = F.huber_loss(q_sa, target, delta=cfg.huber_delta, reduction="none")
            return loss_i, q_sa, (target - q_sa.detach()).abs()
        log_p = F.log_softmax(out_obs, dim=-1)[idx, a]
        loss_i = -(target_dist * log_p).sum(-1)
        q_sa = (log_p.exp() * self.module.support).sum(-1)
        neg_entropy = torch.xlogy(target_dist, target_dist).sum(-1)
        return loss_i, q_sa, (loss_i.detach() + neg_entropy).clamp_min(0.0)

    @torch.no_grad()
    def _sync_target(self) -> None:
        cfg = self.config
        if cfg.tau is not None:
            torch._foreach_lerp_(list(self.target.parameters()), list(self.module.parameters()), cfg.tau)
        elif self.num_updates % cfg.target_update_period == 0:
            self.target.load_state_dict(self.module.state_dict())


class Rainbow(FastDQN):
    @classmethod
    def get_default_config(cls) -> RainbowConfig:
        return RainbowConfig()


class EpsRainbow(FastDQN):
    @classmethod
    def get_default_config(cls) -> EpsRainbowConfig:
        return EpsRainbowConfig()
