"""Ready-made Tune ``PopulationBasedTraining`` with the Fast-PBRL paper's settings.

Flajolet et al. (ICML 2022) §5.1: every interval, the bottom 30% of the
population is replaced by copies of the top 30% and its hyperparameters are
*resampled from the prior* (never perturbed): ``quantile_fraction=0.3``,
``resample_probability=1.0``. Tune's defaults differ (0.25 / 0.25), which is
why this preset exists.

Two ways to run PBT with rllib_fast:

* **inside a trial** (fast, the paper's design): a population algorithm
  (``PopTD3``, ``PopSAC``, ``PopDQN``) with ``pbt_interval`` set; K members
  share one process and one stacked network;
* **across trials** (this module): Tune's scheduler over trials of *any* of
  our algorithms — single agents (``FastPPO``, ``FastDQN``, ...) or whole
  populations (each trial a ``PopTD3`` etc.). For population trials, a
  mutated trial-level value (e.g. ``actor_lr``) is pushed into every member of
  the exploiting trial; keys Tune did not change keep their per-member values.

The interval is counted in ``time_attr`` units: ``training_iteration`` by
default; ``population/num_updates_lifetime`` counts update steps per member
(the paper's 100,000) for population trials.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

PAPER_QUANTILE = 0.3
PAPER_RESAMPLE = 1.0
from ..core.metrics import RETURN_KEY


def _td3_prior():
    from ray import tune

    return {"actor_lr": tune.loguniform(3e-5, 3e-3), "critic_lr": tune.loguniform(3e-5, 3e-3),
            "policy_delay": [1, 2, 3, 4, 5], "exploration_noise": tune.uniform(0.0, 1.0),
            "target_noise": tune.uniform(0.0, 1.0), "noise_clip": tune.uniform(0.0, 1.0),
            "gamma": tune.uniform(0.9, 1.0)}


def _sac_prior():
    from ray import tune

    return {"actor_lr": tune.loguniform(3e-5, 3e-3), "critic_lr": tune.loguniform(3e-5, 3e-3),
            "alpha_lr": tune.loguniform(3e-5, 3e-3), "target_entropy_scale": tune.uniform(0.2, 2.0),
            "reward_scale": tune.uniform(0.1, 10.0), "gamma": tune.uniform(0.9, 1.0)}


def default_mutations(algo: str) -> Dict[str, Any]:
    """The paper's prior for TD3/SAC-based algorithms; otherwise a log-uniform
    lr over a decade each side of the algorithm's default, plus gamma when the
    algorithm has it live."""
    from ray import tune

    if algo in ("PopTD3", "CEMRL", "DvD"):
        return _td3_prior()
    if algo == "PopSAC":
        return _sac_prior()
    from ..algorithms import CONFIGS

    if algo not in CONFIGS:
        raise ValueError(f"unknown algorithm {algo!r}; allowed: {', '.join(sorted(CONFIGS))}")
    cfg = CONFIGS[algo]()
    spec = cfg.hyperparameter_spec()
    out: Dict[str, Any] = {}
    if "lr" in spec:
        out["lr"] = tune.loguniform(cfg.lr / 10, cfg.lr * 10)
    if "gamma" in spec and spec["gamma"].live:
        out["gamma"] = tune.uniform(0.9, 0.999)
    return out


def paper_pbt(hyperparam_mutations: Optional[Mapping[str, Any]] = None, *, algo: Optional[str] = None,
              perturbation_interval: float = 5, time_attr: str = "training_iteration",
              metric: Optional[str] = RETURN_KEY, mode: Optional[str] = "max", synch: bool = False, **kwargs):
    """``PopulationBasedTraining`` with quantile 0.3 and resample probability 1.0.

    ``hyperparam_mutations`` defaults to :func:`default_mutations` of ``algo``.
    ``synch=False`` by default: synchronous PBT hung in our demo when one trial
    hit a stop criterion while the others waited (docs/design-notes.md).
    Extra keyword arguments go to ``PopulationBasedTraining``.
    """
    from ray.tune.schedulers import PopulationBasedTraining

    if hyperparam_mutations is None:
        if algo is None:
            raise ValueError("paper_pbt: give `hyperparam_mutations` or `algo` (to use its default prior)")
        hyperparam_mutations = default_mutations(algo)
    kwargs.setdefault("quantile_fraction", PAPER_QUANTILE)
    kwargs.setdefault("resample_probability", PAPER_RESAMPLE)
    return PopulationBasedTraining(time_attr=time_attr, perturbation_interval=perturbation_interval,
                                   hyperparam_mutations=dict(hyperparam_mutations), metric=metric, mode=mode,
                                   synch=synch, **kwargs)


def pbt_tuner(algo: str, param_space: Any, *, num_trials: int = 4, stop: Optional[Mapping[str, Any]] = None,
              hyperparam_mutations: Optional[Mapping[str, Any]] = None, perturbation_interval: float = 5,
              time_attr: str = "training_iteration", storage_path: Optional[str] = None,
              reuse_actors: bool = True, checkpoint_frequency: Optional[int] = None, callbacks: Optional[list] = None,
              **pbt_kwargs):
    """A ``tune.Tuner`` running ``num_trials`` trials of ``algo`` under :func:`paper_pbt`.

    ``param_space``: an ``AlgorithmConfig`` or dict (its values are the trials'
    starting points; give each trial a different ``seed`` via a search space if
    wanted). Checkpoints are written every ``perturbation_interval`` iterations
    unless ``checkpoint_frequency`` says otherwise (PBT exploits checkpoints).
    """
    from ray import tune

    if hasattr(param_space, "to_dict"):
        param_space = param_space.to_dict()
    pbt = paper_pbt(hyperparam_mutations, algo=algo, perturbation_interval=perturbation_interval,
                    time_attr=time_attr, metric=None, mode=None, **pbt_kwargs)
    freq = checkpoint_frequency or (int(perturbation_interval) if time_attr == "training_iteration" else 1)
    return tune.Tuner(algo, param_space=param_space,
                      tune_config=tune.TuneConfig(scheduler=pbt, metric=RETURN_KEY, mode="max",
                                                  num_samples=num_trials, reuse_actors=reuse_actors),
                      run_config=tune.RunConfig(storage_path=storage_path, stop=dict(stop or {}), callbacks=callbacks,
                                                checkpoint_config=tune.CheckpointConfig(
                                                    checkpoint_frequency=freq, checkpoint_at_end=True)))
