"""In-trial population-based training as a component a population algorithm holds.

:class:`InTrialPBT` owns what PBT is made of, for K members that
share one trial: the member hyperparameters as ``[K]`` tensors
(:class:`HyperparameterTensors`), each member's recent returns (its fitness,
:class:`~.tracking.MemberReturns`), the host generator of its draws, the
round itself (truncation selection, exploit, explore) and the population's
report. The algorithm that holds it (PopPPO, PopTD3, PopSAC, PopDQN, CEM-RL,
DvD) keeps what is its own: the networks, the update, what an exploit copies
(``exploit(src, dst)``) and how new hyperparameters reach its optimizers
(``hyperparameters_changed()``); it asks ``due(progress)`` and calls
``round(progress)`` in its ``training_step`` (``progress``: whatever unit its
``pbt_interval`` counts, update steps or iterations).

Its checkpoint state sits at the holder's top level (components ``hp``,
``returns``, ``host_rng``; extra state ``last_pbt``, ``pbt_rounds``,
``episodes_logged``), beside the holder's own state.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict

import numpy as np
import torch
from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN, EPISODE_RETURN_MAX, EPISODE_RETURN_MEAN,
                                     EPISODE_RETURN_MIN, NUM_EPISODES, NUM_EPISODES_LIFETIME)

from ...core.seeding import PBT_HOST, derive_seed
from ...core.state import StateAdapter
from . import mutations as M
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


class InTrialPBT:
    """In-trial PBT of K members acting on ``n`` envs each (Jaderberg et al. 2017,
    as vectorised by Flajolet et al. 2022).

    Built from the trial's ``config`` (the ``pbt_*`` keys, ``fitness_window``,
    the mutation prior), the member hyperparameter names (``member_hparams``:
    name -> prior), and the holder's two hooks: ``exploit(src, dst)`` copies
    the donors' member slices into the replaced members, and
    ``hyperparameters_changed()`` runs after ``hp`` changed (a round, a live
    config change). ``sample_initial``: draw the members' initial
    hyperparameters from the prior (else every member starts at the config's
    values)."""

    def __init__(self, config, K: int, n: int, device, seed: int, member_hparams, *,
                 exploit: Callable[[torch.Tensor, torch.Tensor], None],
                 hyperparameters_changed: Callable[[], None], sample_initial: bool) -> None:
        self.config, self.K, self.device = config, K, device
        self.exploit, self.hyperparameters_changed = exploit, hyperparameters_changed
        self.returns = MemberReturns(K, n, device, config.fitness_window)
        self.host_rng = np.random.default_rng(derive_seed(seed, PBT_HOST))   # host-side PBT draws
        self.mutations = config.resolved_mutations()
        self.hp = HyperparameterTensors(member_hparams, K, device)
        for k in self.hp.names:
            self.hp[k].fill_(float(getattr(config, k)))
            self.hp.applied[k] = getattr(config, k)
        if sample_initial:
            for k, dist in self.mutations.items():
                for m in range(K):
                    self.hp[k][m] = float(M.sample(dist, self.host_rng))
        self.interval = config.resolved_pbt_interval()   # None: in-trial PBT off
        self.last_round = 0      # progress (update steps or iterations) at the last round
        self.rounds = 0
        self.last_info: Dict[str, Any] = {}
        self.episodes_logged = 0

    # -- the round ----------------------------------------------------------------------------
    def due(self, progress: int) -> bool:
        """Whether a round is due at ``progress`` (the holder's interval unit)."""
        return self.interval is not None and progress - self.last_round >= self.interval

    def select(self, fitness: np.ndarray):
        """Truncation selection: (bottom members, their donors from the top)."""
        q = self.config.pbt_replaced()
        fit = np.where(np.isnan(fitness), -np.inf, fitness)
        order = np.argsort(fit, kind="stable")          # ascending
        bottom, top = order[:q], order[::-1][:q]
        donors = top[self.host_rng.integers(0, len(top), size=q)] if q else top[:0]
        return bottom, donors

    def round(self, progress: int) -> Dict[str, Any]:
        """Exploit (copy the donors' slices) and explore (new hyperparameters) once;
        returns ``{"replaced": [...], "donors": [...]}`` (empty when nobody was replaced)."""
        cfg = self.config
        fitness = self.returns.fitness().cpu().numpy()
        if np.isnan(fitness).any():
            # A member without a finished episode (since the start or its last exploit) has
            # no fitness; ranking it last would replace it again before it could show
            # anything, and let the truly worst member escape. The round waits (it is
            # retried every iteration until every member has one).
            return {}
        bottom, donors = self.select(fitness)
        self.last_round = progress
        self.rounds += 1
        if len(bottom) == 0:
            return {}
        dst = torch.as_tensor(bottom, device=self.device, dtype=torch.long)
        src = torch.as_tensor(donors, device=self.device, dtype=torch.long)
        self.exploit(src, dst)
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
        self.hyperparameters_changed()
        # the replaced members' episodes running now began under the policies they lost:
        # they do not count towards the new members' fitness
        self.returns.reset_members(dst, discard_in_flight=True)
        self.last_info = {"replaced": bottom.tolist(), "donors": donors.tolist()}
        return self.last_info

    def apply_config(self, config) -> None:
        """Trial-level config values that changed since last applied (Tune PBT
        across trials mutated them) go to every member; others keep per-member values."""
        self.config = config
        for k in self.hp.names:
            value = getattr(config, k)
            if self.hp.applied.get(k) != value:
                self.hp[k].fill_(float(value))
                self.hp.applied[k] = value
        self.hyperparameters_changed()

    def best_member(self) -> int:
        """The member with the highest fitness (member 0 while nobody has one)."""
        fit = torch.nan_to_num(self.returns.fitness(), nan=-math.inf)
        return int(fit.argmax())

    # -- the report -----------------------------------------------------------------------------
    def report(self, metrics, num_updates: int, compile_time_s: float = 0.0) -> None:
        """The population's metrics: ``population/member_i/...`` (fitness and
        hyperparameters), and ``env_runners/episode_return_mean`` = the best
        member's fitness, so Tune stoppers and schedulers work unchanged. The
        one host sync of an iteration."""
        fit = self.returns.fitness().cpu().numpy()
        lens = self.returns.mean_length().cpu().numpy()
        hp = {k: v.cpu().numpy() for k, v in self.hp.t.items()}
        finite = fit[~np.isnan(fit)]
        best = int(np.argmax(np.where(np.isnan(fit), -np.inf, fit)))
        for m in range(self.K):
            metrics.log_value(("population", f"member_{m}", EPISODE_RETURN_MEAN), float(fit[m]), window=1)
            for k, v in hp.items():
                metrics.log_value(("population", f"member_{m}", k), float(v[m]), window=1)
        metrics.log_value(("population", "best_member"), best, window=1)
        metrics.log_value(("population", "fitness_mean"), float(finite.mean()) if finite.size else math.nan,
                          window=1)
        metrics.log_value(("population", "num_updates_lifetime"), num_updates, window=1)
        metrics.log_value(("population", "pbt_rounds"), self.rounds, window=1)
        metrics.log_value(("population", "compile_time_s"), compile_time_s, window=1)
        best_ret = float(fit[best]) if finite.size else math.nan
        metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN), best_ret, window=1)
        metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN), float(lens[best]), window=1)
        metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MAX),
                          float(finite.max()) if finite.size else math.nan, window=1)
        metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MIN),
                          float(finite.min()) if finite.size else math.nan, window=1)
        episodes = int(self.returns.episodes.sum())
        metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES), episodes - self.episodes_logged, reduce="sum")
        metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES_LIFETIME), episodes - self.episodes_logged,
                          reduce="lifetime_sum")
        self.episodes_logged = episodes

    # -- checkpoint state (the keys the population algorithms store) -----------------------------
    def stateful_components(self) -> Dict[str, Any]:
        return {"returns": self.returns, "host_rng": StateAdapter.numpy_generator(self.host_rng), "hp": self.hp}

    def extra_state(self) -> Dict[str, Any]:
        return {"last_pbt": self.last_round, "pbt_rounds": self.rounds, "episodes_logged": self.episodes_logged}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        self.last_round, self.rounds = state["last_pbt"], state["pbt_rounds"]
        self.episodes_logged = state["episodes_logged"]

    def live_episodes(self) -> Dict[str, Any]:
        """The members' running returns (they belong to the live episodes a
        restore from a source that keeps its own episodes hands on)."""
        return {"member_returns": self.returns.in_flight()}

    def keep_live_episodes(self, live: Dict[str, Any]) -> None:
        self.returns.set_in_flight(live["member_returns"])
