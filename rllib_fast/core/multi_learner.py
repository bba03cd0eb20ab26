"""Learners 1..L-1 of a data-parallel algorithm, as Ray actors.

The driving algorithm is learner 0: it keeps its own share of the envs, its
module and optimizer, so ``get_module()``, evaluation and checkpoints work as
with one learner. Each remote learner builds the same algorithm class locally
with ``num_envs / L`` envs and its own seed, joins the torch.distributed
group (gloo on CPU, NCCL on CUDA), and receives learner 0's parameters and
statistics, after which every update is identical on all learners.

Actors ask Ray for ``num_cpus_per_learner``/``num_gpus_per_learner``; inside a
Tune trial they land in the trial's placement group (see
``FastAlgorithm.default_resource_request``), on one machine or several.
"""
from __future__ import annotations

from typing import Any, Dict, List

import ray
import torch

from .distributed import DistributedContext, free_port


def close_actors(actors: list, timeout_s: float = 30.0) -> None:
    """Ask actors to ``close()`` (release envs, process groups, threads), then
    kill them: best effort, so shutdown never hangs on a wedged actor."""
    try:
        ray.get([a.close.remote() for a in actors], timeout=timeout_s)
    except Exception:  # noqa: BLE001 - best effort at shutdown
        pass
    for a in actors:
        ray.kill(a)


def learner_config(config: Any, rank: int, world_size: int):
    """Learner ``rank``'s config: its env share and its own seed."""
    cfg = config.copy(copy_frozen=False)
    cfg.num_learners = 0
    cfg.num_envs = config.num_envs // world_size
    cfg.seed = (config.seed if config.seed is not None else 0) + 1_000_003 * rank
    cfg.evaluation_interval = None
    return cfg


def module_tensors(module: torch.nn.Module) -> List[torch.Tensor]:
    """Parameters and buffers (normaliser statistics included) in a fixed order."""
    return [t for _, t in sorted({**dict(module.named_parameters()), **dict(module.named_buffers())}.items())]


@ray.remote
class RemoteLearner:
    def __init__(self, algo_cls, config_state: Dict[str, Any], rank: int, world_size: int):
        torch.set_num_threads(1)
        cfg = algo_cls.get_default_config().from_state(config_state)
        self.rank, self.world_size = rank, world_size
        self.algo = algo_cls(config=learner_config(cfg, rank, world_size))

    def join(self, init_method: str) -> bool:
        self.algo.dist = DistributedContext(self.rank, self.world_size, init_method, self.algo.device)
        self.algo.dist.broadcast_(module_tensors(self.algo.module), src=0)
        return True

    def train_step(self) -> Dict[str, float]:
        algo = self.algo
        algo.training_step()
        summary = {k: float(v) for k, v in algo.tracker.summary().items()}
        summary["episodes_in_window"] = float(algo.tracker.filled)
        return summary

    def get_state(self) -> Dict[str, Any]:
        return self.algo.get_state()

    def set_state(self, state: Dict[str, Any]) -> None:
        self.algo.set_state(state)

    def parameter_vector(self) -> torch.Tensor:
        return torch.cat([t.detach().reshape(-1).double().cpu() for t in module_tensors(self.algo.module)])

    def close(self) -> None:
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
        self.remotes = [RemoteLearner.options(num_cpus=cpus, num_gpus=gpus).remote(type(algo), state, r, world_size)
                        for r in range(1, world_size)]
        init_method = f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"
        joined = [w.join.remote(init_method) for w in self.remotes]
        algo.dist = DistributedContext(0, world_size, init_method, algo.device)
        algo.dist.broadcast_(module_tensors(algo.module), src=0)
        ray.get(joined)

    def start_step(self) -> list:
        return [w.train_step.remote() for w in self.remotes]

    def get_states(self) -> List[Dict[str, Any]]:
        return ray.get([w.get_state.remote() for w in self.remotes])

    def set_states(self, states: List[Dict[str, Any]]) -> None:
        ray.get([w.set_state.remote(s) for w, s in zip(self.remotes, states)])

    def parameter_vectors(self) -> List[torch.Tensor]:
        return ray.get([w.parameter_vector.remote() for w in self.remotes])

    def close(self) -> None:
        close_actors(self.remotes)
        self.remotes = []
