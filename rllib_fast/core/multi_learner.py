"""Learners 1..L-1 of a data-parallel algorithm, as Ray actors.

The driving algorithm is learner 0: it keeps its own share of the envs, its
module and optimizer, so ``get_module()``, evaluation and checkpoints work as
with one learner. Each remote learner builds the same algorithm class locally
from the same (global) config, differing only in its seed: every quantity
derived from the config (the horizon under ``total_batch_size``, the lr under
FastA2C's sqrt rule) is therefore the same on all learners, and each steps its
share ``num_envs / L`` of the envs (``FastAlgorithm.local_num_envs``). It joins
the torch.distributed group (gloo on CPU, NCCL on CUDA) and receives learner
0's parameters and statistics, after which every update is identical on all
learners. A reused trial actor (``reset_config``) rebuilds the whole group
from the new config.

Actors ask Ray for ``num_cpus_per_learner``/``num_gpus_per_learner``; inside a
Tune trial they land in the trial's placement group (see
``FastAlgorithm.default_resource_request``), on one machine or several.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import ray
import torch
from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS, EPISODE_LEN_MEAN, EPISODE_RETURN_MAX, EPISODE_RETURN_MEAN,
                                     EPISODE_RETURN_MIN, NUM_EPISODES, NUM_EPISODES_LIFETIME)

from .devices import raise_remote_device_error
from .distributed import DistributedContext, free_port
from .guard import UpdateGuard, rollback_to
from .learner_actor import LearnerActor, close_actors
from .local_ray import ensure_ray
from .seeding import LEARNER, derive_seed

# The rank of the learner this process hosts when it is a remote learner (1..L-1);
# None in the driver. Its algorithm then joins the driver's group instead of
# starting one of its own.
_REMOTE_RANK: Optional[int] = None


def remote_learner_rank() -> Optional[int]:
    """This process's learner rank if it hosts a remote learner, else None."""
    return _REMOTE_RANK


def learner_config(config: Any, rank: int):
    """Learner ``rank``'s config: the trial's config with its own seed (and no
    evaluation, which learner 0 does). ``num_envs`` and ``num_learners`` stay
    global, so derived quantities agree with learner 0's; the env share is
    ``FastAlgorithm.local_num_envs``."""
    cfg = config.copy(copy_frozen=False)
    seed = config.seed if config.seed is not None else 0
    cfg.seed = seed if rank == 0 else derive_seed(seed, LEARNER, rank)
    cfg.evaluation_interval = None
    return cfg


def episode_report(tracker: Any) -> Dict[str, float]:
    """One learner's episode statistics for the all-learner report (one host
    sync); counts the episodes finished since the last report."""
    s = tracker.summary()
    values = torch.stack([s[EPISODE_RETURN_MEAN], s[EPISODE_LEN_MEAN], s[EPISODE_RETURN_MIN],
                          s[EPISODE_RETURN_MAX], tracker.filled.double(),
                          tracker.finished_since_log.double()]).tolist()
    tracker.finished_since_log.zero_()
    keys = (EPISODE_RETURN_MEAN, EPISODE_LEN_MEAN, EPISODE_RETURN_MIN, EPISODE_RETURN_MAX,
            "episodes_in_window", NUM_EPISODES)
    return dict(zip(keys, values))


def log_learner_episodes(metrics: Any, reports: List[Dict[str, float]]) -> None:
    """Log every learner's episodes as one population: means weighted by the
    episodes each window holds, min/max over all windows, counts summed."""
    held = [r for r in reports if r["episodes_in_window"] > 0]
    total = sum(r["episodes_in_window"] for r in held)
    for key in (EPISODE_RETURN_MEAN, EPISODE_LEN_MEAN):
        value = sum(r[key] * r["episodes_in_window"] for r in held) / total if held else math.nan
        metrics.log_value((ENV_RUNNER_RESULTS, key), value, window=1)
    # over the windows that hold episodes (an empty window's min/max is NaN, and min()
    # with a NaN first would return NaN)
    metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MIN),
                      min((r[EPISODE_RETURN_MIN] for r in held), default=math.nan), window=1)
    metrics.log_value((ENV_RUNNER_RESULTS, EPISODE_RETURN_MAX),
                      max((r[EPISODE_RETURN_MAX] for r in held), default=math.nan), window=1)
    finished = int(sum(r[NUM_EPISODES] for r in reports))
    metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES), finished, reduce="sum")
    metrics.log_value((ENV_RUNNER_RESULTS, NUM_EPISODES_LIFETIME), finished, reduce="lifetime_sum")


