"""The Ping scheduler (``scheduler.run``): a priority queue of due times.

Each scheduled key (a consumer) has an interval; when its due time comes the ``fire`` callback
runs for it and it is due again one interval later. One ``callLater`` is armed at a time, for
the earliest due entry, so 10,000 consumers cost one timer, not 10,000, and adding, removing or
firing one consumer is O(log n) (removal is lazy: a removed or re-added key's old heap entry is
skipped when it surfaces).

The next due time is computed from the *scheduled* time, not from when the timer actually ran
(``scheduledTime += session_timeout / 3``), so a busy reactor does not make pings drift
later and later; if the reactor fell more than one interval behind, the key is rescheduled one
interval from now instead of firing a burst of catch-up pings.

Time comes from the injected ``IReactorTime``; tests drive it with ``task.Clock``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

log = Logger(namespace="sluice.coordinator.heartbeat")


class HeartbeatScheduler:
    """Calls ``fire(key)`` every ``interval_s`` per key; see the module docstring.

    Invariant: ``_live[key]`` is the token of the key's one valid heap entry; the armed timer
    (if any) is due at or before the earliest valid entry.
    """

    def __init__(self, clock: IReactorTime, fire: Callable[[Hashable], None]) -> None:
        self.clock = clock
        self.fire = fire
        self._heap: list[tuple[float, int, Hashable, float]] = []
        self._live: dict[Hashable, int] = {}
        self._seq = itertools.count()
        self._call: Any = None
        self._call_at = float("inf")
        self.paused = False

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def add(self, key: Hashable, interval_s: float, first_in_s: float | None = None) -> None:
        """Schedule ``key`` (replacing an earlier schedule of it); first due after
        ``first_in_s`` (default: one interval)."""
        if interval_s <= 0:
            raise ValueError(f"interval must be positive, got {interval_s!r}")
        token = next(self._seq)
        self._live[key] = token
        due = self.clock.seconds() + (interval_s if first_in_s is None else first_in_s)
        heapq.heappush(self._heap, (due, token, key, interval_s))
        self._arm()

    def remove(self, key: Hashable) -> None:
        """Stop scheduling ``key`` (``handleConsumerFailure`` step 1)."""
        self._live.pop(key, None)
        # The heap entry stays until it surfaces; compact when most entries are dead so a
        # churning membership cannot grow the heap without bound.
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
            self._heap = [e for e in self._heap if self._live.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def stop(self) -> None:
        """Forget every key and disarm the timer."""
        self._live.clear()
        self._heap.clear()
        self._disarm()

    def _disarm(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._call_at = float("inf")

    def _arm(self) -> None:
        while self._heap and self._live.get(self._heap[0][2]) != self._heap[0][1]:
            heapq.heappop(self._heap)
        if not self._heap:
            self._disarm()
            return
        due = self._heap[0][0]
        if self._call is not None and self._call.active() and self._call_at <= due:
            return
        self._disarm()
        self._call_at = due
        self._call = self.clock.callLater(max(0.0, due - self.clock.seconds()), self._run)

    def _run(self) -> None:
        self._call = None
        self._call_at = float("inf")
        now = self.clock.seconds()
        due_keys: list[Hashable] = []
        while self._heap and self._heap[0][0] <= now:
            due, token, key, interval = heapq.heappop(self._heap)
            if self._live.get(key) != token:
                continue
            nxt = due + interval
            if nxt <= now:
                nxt = now + interval  # fell behind by a whole interval: no burst
            token = next(self._seq)
            self._live[key] = token
            heapq.heappush(self._heap, (nxt, token, key, interval))
            due_keys.append(key)
        # Fire after rescheduling so a callback may remove (or re-add) its own key.
        if not self.paused:
            for key in due_keys:
                if key in self._live:
                    try:
                        self.fire(key)
                    except Exception:
                        log.failure("heartbeat callback for {key} failed", key=key)
        self._arm()
