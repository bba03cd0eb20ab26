"""PQL's thread back-end: V-learner and P-learner loop in threads of the
trial process while the Actor runs in the driving thread.

Tensors are shared, not serialised: a data batch is handed over as a
reference in a deque (each role drains its own inbox, so only the owning
thread ever writes its replay), and networks move as cloned parameter
snapshots through versioned :class:`Mailbox` slots (non-blocking: a reader
adopts a snapshot only when its version is newer). When a role sits on
another device (``v_learner_device``/``p_learner_device``, e.g. the paper's
Actor on cuda:0, learners on cuda:1) the tensors are copied device to device
on ingest/adoption. Torch releases the GIL inside kernels, so the three roles
overlap as far as the cores (or one GPU's streams) allow.

Learner threads run only inside ``training_step`` (paused and parked at its
end), so checkpoints, evaluation and PBT resets see a quiescent state.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Dict

import torch

from ...core.state import StateAdapter
from .backend import PQLBackend
from .components import CriticLearner, PolicyLearner
from .nets import load_snapshot, snapshot


class Mailbox:
    """Latest-value slot with a version number (non-blocking hand-over)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.version = 0
        self.value = None

    def put(self, value) -> None:
        with self._lock:
            self.version += 1
            self.value = value

    def get_if_newer(self, seen: int):
        with self._lock:
            if self.version > seen:
                return self.version, self.value
            return seen, None


