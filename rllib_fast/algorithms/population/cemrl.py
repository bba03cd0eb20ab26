"""CEM-RL: a cross-entropy method over policy parameters, half of each
generation improved by TD3 against one shared critic (Pourchot & Sigaud 2019,
vectorised as in Flajolet et al. §5.2).

One ``training_step`` is one generation:

1. sample K policies from the diagonal Gaussian ``N(mu, diag(var))`` over the
   flattened policy parameters (mirrored pairs when ``cem_antithetic``) and
   load them into the stacked actor (one ``[K, P]`` copy);
2. TD3-train the first ``cem_trained_fraction`` of them against the shared
   critic for ``cem_grad_steps_per_env_step`` x (total env steps of the
   previous generation, all members' episodes together) update steps. That is
   CEM-RL's budget: sequentially, each trained actor gets ``total`` steps and
   the critic ``total / n_trained`` before each of them, so ``total`` in all;
   vectorised (Flajolet et al. §4.2), one update step is one critic step on
   every member's batch plus one step of every trained actor, so the critic
   and each actor still get ``total`` steps each. All members' batches go
   through their own target policies for the (population-averaged) critic
   loss, and only the trained members' policies move (a mask on the
   vectorised optimizer, whose state is reset each generation as in the
   paper's code);
3. evaluate every member for one episode per env, noise-free (the fitness),
   storing the transitions in the shared replay; the steps of these episodes
   are the next generation's update budget;
4. CEM update from the top ``cem_num_elites`` (log-rank weights):
   ``mu <- sum w_i theta_i``, ``var <- sum w_i (theta_i - mu_old)^2 + noise``,
   with ``noise`` decaying from ``cem_initial_std^2`` towards ``cem_final_noise``.

The *mean* policy ``mu`` is what ``evaluate()`` and ``compute_actions`` use.
"""
from __future__ import annotations

from typing import Any, Dict

import numpy as np
import torch

from ...core.stacked import StackedMLP, flat_members, load_flat_members
from ...core.state import StateAdapter
from .config import CEMRLConfig
from .td3 import PopTD3


