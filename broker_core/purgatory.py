"""Kafka's delayed-operation purgatory (``DelayedOperation.scala``), on the injected clock.

Contract:

- ``on_complete()`` runs exactly once per operation, guarded by ``force_complete()``, which
  returns True only for its first caller (the condition or the timer, whichever comes first);
- ``try_complete_else_watch(op, keys)`` tries once, watches the operation under every key, then
  tries again: a trigger arriving between the first try and the watch would otherwise be missed;
- ``check_and_complete(key)`` re-tries the operations watched under ``key`` (after an append or a
  high-watermark move);
- expiry runs ``on_expiration()`` after ``on_complete()`` when the timer wins.

Timers: one ``callLater`` per delayed operation, cancelled when it completes. At Python request
rates this is cheap enough (Twisted keeps delayed calls in a heap: O(log n) insert and cancel);
``bench/purgatory.py`` measures it. Completed operations are purged from watch lists lazily.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from twisted.logger import Logger

log = Logger(namespace="sluice.purgatory")


class DelayedOperation:
    """An operation that completes on a condition or expires after ``timeout_s``."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = max(0.0, timeout_s)
        self.completed = False
        self._timer: Any = None

    def force_complete(self) -> bool:
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        try:
            self.on_complete()
        except Exception:
            log.failure("delayed operation {op!r} failed in on_complete", op=self)
        return True

    def _expire(self) -> None:
        self._timer = None
        if self.force_complete():
            try:
                self.on_expiration()
            except Exception:
                log.failure("delayed operation {op!r} failed in on_expiration", op=self)

    def cancel(self) -> None:
        """Drop the operation without completing it."""
        self.completed = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def try_complete(self) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_complete(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_expiration(self) -> None:
        pass


class Purgatory:
    """Delayed operations keyed by watch keys; see the module docstring."""

    def __init__(self, name: str, clock: Any, *, metrics: Any = None,
                 purge_interval: int = 1000) -> None:
        self.name = name
        self.clock = clock
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._delayed: set[DelayedOperation] = set()
        self._since_purge = 0
        if metrics is not None and hasattr(metrics, "purgatory_size"):
            metrics.purgatory_size.labels(purgatory=name).set_function(self.watched_total)
            metrics.purgatory_delayed.labels(purgatory=name).set_function(lambda: self.delayed)

    @property
    def delayed(self) -> int:
        return len(self._delayed)

    def watched(self, key: Hashable) -> int:
        return sum(1 for op in self._watchers.get(key, ()) if not op.completed)

    def watched_total(self) -> int:
        return sum(len(v) for v in self._watchers.values())

    def _safe_try(self, op: DelayedOperation) -> bool:
        try:
            return op.try_complete()
        except Exception:
            log.failure("delayed operation {op!r} failed in try_complete", op=op)
            op.force_complete()
            return True

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """True if ``op`` completed now; otherwise it waits under ``keys`` until triggered or
        expired."""
        keys = list(keys)
        if self._safe_try(op):
            return True
        for k in keys:
            self._watchers.setdefault(k, []).append(op)
        # A trigger may have landed between the first try and the watch: try once more.
        if self._safe_try(op) or op.completed:
            return True
        self._delayed.add(op)
        op._timer = self.clock.callLater(op.timeout_s, self._expired, op)
        self._since_purge += 1
        if self._since_purge >= self.purge_interval:
            self.purge()
        return False

    def _expired(self, op: DelayedOperation) -> None:
        self._delayed.discard(op)
        op._expire()

    def check_and_complete(self, key: Hashable) -> int:
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        for op in list(ops):
            if op.completed:
                continue
            if self._safe_try(op):
                done += 1
        live = [op for op in self._watchers.get(key, []) if not op.completed]
        if live:
            self._watchers[key] = live
        else:
            self._watchers.pop(key, None)
        self._delayed = {op for op in self._delayed if not op.completed} if done else self._delayed
        return done

    def purge(self) -> None:
        self._since_purge = 0
        for key in list(self._watchers):
            live = [op for op in self._watchers[key] if not op.completed]
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]
        self._delayed = {op for op in self._delayed if not op.completed}

    def shutdown(self) -> None:
        """Cancel every waiting operation's timer; the operations are not completed."""
        for op in list(self._delayed):
            op.cancel()
        self._delayed.clear()
        self._watchers.clear()