def module_tensors(module: torch.nn.Module) -> List[torch.Tensor]:
    """Parameters and buffers (normaliser statistics included) in a fixed order."""
    return [t for _, t in sorted({**dict(module.named_parameters()), **dict(module.named_buffers())}.items())]


def join_group(algo, rank: int, world_size: int, init_method: str) -> None:
    """Learner ``rank`` joins the group (the same collectives, in the same order,
    on every learner): what each learner gathered alone while it was built is
    pooled (``algo.pool_over_learners``), then every learner starts from learner
    0's parameters and statistics."""
    algo.dist = DistributedContext(rank, world_size, init_method, algo.device)
    algo.pool_over_learners(algo.dist.sum_)
    algo.dist.broadcast_(module_tensors(algo.module), src=0)


@ray.remote
class RemoteLearner(LearnerActor):
    """Data-parallel learner ``rank`` >= 1: a copy of the trial's algorithm with
    its own env share and seed, joined to learner 0's process group."""

    def __init__(self, algo_cls, config_state: Dict[str, Any], rank: int, world_size: int):
        # Ray may ship this class by value, with a globals dict of its own: mark the
        # imported module, which `remote_learner_rank()` reads.
        import rllib_fast.core.multi_learner as this_module

        super().__init__(algo_cls, config_state)
        this_module._REMOTE_RANK = rank
        self.rank, self.world_size = rank, world_size
        self.algo = self.hosted = algo_cls(config=learner_config(self.config, rank))

    def join(self, init_method: str) -> bool:
        join_group(self.algo, self.rank, self.world_size, init_method)
        return True

    def train_step(self) -> Dict[str, float]:
        algo = self.algo
        with algo.rng_stream:   # its own stream, as the driver's step() does
            # nonfinite_guard='skip': this learner's state before the step, for rollback()
            self._guard_snapshot = UpdateGuard.from_config(algo.config).snapshot(algo)
            algo.training_step()
        algo.metrics.reduce()  # nobody reads a remote learner's metrics; keep them from accumulating
        return episode_report(algo.tracker)

    def rollback(self) -> bool:
        """Discard the last step (the driver's guard skipped it): learners stay identical."""
        rollback_to(self.algo, self._guard_snapshot)
        return True

    def parameter_vector(self) -> torch.Tensor:
        return torch.cat([t.detach().reshape(-1).double().cpu() for t in module_tensors(self.algo.module)])

    def release(self) -> None:
        if self.algo.dist is not None:
            self.algo.dist.close()
        self.algo.stop()


class DataParallelGroup:
    """Creates remote learners 1..L-1 and joins the driver as learner 0."""

    def __init__(self, algo, world_size: int):
        cfg = algo.config
        cpus = cfg.num_cpus_per_learner if isinstance(cfg.num_cpus_per_learner, (int, float)) else 1
        gpus = cfg.num_gpus_per_learner or 0
        state = cfg.get_state()
        self.world_size = world_size
        ensure_ray()   # a plain script's build: a local Ray of our own (else .remote() starts one, noisily)
        self.remotes = [RemoteLearner.options(num_cpus=cpus, num_gpus=gpus).remote(type(algo), state, r, world_size)
                        for r in range(1, world_size)]
        try:   # construction errors here, not as a join that waits for a learner that died
            ray.get([w.__ray_ready__.remote() for w in self.remotes])
        except ray.exceptions.RayActorError as err:
            close_actors(self.remotes)
            raise_remote_device_error(err)   # e.g. env_device='cuda' on a learner given no GPU: that one line
            raise
        init_method = f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"
        joined = [w.join.remote(init_method) for w in self.remotes]
        join_group(algo, 0, world_size, init_method)
        ray.get(joined)

    def start_step(self) -> list:
        return [w.train_step.remote() for w in self.remotes]

    def get_states(self) -> List[Dict[str, Any]]:
        return ray.get([w.get_state.remote() for w in self.remotes])

    def set_states(self, states: List[Dict[str, Any]]) -> None:
        ray.get([w.set_state.remote(s) for w, s in zip(self.remotes, states)])

    def rollback(self) -> None:
        ray.get([w.rollback.remote() for w in self.remotes])

    def parameter_vectors(self) -> List[torch.Tensor]:
        return ray.get([w.parameter_vector.remote() for w in self.remotes])

    def close(self) -> None:
        close_actors(self.remotes)
        self.remotes = []
