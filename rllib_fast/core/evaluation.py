"""Evaluation of a FastAlgorithm on its own env (split out of ``core/algorithm.py``):
``evaluate()`` runs one episode in each of ``evaluation_duration`` fresh envs,
drawing from the algorithm's own random stream, and reports RLlib's
``evaluation/env_runners`` keys."""
from __future__ import annotations

import math
from typing import Any, Dict

import torch
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN, EPISODE_RETURN_MEAN, NUM_EPISODES

from .seeding import EVALUATION, derive_seed


class EpisodeActor:
    """How an evaluation acts in its own envs: ``act(obs)`` every step and
    ``forget(ended)`` after it (bool ``[n]``: episodes that ended). This one
    acts through ``compute_actions`` and remembers nothing; a policy with a
    memory keeps one per env of its own (FastPPO's ``rnn_type``)."""

    def __init__(self, algo, explore: bool) -> None:
        self.algo, self.explore = algo, explore

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return self.algo.compute_actions(obs, explore=self.explore)

    def forget(self, ended: torch.Tensor) -> None:
        """Nothing to forget."""


class Evaluation:
    """``evaluate()`` of a FastAlgorithm (a base of :class:`~.algorithm.FastAlgorithm`)."""

    def episode_actor(self, num_envs: int, explore: bool = False) -> EpisodeActor:
        """The policy acting in ``num_envs`` envs of its own from their episodes' starts
        (evaluation; ``explore``: sampled, else greedy actions)."""
        return EpisodeActor(self, explore)

    # -- evaluation -------------------------------------------------------------
    def evaluate(self, parallel_train_future=None) -> Dict[str, Any]:
        """Evaluate (see :meth:`_evaluate_episodes`), drawing from the algorithm's own stream."""
        with self.rng_stream:
            return self._evaluate_episodes()

    @torch.no_grad()
    def _evaluate_episodes(self) -> Dict[str, Any]:
        """Run one episode in each of ``evaluation_duration`` fresh envs.

        Stooke & Abbeel's protocol maps onto: ``evaluation_interval`` (every K
        iterations), ``evaluation_max_env_steps`` (up to M steps),
        ``evaluation_max_path_length`` (maximum path length), greedy actions or
        a small epsilon (DQN's ``evaluation_epsilon``). Results are reported
        under ``evaluation/env_runners``.
        Evaluation is greedy unless the evaluation config sets ``explore``; its
        env is built from the evaluation config (``env``, ``env_config``).
        It syncs with the host every 50 steps to check completion (this is not
        the training hot path)."""
        n = max(1, int(self.evaluation_config.evaluation_duration
                       if self.evaluation_config.evaluation_duration != "auto" else 10))
        if self._eval_env is None or self._eval_env.num_envs != n:
            # one plain env (not an algorithm's own layout, e.g. HTS's executor parts) built from
            # the evaluation config, so `evaluation_config={"env_config": ...}` takes effect
            from .algorithm import FastAlgorithm   # the base's make_env (imported here: it imports this module)

            self._eval_env = FastAlgorithm.make_env(self, n, derive_seed(self.seed, EVALUATION),
                                                    config=self.evaluation_config)
        env = self._eval_env
        obs = env.reset(seed=derive_seed(self.seed, EVALUATION, self.training_iteration))
        ret = torch.zeros(n, dtype=torch.float64, device=self.device)
        length = torch.zeros(n, dtype=torch.int64, device=self.device)
        final_ret = torch.zeros_like(ret)
        final_len = torch.zeros_like(length)
        finished = torch.zeros(n, dtype=torch.bool, device=self.device)
        cfg = self.config
        path_limit = cfg.evaluation_max_path_length or env.max_episode_steps or 100_000
        limit = min(path_limit, cfg.evaluation_max_env_steps or path_limit)
        explore = bool(self.evaluation_config.explore)
        actor = self.episode_actor(n, explore)
        for t in range(limit):
            step = env.step(actor.act(obs))
            valid = step.valid if step.valid is not None else torch.ones_like(finished)
            actor.forget(step.done | ~valid)
            active = ~finished & valid
            ret += torch.where(active, step.reward.double(), torch.zeros_like(ret))
            length += active.long()
            ended = (step.done | (length >= path_limit)) & active
            final_ret = torch.where(ended, ret, final_ret)
            final_len = torch.where(ended, length, final_len)
            finished |= ended
            obs = step.obs
            if t % 50 == 49:
                done = int(finished.sum())
                if self.evaluation_progress is not None:
                    self.evaluation_progress(done, n)
                if done == n:
                    break
        if self.evaluation_progress is not None:
            self.evaluation_progress(int(finished.sum()), n)
        return {ENV_RUNNER_RESULTS: {
            EPISODE_RETURN_MEAN: float(final_ret[finished].mean()) if finished.any() else math.nan,
            EPISODE_LEN_MEAN: float(final_len[finished].double().mean()) if finished.any() else math.nan,
            NUM_EPISODES: int(finished.sum()),
        }}
