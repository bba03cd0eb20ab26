"""Per-episode means of a source's own per-step terms (e.g. its reward terms).

Host sources (envpool) report their task's reward terms per env and step in
their info dict (MuJoCo Playground's ports: ``reward_tracking_lin_vel``,
``reward_feet_air_time``, ...). :class:`EpisodeTermMeans` accumulates them on
the host, where they arrive (no device copy, no host sync), per env and
episode, and hands out the mean over the episodes that ended since the last
call: each episode counts once, with the term's average per step over that
episode (tracking terms of Playground's joystick tasks are kernels in [0, 1]
times their scale, so the value reads as "how well the command was tracked").

A source exposing these implements ``episode_metrics() -> {"group/name": float}``;
:class:`~rllib_fast.core.metrics.EpisodeTracker` logs them next to the episode
returns (``env_runners/reward_terms/<term>``, e.g.
``env_runners/reward_terms/tracking_lin_vel``) whenever it logs.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence

import numpy as np

__all__ = ["EpisodeTermMeans", "info_terms"]


def info_terms(infos: Any, num_envs: int, prefix: str = "reward_") -> list:
    """Names of the per-env scalar numeric entries of ``infos`` starting with ``prefix``, sorted."""
    if not isinstance(infos, Mapping):
        return []
    return sorted(k for k, v in infos.items() if k.startswith(prefix) and isinstance(v, np.ndarray)
                  and v.shape == (num_envs,) and np.issubdtype(v.dtype, np.number))


class EpisodeTermMeans:
    """Host-side per-episode averages of named per-step terms of ``num_envs`` envs."""

    def __init__(self, names: Sequence[str], num_envs: int, prefix: str = "reward_",
                 group: str = "reward_terms"):
        self.names = list(names)
        #: the keys ``pop_means`` reports, ``<group>/<name without prefix>``
        self.keys = [f"{group}/{n[len(prefix):] if n.startswith(prefix) else n}" for n in self.names]
        self.num_envs = int(num_envs)
        k = len(self.names)
        self._sum = np.zeros((self.num_envs, k))        # running per-episode sums
        self._len = np.zeros(self.num_envs)             # steps counted in the running episode
        self._ended_sum = np.zeros(k)                   # sum over ended episodes of their per-step means
        self._ended = 0

    def clear_running(self) -> None:
        """Forget the running episodes (the source was reset)."""
        self._sum[:] = 0.0
        self._len[:] = 0.0

    def update(self, infos: Mapping[str, Any], counted: np.ndarray, done: np.ndarray) -> None:
        """Account one step: ``counted`` [N] bool marks rows whose step belongs to an
        episode (False on the transition that straddles a one-step-late reset),
        ``done`` [N] bool the rows whose episode ended with this step."""
        if not self.names:
            return
        w = counted.astype(np.float64)
        for j, name in enumerate(self.names):
            self._sum[:, j] += np.asarray(infos[name], dtype=np.float64) * w
        self._len += w
        if done.any():
            rows = np.flatnonzero(done)
            lens = np.maximum(self._len[rows], 1.0)[:, None]
            self._ended_sum += (self._sum[rows] / lens).sum(0)
            self._ended += rows.size
            self._sum[rows] = 0.0
            self._len[rows] = 0.0

    def pop_means(self) -> Dict[str, float]:
        """``{key: mean over the episodes ended since the last call}`` (keys: :attr:`keys`,
        e.g. ``reward_terms/tracking_lin_vel``); {} when none ended."""
        if not self._ended:
            return {}
        out = {key: float(v) for key, v in zip(self.keys, self._ended_sum / self._ended)}
        self._ended_sum[:] = 0.0
        self._ended = 0
        return out
