"""Speed-ratio control between concurrently running components, by waiting.

PQL (Li et al. 2023, §3.2) fixes the relative speeds of its three processes:
β_a:v = f_actor / f_critic (default 1:8, eight critic updates per vectorised
env step) and β_p:v = f_policy / f_critic (default 1:2). Nothing runs in a
fixed lock-step loop: every component runs freely and the one that is ahead
*waits*.

Each constraint ``(x, y, r)`` asks ``f_x / f_y = r``. The controller keeps
x's measured lead in units of y, ``e = Δx / r - Δy``, accumulated over the
recent past: ``e`` is clamped to ``±depth``, so history older than about
``depth`` units of y stops counting — a sliding window in count form, which
(unlike a time window) neither drifts when the components pause together nor
forgets a deficit that still has to be worked off. x may do one more unit
while ``e + 1/r <= slack``, y while ``e - 1 >= -slack``. The two conditions
never block at the same time and a component only waits for one that is
behind it, so there is no cycle of waiting: the system cannot deadlock while
its components are alive. A component that stalls (crashed, slowed, starved)
is handled by ``max_wait_s``: a waiter proceeds anyway after that long, the
override is counted, and the others keep making (throttled) progress.

Achieved rates are also measured over a time window (``window_s``) for
reporting, and the seconds each component spent waiting are accumulated.

The controller is thread-safe: one lock and one condition variable that
every ``tick`` notifies, so waiters wake at once instead of polling. For
components in other processes the driver keeps a mirror: it sets their counts
from their reports (``set_count``) and hands them ``limit(name)``, the count
they may reach, which they enforce locally with :class:`LimitGate`.
"""
from __future__ import annotations

import collections
import math
import threading
import time
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple

Constraint = Tuple[str, str, float]


