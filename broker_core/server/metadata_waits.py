"""Requests that wait for the metadata cache to reach a state: a Metadata request on a
just-started broker (its first UpdateMetadata), CreateTopics (leaders for the new topics),
DeleteTopics (the topics gone), CreatePartitions (the new partitions known).

Invariants: every wait fires exactly once, with None, either at the first metadata update
after which its condition holds (or at once, if it holds already) or at its timeout on the
injected clock; a fired wait is forgotten and its timer cancelled, so waits never pile up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer


class MetadataWaits:
    """The waits of one broker's request handler; ``changed`` is called after every
    UpdateMetadata the broker applies."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self._waiters: list[tuple[Callable[[], bool], defer.Deferred]] = []

    def wait(self, condition: Callable[[], bool], timeout_ms: int) -> defer.Deferred:
        """Fires (with None) when ``condition()`` holds after a metadata update, or on timeout."""
        d: defer.Deferred = defer.Deferred()
        if condition():
            d.callback(None)
            return d
        entry = (condition, d)
        self._waiters.append(entry)

        def expire() -> None:
            if entry in self._waiters:
                self._waiters.remove(entry)
                d.callback(None)

        call = self.clock.callLater(timeout_ms / 1000.0, expire)
        d.addBoth(lambda r: (call.active() and call.cancel(), r)[1])
        return d

    def changed(self) -> None:
        """The metadata cache changed: fire the waits whose condition now holds."""
        for entry in list(self._waiters):
            condition, d = entry
            if condition():
                self._waiters.remove(entry)
                d.callback(None)
