"""On-device episode bookkeeping, reduced to RLlib's metric keys once per call.

Per-env running return/length accumulate on the device every step; finished
episodes are scattered into a ring of the last ``window`` episodes without
knowing on the host how many finished (no sync). ``log_to`` hands 0-dim device
tensors to RLlib's MetricsLogger, which moves them to the host only when it
reduces at the end of the iteration.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN, EPISODE_RETURN_MAX,
                                     EPISODE_RETURN_MEAN, EPISODE_RETURN_MIN, NUM_EPISODES,
                                     NUM_ENV_STEPS_SAMPLED_LIFETIME, NUM_EPISODES_LIFETIME)

#: The result key every algorithm reports its mean episode return under (RLlib's own),
#: which Tune ranks trials by, the console shows and MLflow plots.
RETURN_KEY = f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"
#: The lifetime env-step counter of a result (the x axis of every learning curve).
STEP_KEY = NUM_ENV_STEPS_SAMPLED_LIFETIME


class EpisodeTracker:
    """Episode returns and lengths of ``num_envs`` envs (see the module docstring).

    ``source``: the env, when it reports episode statistics of its own
    (``episode_metrics() -> {"group/name": float}``, host values, e.g. envpool's
    per-episode reward terms): ``log_to`` logs them next to the returns, under
    ``env_runners/<group>/<name>``.
    """

    def __init__(self, num_envs: int, device: torch.device, window: int = 100, source: Any = None):
        self.window = window
        self._source_metrics = getattr(source, "episode_metrics", None)
        self.ret = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.len = torch.zeros(num_envs, dtype=torch.int64, device=device)
        # one spare slot (index `window`) absorbs writes from envs that did not finish
        self.ring_ret = torch.zeros(window + 1, dtype=torch.float64, device=device)
        self.ring_len = torch.zeros(window + 1, dtype=torch.float64, device=device)
        self.ptr = torch.zeros((), dtype=torch.int64, device=device)
        self.filled = torch.zeros((), dtype=torch.int64, device=device)
        self.finished_since_log = torch.zeros((), dtype=torch.int64, device=device)
        # envs whose current episode started before tracking began (partial): not recorded
        self.skip_current = torch.zeros(num_envs, dtype=torch.bool, device=device)

    def skip_current_episodes(self) -> None:
        """Do not record the episode each env is in now (e.g. after start-state
        decorrelation, whose first episodes are partial and would bias the mean)."""
        self.skip_current.fill_(True)
        self.ret.zero_()
        self.len.zero_()

    def in_flight(self) -> dict:
        """The per-env accumulators of the episodes running now (copies)."""
        return {"ret": self.ret.clone(), "len": self.len.clone(), "skip_current": self.skip_current.clone()}

    def set_in_flight(self, state: dict) -> None:
        for k in ("ret", "len", "skip_current"):
            getattr(self, k).copy_(state[k])

    def update(self, reward: torch.Tensor, done: torch.Tensor, valid: Optional[torch.Tensor] = None) -> None:
        """Account one step (``[N]`` tensors)."""
        self.update_batch(reward.unsqueeze(0), done.unsqueeze(0), None if valid is None else valid.unsqueeze(0))

    def update_batch(self, rewards: torch.Tensor, done: torch.Tensor, valid: Optional[torch.Tensor] = None) -> None:
        """Account ``T`` steps at once (``[T, N]`` tensors, time-major).

        Episode returns come from a cumulative sum over time minus its value
        at the previous episode end (found with ``cummax`` over done indices),
        so a whole rollout costs a fixed ~20 kernels instead of ~10 per step.
        Invalid (straddling) transitions add neither reward nor length.
        """
        T = rewards.shape[0]
        r = rewards.double()
        steps = torch.ones_like(r)
        if valid is not None:
            r = torch.where(valid, r, torch.zeros_like(r))
            steps = valid.double()
            done = done & valid
        cr = torch.cumsum(r, 0) + self.ret          # running return incl. the carried-in episode part
        cl = torch.cumsum(steps, 0) + self.len.double()
        t_idx = torch.arange(T, device=r.device).unsqueeze(1).expand_as(done)
        last_done = torch.cummax(torch.where(done, t_idx, torch.full_like(t_idx, -1)), 0).values
        prev_done = torch.cat([torch.full_like(last_done[:1], -1), last_done[:-1]], 0)
        safe = prev_done.clamp_min(0)
        zero = torch.zeros_like(cr)
        base_r = torch.where(prev_done >= 0, torch.gather(cr, 0, safe), zero)
        base_l = torch.where(prev_done >= 0, torch.gather(cl, 0, safe), zero)
        ep_ret, ep_len = (cr - base_r).reshape(-1), (cl - base_l).reshape(-1)
        first_end = done & (torch.cumsum(done.long(), 0) == 1)
        record = done & ~(first_end & self.skip_current)
        self.skip_current &= ~done.any(0)
        d = record.reshape(-1)
        dl = d.long()
        slot = torch.remainder(self.ptr + torch.cumsum(dl, 0) - 1, self.window)
        slot = torch.where(d, slot, torch.full_like(slot, self.window))
        self.ring_ret.scatter_(0, slot, ep_ret)
        self.ring_len.scatter_(0, slot, ep_len)
        n = dl.sum()
        self.ptr = torch.remainder(self.ptr + n, self.window)
        self.filled = torch.clamp(self.filled + n, max=self.window)
        self.finished_since_log += n
        end = last_done[-1]
        ended = end >= 0
        safe_end = end.clamp_min(0).unsqueeze(0)
        self.ret = torch.where(ended, cr[-1] - torch.gather(cr, 0, safe_end)[0], cr[-1])
        self.len = torch.where(ended, cl[-1] - torch.gather(cl, 0, safe_end)[0], cl[-1]).long()

    def summary(self) -> Dict[str, torch.Tensor]:
        """Device scalars: mean/min/max return and mean length over the window (nan if none yet)."""
        mask = torch.arange(self.window, device=self.ret.device) < self.filled
        nan = torch.tensor(float("nan"), dtype=torch.float64, device=self.ret.device)
        r = torch.where(mask, self.ring_ret[:-1], nan)
        lens = torch.where(mask, self.ring_len[:-1], nan)
        inf = torch.tensor(float("inf"), dtype=torch.float64, device=self.ret.device)
        return {
            EPISODE_RETURN_MEAN: r.nanmean(),
            EPISODE_LEN_MEAN: lens.nanmean(),
            EPISODE_RETURN_MIN: torch.where(mask, self.ring_ret[:-1], inf).min(),
            EPISODE_RETURN_MAX: torch.where(mask, self.ring_ret[:-1], -inf).max(),
        }

    def log_to(self, metrics: Any, prefix: tuple = (ENV_RUNNER_RESULTS,)) -> None:
        for key, value in self.summary().items():
            metrics.log_value(prefix + (key,), value, window=1)
        metrics.log_value(prefix + (NUM_EPISODES,), self.finished_since_log.clone(), reduce="sum")
        metrics.log_value(prefix + (NUM_EPISODES_LIFETIME,), self.finished_since_log.clone(),
                          reduce="lifetime_sum")
        self.finished_since_log.zero_()
        self.log_source_metrics(metrics, prefix)

    def log_source_metrics(self, metrics: Any, prefix: tuple = (ENV_RUNNER_RESULTS,)) -> None:
        """Log the source's own episode statistics (``episode_metrics()``, see the class
        docstring) under ``prefix``; ``log_to`` calls it, reports that log returns their own
        way (the population algorithms) call it directly."""
        if self._source_metrics is not None:
            for key, value in self._source_metrics().items():
                metrics.log_value(prefix + tuple(key.split("/")), value, window=1)

    def state_dict(self) -> Dict[str, torch.Tensor]:
        return {k: getattr(self, k).detach().cpu().clone() for k in
                ("ret", "len", "ring_ret", "ring_len", "ptr", "filled", "finished_since_log",
                 "skip_current")}

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        for k, v in state.items():
            getattr(self, k).copy_(v)