class RatioController:
    def __init__(self, names: Sequence[str], constraints: Iterable[Constraint], slack: float = 16.0,
                 depth: Optional[float] = None, window_s: float = 5.0, max_wait_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.names = tuple(names)
        self.constraints = [(x, y, float(r)) for x, y, r in constraints]
        for x, y, r in self.constraints:
            if x not in self.names or y not in self.names or not r > 0:
                raise ValueError(f"bad constraint {(x, y, r)}; components are {self.names} and r must be > 0")
        self.slack = float(slack)
        self.depth = float(depth) if depth is not None else 4.0 * self.slack
        if self.depth < self.slack:
            raise ValueError(f"depth {self.depth} must be >= slack {self.slack}")
        self.window_s, self.max_wait_s, self.clock = float(window_s), float(max_wait_s), clock
        self.cond = threading.Condition()
        self.counts: Dict[str, float] = {n: 0.0 for n in self.names}
        self.excess = [0.0 for _ in self.constraints]
        self.waited_s: Dict[str, float] = {n: 0.0 for n in self.names}
        self.overrides: Dict[str, int] = {n: 0 for n in self.names}
        self.armed = False   # before arming (e.g. replay warm-up) nobody waits
        self._snaps: collections.deque = collections.deque()
        self._closed = False

    # -- counting -------------------------------------------------------------
    def _advance(self, name: str, k: float) -> None:
        self.counts[name] += k
        if self.armed:
            for i, (x, y, r) in enumerate(self.constraints):
                if name == x:
                    self.excess[i] += k / r
                elif name == y:
                    self.excess[i] -= k
                self.excess[i] = min(self.depth, max(-self.depth, self.excess[i]))
        now = self.clock()
        self._snaps.append((now, dict(self.counts)))
        while len(self._snaps) > 2 and now - self._snaps[1][0] >= self.window_s:
            self._snaps.popleft()
        self.cond.notify_all()

    def tick(self, name: str, k: float = 1.0) -> None:
        with self.cond:
            self._advance(name, k)

    def set_count(self, name: str, value: float) -> None:
        """Mirror a remote component's (monotone) count (driver side)."""
        with self.cond:
            if value > self.counts[name]:
                self._advance(name, value - self.counts[name])

    def arm(self, on: bool = True) -> None:
        """Start (or stop) enforcing, from a clean balance."""
        with self.cond:
            self.armed = on
            self.excess = [0.0 for _ in self.constraints]
            self.cond.notify_all()

    def close(self) -> None:
        """Release every waiter for good (shutdown)."""
        with self.cond:
            self._closed = True
            self.cond.notify_all()

    # -- the rule ---------------------------------------------------------------
    def _limit(self, name: str) -> float:
        if not self.armed or self._closed:
            return math.inf
        lim = math.inf
        c = self.counts[name]
        for (x, y, r), e in zip(self.constraints, self.excess):
            if name == x:    # e + (Δ)/r <= slack
                lim = min(lim, c + r * (self.slack - e))
            elif name == y:  # e - Δ >= -slack
                lim = min(lim, c + e + self.slack)
        return lim

    def limit(self, name: str) -> float:
        """The count ``name`` may reach now (inf when unconstrained or unarmed)."""
        with self.cond:
            return self._limit(name)

    def may_proceed(self, name: str, k: float = 1.0) -> bool:
        with self.cond:
            return self.counts[name] + k <= self._limit(name) + 1e-9

    def gate(self, name: str, k: float = 1.0, stop: Optional[threading.Event] = None) -> float:
        """Block until ``name`` may do ``k`` more units (or ``max_wait_s`` has
        passed, or ``stop`` is set); returns the seconds waited."""
        t0 = self.clock()
        with self.cond:
            while self.counts[name] + k > self._limit(name) + 1e-9:
                if stop is not None and stop.is_set():
                    break
                left = self.max_wait_s - (self.clock() - t0)
                if left <= 0:
                    self.overrides[name] += 1
                    break
                self.cond.wait(min(left, 0.05))
            waited = self.clock() - t0
            self.waited_s[name] += waited
            return waited

    def _caught_up(self, source: str) -> bool:
        for (x, y, r), e in zip(self.constraints, self.excess):
            if x == source and e > 0:           # y still owes work for what the source did
                return False
            if x != source and y != source and e < -1.0 / r:   # x lags y by more than one unit
                return False
        return True

    def caught_up(self, source: str) -> bool:
        with self.cond:
            return not self.armed or self._caught_up(source)

    def wait_caught_up(self, source: str, timeout: Optional[float] = None) -> bool:
        """Wait (at most ``timeout``, default ``max_wait_s``) until every other
        component has done the work the ratios owe to ``source``'s progress
        (used at the end of an iteration so it ends balanced)."""
        timeout = self.max_wait_s if timeout is None else timeout
        t0 = self.clock()
        with self.cond:
            while self.armed and not self._caught_up(source):
                left = timeout - (self.clock() - t0)
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.05))
            return True

    # -- reporting ----------------------------------------------------------------
    def window_rates(self) -> Dict[str, float]:
        """Units per second of each component over the last ``window_s``."""
        with self.cond:
            if len(self._snaps) < 2:
                return {n: 0.0 for n in self.names}
            (t0, c0), (t1, c1) = self._snaps[0], self._snaps[-1]
            dt = max(1e-9, t1 - t0)
            return {n: (c1[n] - c0[n]) / dt for n in self.names}

    def counters(self) -> Dict[str, Dict[str, float]]:
        """A consistent copy of the cumulative counters: units done (``counts``),
        seconds waited at the gate (``waited_s``) and waits cut short at
        ``max_wait_s`` (``overrides``), each per component."""
        with self.cond:
            return {"counts": dict(self.counts), "waited_s": dict(self.waited_s), "overrides": dict(self.overrides)}

    def state_dict(self) -> Dict[str, object]:
        with self.cond:
            return {"counts": dict(self.counts), "excess": list(self.excess), "armed": self.armed,
                    "waited_s": dict(self.waited_s), "overrides": dict(self.overrides)}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        with self.cond:
            self.counts.update(state["counts"])
            self.excess = list(state["excess"])
            self.armed = bool(state["armed"])
            self.waited_s.update(state["waited_s"])
            self.overrides.update(state["overrides"])
            self._snaps.clear()


class LimitGate:
    """Local end of a mirrored controller: a component in another process
    waits until its own count is below the latest limit the driver sent (or
    ``max_wait_s`` passes, so a silent driver cannot freeze it)."""

    def __init__(self, max_wait_s: float = 1.0):
        self.cond = threading.Condition()
        self.limit = math.inf
        self.max_wait_s = float(max_wait_s)
        self.waited_s = 0.0
        self.overrides = 0

    def set_limit(self, limit: float) -> None:
        with self.cond:
            self.limit = limit
            self.cond.notify_all()

    def gate(self, count: float, k: float = 1.0, stop: Optional[threading.Event] = None) -> float:
        t0 = time.monotonic()
        with self.cond:
            while count + k > self.limit + 1e-9:
                if stop is not None and stop.is_set():
                    break
                left = self.max_wait_s - (time.monotonic() - t0)
                if left <= 0:
                    self.overrides += 1
                    break
                self.cond.wait(min(left, 0.05))
        waited = time.monotonic() - t0
        self.waited_s += waited
        return waited
