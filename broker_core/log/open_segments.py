"""The least-recently-used set of inactive segments whose ``.log`` is open.

An active segment (the last of its log, the one appended to) keeps its ``.log`` descriptor for
its whole life and is never in this set. A rolled segment is only read — old fetches, ListOffsets,
recovery — so its descriptor is opened when a read needs it and handed to this set, which closes
the least recently used one once more than ``capacity`` are open. One set is shared by every log
of a :class:`~broker_core.log.manager.LogManager`, so a broker holds about one descriptor per
partition plus at most ``capacity``, however many segments it keeps.

Threading: used by the logs' owning thread (the reactor). A segment closes an evicted descriptor
under its own lock, so a flush thread duplicating it never meets a closed or reused number.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

# Default for ``log.open.segments.max``: descriptors of rolled segments kept open.
DEFAULT_MAX_OPEN_SEGMENTS = 1000


class _Evictable(Protocol):
    def release_fd(self) -> None: ...


class OpenSegments:
    """LRU of inactive segments holding an open ``.log`` descriptor.

    Invariant: at most ``capacity`` segments are in the set once :meth:`add` returns; a segment
    in the set holds an open descriptor and is not active.
    """

    def __init__(self, capacity: int = DEFAULT_MAX_OPEN_SEGMENTS) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"log.open.segments.max must be an integer >= 1, got {capacity!r}")
        self.capacity = capacity
        self._lru: OrderedDict[_Evictable, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # descriptors handed to the set (reopens included)
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._lru)

    def add(self, segment: _Evictable) -> None:
        """``segment`` just opened its descriptor (or became inactive with one): most recently
        used. Closes the least recently used ones past the capacity."""
        victims = []
        with self._lock:
            self._lru[segment] = None
            self._lru.move_to_end(segment)
            self.opened += 1
            while len(self._lru) > self.capacity:
                victims.append(self._lru.popitem(last=False)[0])
            self.evicted += len(victims)
        for victim in victims:
            victim.release_fd()

    def touch(self, segment: _Evictable) -> None:
        """``segment`` was just read."""
        with self._lock:
            if segment in self._lru:
                self._lru.move_to_end(segment)

    def discard(self, segment: _Evictable) -> None:
        """``segment`` closed its descriptor itself or became active."""
        with self._lock:
            self._lru.pop(segment, None)
