"""PQL's Ray back-end: the V-learner and the P-learner are Ray actors, each
on its own device, while the Actor (with the env) stays in the trial process.

Placement: the trial asks for three resource bundles (see
``PQL.default_resource_request``): the driver/Actor, the V-learner
(``num_gpus_per_v_learner``) and the P-learner (``num_gpus_per_p_learner``),
which covers the paper's layouts — all on one GPU (fractional GPUs), Actor on
GPU 0 and learners on GPU 1, or one GPU each. Inside a Tune trial the learner
actors are scheduled into the trial's placement group by bundle index.

Exchange: the driver keeps one ``exchange`` call in flight per learner. A
call delivers the data batches gathered since the previous one, the newest
weights of the other learner, the observation statistics and the learner's
current count limit from the driver's
:class:`~rllib_fast.algorithms.pql.ratio.RatioController`; it returns the learner's
update count (the driver mirrors it), its newest weights (when it published
new ones) and its metrics. Everything is non-blocking: the driver harvests
finished calls with ``ray.wait(timeout=0)``. Inside each learner actor a
background thread runs the learning loop, gated locally by a
:class:`~rllib_fast.algorithms.pql.ratio.LimitGate`.

How the tensors travel (``ray_transport``):

* ``"object_store"``: inside the Ray calls' arguments and results, i.e.
  through host memory (what the reference code does). Works across nodes
  and mixed devices.
* ``"collective"``: point to point over a private torch.distributed group of
  the driver (rank 0, the Actor's device), the V-learner (1) and the
  P-learner (2) (:class:`~rllib_fast.algorithms.pql.tensor_link.TensorLink`): NCCL
  device to device when all three are on CUDA (the paper's 2- and 3-GPU
  layouts), gloo on CPU. The Ray calls then carry only the tensors' layout.
  The batches of one exchange are concatenated and packed into one message
  per dtype (latency, not bandwidth, dominates small batches); the
  V-learner's critic reaches the P-learner through the driver's device (the
  driver forwards what it received), so no tensor touches host memory.
"""
from __future__ import annotations

import collections
import math
import threading
import time
from typing import Any, Dict, List, Optional

import ray
import torch

from ...core.devices import DeviceUnavailableError, raise_remote_device_error, unavailable_device_error
from ...core.distributed import free_port
from ...core.learner_actor import LearnerActor, close_actors
from ...core.local_ray import ensure_ray
from .ratio import LimitGate
from ...core.seeding import PQL_LEARNER, derive_seed
from ...core.state import StateAdapter
from .tensor_link import TensorLink
from .transition_replay import replay_bytes
from .backend import PQLBackend
from .components import CriticLearner, Dims, LiveParams, PolicyLearner, make_critic
from .nets import load_snapshot, snapshot


def _cpu(tree):
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu")
    if isinstance(tree, dict):
        return {k: _cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cpu(v) for v in tree)
    return tree


def _gpu_uuid(device: torch.device) -> Optional[str]:
    """The physical GPU behind ``device`` (processes number their visible GPUs differently)."""
    if device.type != "cuda":
        return None
    return str(torch.cuda.get_device_properties(device).uuid)