class CEMRL(PopTD3):
    shared_critic = True

    @classmethod
    def get_default_config(cls) -> CEMRLConfig:
        return CEMRLConfig()

    def build_learner(self) -> None:
        super().build_learner()
        cfg = self.config
        self.mu = flat_members(self.actor)[0].clone()
        self.var = torch.full_like(self.mu, cfg.cem_initial_std ** 2)
        self.cem_noise = torch.full((), cfg.cem_initial_std ** 2, device=self.device)
        self.n_trained = int(round(cfg.cem_trained_fraction * self.K))
        # only the trained part of the population moves (PopTD3.policy_mask applies it)
        self.train_mask = torch.arange(self.K, device=self.device) < self.n_trained
        self.num_elites = cfg.cem_num_elites or max(1, self.K // 2)
        self.prev_generation_steps = 0   # env steps of the last generation's episodes, all members
        self.generation = 0
        self.mean_actor = StackedMLP(1, int(self.env.obs_shape[0]), self.hidden_sizes, self.act_dim,
                                     cfg.activation, cfg.layer_norm, device=self.device)
        self.last_fitness = np.full(self.K, np.nan)

    def learner_components(self) -> Dict[str, Any]:
        return {**super().learner_components(), "mu": StateAdapter.tensor(self.mu),
                "var": StateAdapter.tensor(self.var), "cem_noise": StateAdapter.tensor(self.cem_noise)}

    def extra_state(self) -> Dict[str, Any]:
        return {**super().extra_state(), "prev_generation_steps": self.prev_generation_steps,
                "generation": self.generation, "last_fitness": self.last_fitness.tolist()}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.prev_generation_steps, self.generation = state["prev_generation_steps"], state["generation"]
        self.last_fitness = np.asarray(state["last_fitness"], dtype=np.float64)

    # -- CEM ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def sample_population(self) -> torch.Tensor:
        K, P = self.K, self.mu.numel()
        if self.config.cem_antithetic:
            half = (K + 1) // 2
            eps = self.rng.normal(P, members=slice(0, half))                       # [half, P]
            eps = torch.cat([eps, -eps], 0)[:K]
        else:
            eps = self.rng.normal(P)
        return self.mu + self.var.sqrt() * eps

    @torch.no_grad()
    def cem_update(self, params: torch.Tensor, fitness: np.ndarray) -> None:
        E = self.num_elites
        fit = np.where(np.isnan(fitness), -np.inf, fitness)
        order = torch.as_tensor(np.argsort(-fit, kind="stable")[:E], device=self.device)
        w = torch.log(torch.tensor(1.0 + E, device=self.device)) - torch.log(
            torch.arange(1, E + 1, device=self.device, dtype=torch.float32))
        w = w / w.sum()
        elites = params[order]
        old_mu = self.mu.clone()
        self.mu.copy_((w.unsqueeze(1) * elites).sum(0))
        self.var.copy_((w.unsqueeze(1) * (elites - old_mu).square()).sum(0) + self.cem_noise)
        cfg = self.config
        self.cem_noise.mul_(cfg.cem_noise_decay).add_((1 - cfg.cem_noise_decay) * cfg.cem_final_noise)

    # -- one generation ---------------------------------------------------------------------------------------
    def training_step(self) -> None:
        cfg = self.config
        params = self.sample_population()
        load_flat_members(self.actor, params)
        load_flat_members(self.actor_t, params)
        self.actor_opt.reset_members(torch.arange(self.K, device=self.device))
        n_updates = 0
        if self.member_env_steps >= cfg.learning_starts and self.prev_generation_steps > 0 and self.n_trained > 0:
            n_updates = int(cfg.cem_grad_steps_per_env_step * self.prev_generation_steps)
            with self.metrics.log_time(("timers", "learn")):
                self.run_updates(n_updates)
            params = flat_members(self.actor)          # trained members changed
        with self.metrics.log_time(("timers", "rollout")):
            steps, episode_steps = self._evaluate_generation()
        self.prev_generation_steps = episode_steps
        self.log_env_steps(steps * self.env.num_envs)
        fitness = self.returns.fitness().cpu().numpy()
        self.last_fitness = fitness
        self.cem_update(params, fitness)
        self.generation += 1
        self._report(n_updates)
        self.metrics.log_value(("population", "generation"), self.generation, window=1)
        self.metrics.log_value(("population", "cem_mean_std"), self.var.sqrt().mean(), window=1)

    @torch.no_grad()
    def _evaluate_generation(self) -> tuple[int, int]:
        """One noise-free episode per env (transitions stored); returns (steps
        per env, steps inside the episodes summed over all envs). Envs whose
        episode ended keep stepping until all are done; those steps are stored
        as invalid and not counted in the second number."""
        cfg, env, K, n = self.config, self.env, self.K, self.n
        self.returns.reset_members(torch.arange(K, device=self.device))
        self.returns.ret.zero_()
        self.returns.len.zero_()
        obs = env.reset()
        finished = torch.zeros(env.num_envs, dtype=torch.bool, device=self.device)
        episode_steps = torch.zeros((), dtype=torch.int64, device=self.device)
        limit = cfg.cem_max_episode_steps or env.max_episode_steps or 1000
        warm = self.member_env_steps < cfg.learning_starts and self.generation == 0
        t = 0
        for t in range(1, limit + 1):
            if warm:
                action = self.random_actions()
            else:
                action = self.policy_actions(obs.view(K, n, *obs.shape[1:]), False)
            action = action.reshape(K * n, *action.shape[2:])
            step = env.step(action)
            valid = ~finished if step.valid is None else (step.valid & ~finished)
            done = step.terminated | step.truncated | (t == limit)
            self.replay.add(obs, self.to_replay_action(action), step.reward, step.terminated, done,
                            step.final_obs, valid)
            self.returns.update(step.reward, done, valid)
            episode_steps += valid.sum()
            finished |= done & valid
            obs = step.obs
            self.env_steps += env.num_envs
            if t % 50 == 0 and bool(finished.all()):
                break
        self.obs = obs
        return t, int(episode_steps)

    # -- mean policy -------------------------------------------------------------------------------------------
    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """The CEM mean policy (what CEM-RL evaluates)."""
        with torch.no_grad():
            load_flat_members(self.mean_actor, self.mu.unsqueeze(0))
            a = torch.tanh(self.mean_actor(obs.float().unsqueeze(0)))[0]
            return self.to_env_action(a)
