"""Which connections have been idle too long, Kafka's ``connections.max.idle.ms``, sans-IO.

A connection is *active* when bytes arrive on it and when a response leaves it (the moment its
last request left flight). It is *idle* when nothing has been active for ``idle_s`` and it is not
busy: a request in flight (a long-poll Fetch, an acks=all Produce waiting for its replicas) or a
coordinator channel (the coordinator pings it and closes it itself when the consumer stops
answering) is never idle, however long it stays quiet.

The tracker is an LRU, like Kafka's ``Selector``: connections in order of last activity, so a
sweep looks only at the ones that may have expired: it stops at the first connection active
within ``idle_s``. A busy connection found at the front is moved to the back as if active now
(it is looked at again one ``idle_s`` later), so a sweep costs O(expired + busy found), not O(all).

Invariants: each tracked connection appears once, ordered by its last activity (the order of
:meth:`touch` calls); :meth:`expired` returns only connections not busy and inactive for at least
``idle_s``, and forgets them; :meth:`next_deadline` is the earliest time a sweep can find one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable


class IdleTracker:
    """Connections by last activity; see the module docstring."""

    def __init__(self, idle_s: float) -> None:
        if idle_s <= 0:
            raise ValueError("idle_s must be positive")
        self.idle_s = idle_s
        self._last: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._last)

    def touch(self, conn: Hashable, now: float) -> None:
        """``conn`` was active at ``now`` (starts tracking it)."""
        self._last[conn] = now
        self._last.move_to_end(conn)

    def forget(self, conn: Hashable) -> None:
        self._last.pop(conn, None)

    def next_deadline(self) -> float | None:
        """When the least recently active connection becomes idle; None when none is tracked."""
        for last in self._last.values():
            return last + self.idle_s
        return None

    def expired(self, now: float, busy: Callable[[Hashable], bool]) -> list[Hashable]:
        """The connections idle at ``now`` (no longer tracked once returned)."""
        out = []
        while self._last:
            conn, last = next(iter(self._last.items()))
            if now - last < self.idle_s:
                break
            if busy(conn):
                self.touch(conn, now)
                continue
            del self._last[conn]
            out.append(conn)
        return out