class ThreadBackend(PQLBackend):
    def __init__(self, config, dims, actor, controller, live, *, num_envs: int, capacity: int,
                 device: torch.device, learners=None):
        """``learners``: (V, P) objects to run instead of building them (tests)."""
        super().__init__(config, dims, actor, controller, live, num_envs=num_envs, capacity=capacity, device=device)
        self.v, self.p = learners if learners is not None else self._build_learners()
        self.replay_bytes = sum(getattr(getattr(x, "replay", None), "nbytes", 0) for x in (self.v, self.p))
        self.critic_box, self.policy_box = Mailbox(), Mailbox()
        self.inbox = {"critic": collections.deque(), "policy": collections.deque()}
        self.running, self.halt, self.stop = threading.Event(), threading.Event(), threading.Event()
        self.halt.set()
        self.parked = {r: threading.Event() for r in ("critic", "policy")}
        self.errors = []
        self.seen = {"actor": 0, "critic": 0, "policy": 0}
        self.threads = [threading.Thread(target=self._loop, args=(r,), name=f"pql-{r}", daemon=True)
                        for r in ("critic", "policy")]
        for t in self.threads:
            t.start()

    def _build_learners(self):
        cfg, N = self.config, self.num_envs
        vdev = self.device if cfg.v_learner_device == "auto" else torch.device(cfg.v_learner_device)
        pdev = self.device if cfg.p_learner_device == "auto" else torch.device(cfg.p_learner_device)
        v = CriticLearner(cfg, self.dims, vdev, self.live, N, self.capacity)
        p = PolicyLearner(cfg, self.dims, pdev, self.live, N, self.capacity)
        load_snapshot(p.policy, snapshot(self.actor.policy))
        load_snapshot(v.policy, snapshot(self.actor.policy))
        load_snapshot(p.critic, snapshot(v.critic))
        return v, p

    def local_learners(self):
        return self.v, self.p

    # -- driver side -----------------------------------------------------------------
    def gate_actor(self) -> None:
        self.controller.gate("actor")

    def take_metrics(self, role: str) -> torch.Tensor:
        return (self.v if role == "critic" else self.p).take_metrics()

    def state_components(self):
        with_replay = self.config.checkpoint_replay
        return {"v": StateAdapter(lambda: self.v.state_dict(with_replay), self.v.load_state_dict),
                "p": StateAdapter(lambda: self.p.state_dict(with_replay), self.p.load_state_dict),
                # the learners' networks as modules too (generic tools inspect nn.Module components;
                # loading them again after the role states is idempotent)
                "policy_net": self.p.policy, "critic_net": self.v.critic, "critic_target_net": self.v.target}

    def after_restore(self) -> None:
        load_snapshot(self.actor.policy, snapshot(self.p.policy))
        self.policy_box.put(snapshot(self.p.policy))
        self.critic_box.put(snapshot(self.v.critic))

    def push(self, batch: Dict[str, torch.Tensor], moments) -> None:
        self.inbox["critic"].append((batch, moments))
        self.inbox["policy"].append(({k: batch[k] for k in ("obs", "states", "valid") if k in batch}, moments))

    def sync_actor(self) -> None:
        """Adopt the P-learner's newest policy snapshot, if any."""
        self.seen["actor"], snap = self.policy_box.get_if_newer(self.seen["actor"])
        if snap is not None:
            load_snapshot(self.actor.policy, snap)

    def wait_caught_up(self) -> None:
        self._raise()
        self.controller.wait_caught_up("actor")

    def resume(self) -> None:
        # `parked` is cleared by pause(), not here: a learner that saw `running` unset
        # just before this call may still set its flag afterwards, and a flag cleared
        # here could then read as "parked" at the next pause while the learner works
        self.halt.clear()
        self.running.set()

    def pause(self, timeout: float = 60.0) -> None:
        """Park both learner threads, then drain what they have not ingested
        and bring the Actor's policy up to date (all from this thread, safe
        because the learners are parked)."""
        if not self.errors:              # a failed learner's flag stays set (it will not park again)
            for e in self.parked.values():   # before `running`: only a park seen after this counts
                e.clear()
        self.running.clear()
        self.halt.set()
        ctl = self.controller
        with ctl.cond:
            ctl.cond.notify_all()
        deadline = time.monotonic() + timeout
        for r, e in self.parked.items():
            if not e.wait(max(0.0, deadline - time.monotonic())) and not self.errors:
                raise RuntimeError(f"PQL {r} learner did not pause within {timeout}s")
        self._raise()
        for role in ("critic", "policy"):
            self._ingest(role)
        load_snapshot(self.actor.policy, snapshot(self.p.policy))

    def clear_replays(self) -> None:
        """Empty both learners' replays (a restore without them; the learners are
        parked between iterations, and pause() drained their inboxes)."""
        for box in self.inbox.values():
            box.clear()
        self.v.replay.clear()
        self.p.replay.clear()

    def close(self) -> None:
        self.stop.set()
        self.running.set()
        self.halt.set()
        for t in self.threads:
            t.join(timeout=10)

    def _raise(self) -> None:
        if self.errors:
            err = self.errors[0]
            self.errors.clear()
            raise RuntimeError(f"PQL learner thread failed: {err!r}") from err

    # -- learner threads -------------------------------------------------------------------
    def _ingest(self, role: str) -> None:
        learner = self.v if role == "critic" else self.p
        box = self.inbox[role]
        moments = None
        while box:
            batch, moments = box.popleft()
            learner.add({k: v.to(learner.device, non_blocking=True) for k, v in batch.items()})
        if moments is not None:
            learner.set_moments(moments)

    def _sync(self, role: str) -> None:
        if role == "critic":   # V adopts π_p as π_v
            self.seen["critic"], snap = self.policy_box.get_if_newer(self.seen["critic"])
            if snap is not None:
                load_snapshot(self.v.policy, snap)
        else:                  # P adopts the V-learner's critic
            self.seen["policy"], snap = self.critic_box.get_if_newer(self.seen["policy"])
            if snap is not None:
                load_snapshot(self.p.critic, snap)

    def _publish(self, role: str) -> None:
        if role == "critic":
            self.critic_box.put(snapshot(self.v.critic))
        else:
            self.policy_box.put(snapshot(self.p.policy))

    def _loop(self, role: str) -> None:
        torch.set_num_threads(1)
        ctl = self.controller
        every = self.config.weight_sync_every
        try:
            while not self.stop.is_set():
                if not self.running.is_set():
                    self.parked[role].set()
                    self.running.wait(0.1)
                    continue
                learner = self.v if role == "critic" else self.p
                self._ingest(role)
                self._sync(role)
                if not learner.ready():
                    time.sleep(0.002)
                    continue
                ctl.gate(role, stop=self.halt)
                if self.halt.is_set():
                    continue
                learner.update()
                ctl.tick(role)
                if learner.updates % every == 0:
                    self._publish(role)
        except BaseException as err:  # noqa: BLE001 - reported in the driver
            self.errors.append(err)
            self.parked[role].set()
