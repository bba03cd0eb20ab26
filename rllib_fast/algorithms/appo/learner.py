"""One asynchronous sampler-learner: a FastPPO/FastA2C whose optimizer is the
multi-step Adam of Stooke & Abbeel App. A against the central store.

The learner samples its own envs with its local copy of the parameters,
computes gradients exactly as the synchronous algorithm does (same losses,
same clipping), takes a *local* Adam step, and every ``sync_every`` steps
folds its accumulated steps into the central store and continues from the
central result (which includes other learners' updates). It also pulls the
central parameters every ``pull_every_sampling_steps`` batched env steps
while sampling (§4.3: "pull the central network weights more frequently").
Every learner keeps its own observation/value normalisation statistics; they
estimate the same task's statistics, so they agree up to sampling noise.
"""
from __future__ import annotations

from typing import Any, Dict

from ray.rllib.core import DEFAULT_MODULE_ID
import ray
import torch
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, LEARNER_RESULTS, NUM_EPISODES

from ...core.async_adam import MultiStepAdam
from ...core.param_server import RemoteStoreClient

POLICY = DEFAULT_MODULE_ID  # RLlib's module id of a single-agent policy


class MultiStepAdamOptimizer(torch.optim.Optimizer):
    """``torch.optim`` face of :class:`MultiStepAdam` so the synchronous
    algorithms' update code runs unchanged: ``step()`` flattens the gradients
    into one local multi-step-Adam step and writes the new local parameters
    back into the module. The learning rate is read from ``param_groups`` at
    every step, so live lr changes (PBT) apply."""

    def __init__(self, params, core: MultiStepAdam):
        super().__init__(list(params), {"lr": core.lr})
        self.core = core
        self._params = self.param_groups[0]["params"]
        self.write_params()

    @torch.no_grad()
    def write_params(self) -> None:
        torch.nn.utils.vector_to_parameters(self.core.theta.to(self._params[0].dtype), self._params)

    @torch.no_grad()
    def step(self, closure=None):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        self.core.lr = self.param_groups[0]["lr"]
        self.core.local_step(torch.cat([g.reshape(-1) for g in grads]))
        self.write_params()

    def state_dict(self) -> Dict[str, Any]:
        # The optimizer state that matters is central (the store's m, v, t);
        # a learner's checkpoint carries only its lr.
        return {"lr": self.param_groups[0]["lr"]}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.param_groups[0]["lr"] = state_dict["lr"]


class AsyncLearnerMixin:
    """Turns a synchronous on-policy algorithm into one asynchronous learner.
    Set ``self._store`` (a store or a :class:`RemoteStoreClient`) before build."""

    _store = None

    def make_optimizer(self) -> torch.optim.Optimizer:
        cfg = self.config
        core = MultiStepAdam(self._store, lr=self.configured_lr(), betas=tuple(cfg.adam_betas), eps=cfg.adam_eps,
                             device=self.device)
        self._async_stats = {"syncs": 0, "pulls": 0, "staleness": 0}
        return MultiStepAdamOptimizer(self.params, core)

    def _apply_gradients(self) -> None:
        super()._apply_gradients()  # clip + local multi-step Adam step
        if self.optimizer.core.n_local >= self.config.sync_every:
            self._sync()

    def _sync(self) -> None:
        core = self.optimizer.core
        t_before = core.t
        core.sync()
        # central steps taken by *other* learners since this learner's last pull
        self._async_stats["staleness"] += core.t - t_before
        self._async_stats["syncs"] += 1
        self.optimizer.write_params()

    def _after_sampling_step(self, t: int) -> None:
        every = self.config.pull_every_sampling_steps
        if every is not None and (t + 1) % every == 0 and self.optimizer.core.n_local == 0:
            self.optimizer.core.pull()
            self.optimizer.write_params()
            self._async_stats["pulls"] += 1

    def _learn(self) -> None:
        super()._learn()
        if self.optimizer.core.n_local:  # never carry unsynced steps into sampling
            self._sync()

    def log_env_steps(self, n: int) -> None:
        super().log_env_steps(n)
        self._pending_env_steps = getattr(self, "_pending_env_steps", 0) + n


def learner_class(base_cls):
    """``AsyncLearnerMixin`` over ``base_cls`` (FastPPO, FastA2C), cached so
    pickling by reference works inside Ray actors."""
    name = f"Async{base_cls.__name__}Learner"
    cls = _LEARNER_CLASSES.get(name)
    if cls is None:
        cls = type(name, (AsyncLearnerMixin, base_cls), {"__module__": __name__})
        _LEARNER_CLASSES[name] = cls
        globals()[name] = cls
    return cls


_LEARNER_CLASSES: Dict[str, type] = {}


@ray.remote
class AsyncLearnerActor:
    """Runs one learner's rollout/learn cycles on request and reports them."""

    def __init__(self, base_cls, config_state: Dict[str, Any], driver_cls, rank: int, store_handle):
        torch.set_num_threads(1)
        cfg = driver_cls.get_default_config().from_state(config_state)
        cfg = cfg.copy(copy_frozen=False)
        cfg.num_envs = cfg.num_envs // cfg.num_async_learners
        cfg.num_async_learners = 1  # this learner's own view: it steps its share alone
        cfg.seed = (cfg.seed if cfg.seed is not None else 0) + 1_000_003 * (rank + 1)
        cfg.evaluation_interval = None
        cls = learner_class(base_cls)
        cls._store = RemoteStoreClient(store_handle)
        self.rank = rank
        self.algo = cls(config=cfg)

    def run(self, cycles: int) -> Dict[str, Any]:
        """``cycles`` rollout+learn cycles; returns counts, episode window,
        losses and normaliser statistics (for the driver's evaluation copy)."""
        algo = self.algo
        for _ in range(cycles):
            algo.training_step()
        results = algo.metrics.reduce()
        learner = {k: float(v) for k, v in results.get(LEARNER_RESULTS, {}).get(POLICY, {}).items()
                   if isinstance(v, (int, float)) or (torch.is_tensor(v) and v.numel() == 1)}
        summary = {k: float(v) for k, v in algo.tracker.summary().items()}
        out = {
            "env_steps": algo._pending_env_steps,
            "episodes": summary,
            "episodes_in_window": float(algo.tracker.filled),
            "num_episodes": int(results.get(ENV_RUNNER_RESULTS, {}).get(NUM_EPISODES, 0)),
            "learner": learner,
            "async": dict(algo._async_stats),
            "buffers": {k: v.detach().cpu().clone() for k, v in algo.module.named_buffers()},
        }
        algo._pending_env_steps = 0
        algo._async_stats = {k: 0 for k in algo._async_stats}
        return out

    def get_state(self) -> Dict[str, Any]:
        return self.algo.get_state()

    def set_state(self, state: Dict[str, Any]) -> None:
        self.algo.set_state(state)
        self.algo.optimizer.core.pull()  # parameters come from the (restored) central store
        self.algo.optimizer.write_params()

    def apply_live_config(self, live: Dict[str, Any]) -> None:
        """Apply the driver's live hyperparameters (PBT) to this learner."""
        algo = self.algo
        cfg = algo.config.copy(copy_frozen=False)
        for key, value in live.items():
            setattr(cfg, key, value)
        cfg.freeze()
        algo.config = algo._built_config = cfg
        algo.apply_live_hyperparameters()

    def close(self) -> None:
        self.algo.stop()