@ray.remote
class PQLLearnerHost(LearnerActor):
    """One learner (role 'critic' = V, 'policy' = P) with its loop thread."""

    def __init__(self, role: str, algo_cls, config_state: Dict[str, Any], dims: Dims, rows_per_add: int,
                 capacity: int, device: str, init: Dict[str, Any], live: LiveParams):
        super().__init__(algo_cls, config_state)
        cfg = self.config
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        key = "v_learner_device" if role == "critic" else "p_learner_device"
        err = unavailable_device_error(type(cfg).__name__, key, device)
        if err:   # checked here, on the actor's machine with its GPUs; the driver re-raises the line
            raise DeviceUnavailableError(err)
        self.device = torch.device(device)
        self.role, self.cfg = role, cfg
        self.live = live  # the driver's live values (its configured_lr): a copy, kept current by set_live
        torch.manual_seed(derive_seed(cfg.seed or 0, PQL_LEARNER, 0 if role == "critic" else 1))
        klass = CriticLearner if role == "critic" else PolicyLearner
        self.learner = self.hosted = klass(cfg, dims, self.device, self.live, rows_per_add, capacity)
        # identical initial weights everywhere (sent by the driver)
        if role == "critic":
            load_snapshot(self.learner.critic, init["critic"])
            load_snapshot(self.learner.target, init["critic"])
            load_snapshot(self.learner.policy, init["policy"])
        else:
            load_snapshot(self.learner.policy, init["policy"])
            load_snapshot(self.learner.critic, init["critic"])
        self.gate = LimitGate(cfg.max_wait_s)
        self.inbox: collections.deque = collections.deque()
        self.incoming_weights = None
        self.lock = threading.Lock()
        self.published, self.published_version, self.returned_version = None, 0, 0
        self.running, self.halt, self.stop, self.parked = (threading.Event(), threading.Event(), threading.Event(),
                                                            threading.Event())
        self.halt.set()
        self.error: Optional[str] = None
        self.rows_per_add = rows_per_add
        self.link: Optional[TensorLink] = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def device_name(self) -> str:
        return str(self.device)

    def device_uuid(self) -> Optional[str]:
        return _gpu_uuid(self.device)

    def join(self, address: str, rank: int) -> str:
        """Join the driver's point-to-point group (``ray_transport='collective'``)."""
        self.link = TensorLink(rank, 3, address, self.device)
        return self.link.backend

    # -- control ---------------------------------------------------------------
    def resume(self) -> bool:
        self.halt.clear()                      # `parked` is cleared by pause() (see ThreadBackend.resume)
        self.running.set()
        return True

    def pause(self) -> Dict[str, Any]:
        if not self.error:                     # a failed loop's flag stays set (it will not park again)
            self.parked.clear()                # before `running`: only a park seen after this counts
        self.running.clear()
        self.halt.set()
        self.gate.set_limit(self.gate.limit)   # wake a waiter
        if not self.parked.wait(60) and not self.error:
            raise RuntimeError(f"PQL {self.role} learner did not pause within 60 s")
        self._ingest()
        self._adopt()
        if self.error:
            raise RuntimeError(f"PQL {self.role} learner failed: {self.error}")
        module = self.learner.critic if self.role == "critic" else self.learner.policy
        return {"count": self.learner.updates, "weights": _cpu(snapshot(module)),
                "waited_s": self.gate.waited_s, "overrides": self.gate.overrides}

    def exchange(self, batches: List, limit: float, weights, wire: Optional[Dict[str, Any]] = None
                 ) -> Dict[str, Any]:
        if self.link is not None:
            self.link.settle(0)   # the driver received what the previous reply announced
        if wire is not None:   # the tensors come over the link, the call carries their layout
            batches, weights = self._receive(wire)
        self.inbox.extend(batches)
        if weights is not None:
            with self.lock:
                self.incoming_weights = weights
        self.gate.set_limit(limit)
        out: Dict[str, Any] = {"count": self.learner.updates, "waited_s": self.gate.waited_s,
                               "overrides": self.gate.overrides, "weights": None,
                               "metrics": self.learner.take_metrics().cpu(), "error": self.error}
        with self.lock:
            if self.published_version > self.returned_version:
                if self.link is None:
                    out["weights"] = self.published
                else:
                    out["weights_wire"] = self.link.send(self.published, 0)
                self.returned_version = self.published_version
        return out

    def _receive(self, wire: Dict[str, Any]):
        """Batches (split back into per-step chunks) and weights sent over the link."""
        batches, weights = [], None
        if wire["batch"] is not None:
            keys = wire["keys"]
            got = self.link.recv(wire["batch"], 0)
            moments = tuple(got[len(keys):]) if wire["moments"] else None
            chunks = [t.split(self.rows_per_add) for t in got[:len(keys)]]
            batches = [({k: c[i] for k, c in zip(keys, chunks)}, None) for i in range(len(chunks[0]))]
            batches[-1] = (batches[-1][0], moments)
        if wire["weights"] is not None:
            weights = self.link.recv(wire["weights"], 0)
        return batches, weights

    def set_live(self, lr: float, actor_lr: float, tau: float, grad_clip) -> bool:
        self.live.lr, self.live.actor_lr, self.live.tau, self.live.grad_clip = lr, actor_lr, tau, grad_clip
        return True

    def get_state(self, with_replay: bool) -> Dict[str, Any]:
        return _cpu(self.learner.state_dict(with_replay))

    def set_state(self, state: Dict[str, Any]) -> bool:
        self.learner.load_state_dict(state)
        return True

    def clear_replay(self) -> bool:
        self.learner.replay.clear()
        return True

    def release(self) -> None:
        self.stop.set()
        self.running.set()
        self.halt.set()
        self.gate.set_limit(math.inf)
        self.thread.join(timeout=10)
        if self.link is not None:
            self.link.close()

    # -- loop ------------------------------------------------------------------
    def _ingest(self) -> None:
        moments = None
        while self.inbox:
            batch, batch_moments = self.inbox.popleft()
            self.learner.add({k: v.to(self.device, non_blocking=True) for k, v in batch.items()})
            moments = batch_moments if batch_moments is not None else moments
        if moments is not None:
            self.learner.set_moments(moments)

    def _adopt(self) -> None:
        with self.lock:
            w, self.incoming_weights = self.incoming_weights, None
        if w is not None:
            load_snapshot(self.learner.policy if self.role == "critic" else self.learner.critic, w)

    def _loop(self) -> None:
        torch.set_num_threads(1)
        every = self.cfg.weight_sync_every
        try:
            while not self.stop.is_set():
                if not self.running.is_set():
                    self.parked.set()
                    self.running.wait(0.1)
                    continue
                self._ingest()
                self._adopt()
                if not self.learner.ready():
                    time.sleep(0.002)
                    continue
                self.gate.gate(self.learner.updates, stop=self.halt)
                if self.halt.is_set():
                    continue
                self.learner.update()
                if self.learner.updates % every == 0:
                    module = self.learner.critic if self.role == "critic" else self.learner.policy
                    snap = snapshot(module) if self.link is not None else _cpu(snapshot(module))
                    with self.lock:
                        self.published = snap
                        self.published_version += 1
        except BaseException as err:  # noqa: BLE001 - reported to the driver
            self.error = repr(err)
            self.parked.set()


class RayBackend(PQLBackend):
    ROLES = ("critic", "policy")
    RANKS = {"critic": 1, "policy": 2}   # in the point-to-point group; the driver (Actor) is 0

    @staticmethod
    def resource_bundles(cfg):
        return [{"CPU": cfg.num_cpus_per_pql_learner, "GPU": cfg.num_gpus_per_v_learner},
                {"CPU": cfg.num_cpus_per_pql_learner, "GPU": cfg.num_gpus_per_p_learner}]

    def __init__(self, config, dims, actor, controller, live, *, num_envs: int, capacity: int,
                 device: torch.device):
        from ray.util.placement_group import get_current_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        super().__init__(config, dims, actor, controller, live, num_envs=num_envs, capacity=capacity, device=device)
        cfg = config
        initial_critic = make_critic(cfg, dims)   # the V-learner's first critic (and the P-learner's copy)
        v_fields, p_fields = cfg.replay_fields(dims.obs_dim, dims.act_dim, dims.state_dim)
        cap = (capacity // num_envs) * num_envs
        self.replay_bytes = replay_bytes(cap, v_fields) + replay_bytes(cap, p_fields)
        ensure_ray(log_to_driver=False)   # a plain script's build: a local Ray of our own
        pg = get_current_placement_group()
        init = {"policy": _cpu(snapshot(actor.policy)), "critic": _cpu(snapshot(initial_critic))}
        gpus = {"critic": cfg.num_gpus_per_v_learner, "policy": cfg.num_gpus_per_p_learner}
        devices = {"critic": cfg.v_learner_device, "policy": cfg.p_learner_device}
        self.hosts = {}
        for i, role in enumerate(self.ROLES):
            opts: Dict[str, Any] = {"num_cpus": cfg.num_cpus_per_pql_learner, "num_gpus": gpus[role]}
            if pg is not None and len(pg.bundle_specs) > i + 1:
                opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=i + 1)
            dev = devices[role] if devices[role] != "auto" else ("auto" if gpus[role] > 0 else "cpu")
            self.hosts[role] = PQLLearnerHost.options(**opts).remote(
                role, cfg.algo_class, cfg.get_state(), dims, num_envs, capacity, dev, init, live)
        try:
            self.devices = dict(zip(self.ROLES, ray.get([h.device_name.remote() for h in self.hosts.values()])))
        except ray.exceptions.RayActorError as err:
            close_actors(list(self.hosts.values()))
            raise_remote_device_error(err)   # a learner device its machine lacks: that one line
            raise
        self.pending: Dict[str, list] = {r: [] for r in self.ROLES}
        self.pending_weights: Dict[str, Any] = {r: None for r in self.ROLES}
        self.inflight: Dict[str, Any] = {r: None for r in self.ROLES}
        self.remote_waited = {r: 0.0 for r in self.ROLES}
        self.remote_overrides = {r: 0 for r in self.ROLES}
        self.metrics = {r: torch.zeros(2) for r in self.ROLES}
        self.link: Optional[TensorLink] = None
        if cfg.ray_transport == "collective":
            self._open_link(device)

    def _open_link(self, device: torch.device) -> None:
        kinds = {"Actor": device.type, **{f"{r} learner": torch.device(d).type for r, d in self.devices.items()}}
        if len(set(kinds.values())) > 1:
            self.close()
            raise ValueError(f"PQL: `ray_transport` = 'collective' needs the Actor and both learners on the same "
                             f"kind of device (NCCL for CUDA, gloo for CPU), got {kinds}; allowed: put them on one "
                             f"kind, or use ray_transport='object_store'")
        if device.type == "cuda":
            # NCCL refuses two ranks of one communicator on one physical GPU. Only the driver-V and
            # driver-P pairs ever talk, so the learners may share a GPU (the paper's 2-GPU layout)
            # but neither may share the Actor's.
            actor_gpu = _gpu_uuid(device)
            shared = [r for r, u in zip(self.ROLES, ray.get([self.hosts[r].device_uuid.remote() for r in self.ROLES]))
                      if u == actor_gpu]
            if shared:
                self.close()
                raise ValueError(f"PQL: `ray_transport` = 'collective' (NCCL) needs the learners on other GPUs than "
                                 f"the Actor's, but the {' and '.join(shared)} learner shares it; allowed: "
                                 f"backend='thread' (zero-copy on one GPU), ray_transport='object_store', or "
                                 f"learners on their own GPUs (e.g. env_device='cuda:0' and whole-GPU "
                                 f"num_gpus_per_v_learner / num_gpus_per_p_learner)")
        address = f"{ray.util.get_node_ip_address()}:{free_port()}"
        joined = [self.hosts[r].join.remote(address, self.RANKS[r]) for r in self.ROLES]
        self.link = TensorLink(0, 3, address, device)
        ray.get(joined)

    # -- driver side -------------------------------------------------------------
    def push(self, batch: Dict[str, torch.Tensor], moments) -> None:
        if self.link is None:   # object store: one host copy, serialised with the next call
            moments, batch = _cpu(moments), _cpu(batch)
        self.pending["critic"].append((batch, moments))
        self.pending["policy"].append(({k: batch[k] for k in ("obs", "states", "valid") if k in batch}, moments))

    def _start_exchange(self, role: str):
        """Deliver what is pending for ``role`` in one ``exchange`` call (returns its ref)."""
        batches, weights = self.pending[role], self.pending_weights[role]
        self.pending[role], self.pending_weights[role] = [], None
        limit = self.controller.limit(role)
        if self.link is None:
            return self.hosts[role].exchange.remote(batches, limit, weights)
        dst = self.RANKS[role]
        wire: Dict[str, Any] = {"keys": None, "batch": None, "moments": False, "weights": None}
        if batches:
            keys = list(batches[0][0])
            tensors = [torch.cat([b[k] for b, _ in batches]) for k in keys]
            moments = batches[-1][1]
            if moments is not None:
                tensors += list(moments)
            wire.update(keys=keys, batch=self.link.send(tensors, dst), moments=moments is not None)
        if weights is not None:
            wire["weights"] = self.link.send(weights, dst)
        return self.hosts[role].exchange.remote([], limit, None, wire)

    def sync_actor(self) -> None:
        self.poll(0.0)

    def _harvest(self, role: str, res: Dict[str, Any]) -> None:
        if res.get("error"):
            raise RuntimeError(f"PQL {role} learner failed: {res['error']}")
        self.controller.set_count(role, res["count"])
        self.remote_waited[role], self.remote_overrides[role] = res["waited_s"], res["overrides"]
        self.metrics[role] += res["metrics"]
        w = res["weights"]
        if self.link is not None:
            self.link.settle(self.RANKS[role])   # the learner received what this exchange sent
            if res.get("weights_wire") is not None:
                w = self.link.recv(res["weights_wire"], self.RANKS[role])
        if w is not None:
            if role == "critic":
                self.pending_weights["policy"] = w
            else:
                self.pending_weights["critic"] = w
                load_snapshot(self.actor.policy, w)

    def poll(self, timeout: float = 0.0) -> None:
        """Harvest finished exchanges and start new ones (non-blocking unless ``timeout`` > 0)."""
        refs = [r for r in self.inflight.values() if r is not None]
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
            ready = set(ready)
            for role in self.ROLES:
                ref = self.inflight[role]
                if ref is not None and ref in ready:
                    self.inflight[role] = None
                    self._harvest(role, ray.get(ref))
        for role in self.ROLES:
            if self.inflight[role] is None:
                self.inflight[role] = self._start_exchange(role)

    def gate_actor(self) -> None:
        """The Actor waits (polling the learners) while it is ahead."""
        ctl = self.controller
        t0 = time.monotonic()
        while not ctl.may_proceed("actor"):
            if time.monotonic() - t0 > ctl.max_wait_s:
                ctl.overrides["actor"] += 1
                break
            self.poll(0.002)
        ctl.waited_s["actor"] += time.monotonic() - t0

    def waited_s(self) -> Dict[str, float]:
        # the learners wait at their own gates in their processes: the latest counts they reported
        return {"actor": self.controller.waited_s["actor"], **self.remote_waited}

    def overrides(self) -> Dict[str, int]:
        return {"actor": self.controller.overrides["actor"], **self.remote_overrides}

    def wait_caught_up(self) -> None:
        ctl = self.controller
        t0 = time.monotonic()
        while not ctl.caught_up("actor") and time.monotonic() - t0 < ctl.max_wait_s:
            self.poll(0.002)

    def resume(self) -> None:
        ray.get([h.resume.remote() for h in self.hosts.values()])

    def discard_pending(self) -> None:
        """Drop what waits for the next exchange: transitions of the run before a
        restore and the other role's weights from then. The restored roles hold
        their own copies of each other's networks; delivering these would
        overwrite them with pre-restore weights until the next exchange."""
        self.pending = {r: [] for r in self.ROLES}
        self.pending_weights = {r: None for r in self.ROLES}

    def pause(self) -> None:
        # harvest what is in flight, deliver what is pending, then park both loops
        for role in self.ROLES:
            if self.inflight[role] is not None:
                self._harvest(role, ray.get(self.inflight[role]))
                self.inflight[role] = None
        flush = [self._start_exchange(r) for r in self.ROLES]
        for role, res in zip(self.ROLES, ray.get(flush)):
            self._harvest(role, res)
        results = ray.get([self.hosts[r].pause.remote() for r in self.ROLES])
        for role, res in zip(self.ROLES, results):
            self.controller.set_count(role, res["count"])
            self.remote_waited[role], self.remote_overrides[role] = res["waited_s"], res["overrides"]
        crit, pol = results
        load_snapshot(self.actor.policy, pol["weights"])
        # bring the two learners' copies of each other's network up to date for the next iteration
        self.pending_weights["critic"], self.pending_weights["policy"] = pol["weights"], crit["weights"]

    def take_metrics(self, role: str) -> torch.Tensor:
        out = self.metrics[role].clone()
        self.metrics[role].zero_()
        return out

    def state_components(self) -> Dict[str, Any]:
        with_replay = self.config.checkpoint_replay
        return {key: StateAdapter((lambda r: lambda: self.get_state(r, with_replay))(role),
                                  (lambda r: lambda s: self.set_state(r, s))(role))
                for key, role in (("v", "critic"), ("p", "policy"))}

    def after_restore(self) -> None:
        self.discard_pending()
        self.pause()

    def get_state(self, role: str, with_replay: bool) -> Dict[str, Any]:
        return ray.get(self.hosts[role].get_state.remote(with_replay))

    def set_state(self, role: str, state: Dict[str, Any]) -> None:
        ray.get(self.hosts[role].set_state.remote(state))

    def clear_replays(self) -> None:
        ray.get([h.clear_replay.remote() for h in self.hosts.values()])

    def set_live(self, live) -> None:
        ray.get([h.set_live.remote(live.lr, live.actor_lr, live.tau, live.grad_clip) for h in self.hosts.values()])

    def close(self) -> None:
        close_actors(list(self.hosts.values()))
        self.hosts = {}
        if self.link is not None:
            self.link.close()
            self.link = None
