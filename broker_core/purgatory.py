"""Kafka's delayed-operation purgatory (``DelayedOperation.scala``) on an injected clock.

A *delayed operation* is a request that cannot be answered yet: a produce with ``acks=all``
waiting for the high watermark, a fetch waiting for ``min_bytes`` (long poll), or, for the
consumer coordinator, a Ping / StopFetcher / StartFetcher waiting for the consumer's answer. It
completes when its condition holds or when its timeout expires, whichever comes first, and it
answers exactly once.

The contract (kept from Kafka):

- a subclass implements ``try_complete()``: check the condition and, if it holds, call
  ``force_complete()`` and return its result;
- ``force_complete()`` returns True only for its first caller and runs ``on_complete()`` exactly
  once, behind the ``completed`` flag; the condition, an expiry or any other code may call it;
- expiry is ``if force_complete(): on_expiration()``: ``on_complete()`` runs first (it answers
  the request), then ``on_expiration()`` (typically a metric or a log line);
- ``Purgatory.try_complete_else_watch(op, keys)`` tries, watches under every key, tries again,
  then arms the timeout; ``check_and_complete(key)`` re-tries what is watched under ``key``
  after something that may satisfy it (an append, a high-watermark move, a response).

Timeouts live in a :class:`~broker_core.timing_wheel.TimingWheel` (O(1) add and cancel, one
``callLater`` for the whole purgatory). Operations completed by a trigger stay in the watch lists
of their other keys until a lazy purge removes them (Kafka's ``purgeInterval``).

Failures: an exception from ``try_complete`` is logged and the operation is completed at once
(``on_complete`` answers with whatever it has; ``on_expiration`` does not run), so a broken
condition neither spams the log on every trigger nor leaves a client waiting for its timeout.
Exceptions from ``on_complete`` and ``on_expiration`` are logged. None of them escapes into the
purgatory's bookkeeping or into the code that triggered the check.

Threading: none; everything runs on the reactor thread. Any of the callbacks may re-enter the
purgatory (complete other operations, trigger keys, watch new operations).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Protocol

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from broker_core.timing_wheel import DEFAULT_TICK_S, DEFAULT_WHEEL_SIZE, TimerTask, TimingWheel

log = Logger(namespace="sluice.purgatory")


class PurgatoryClosedError(RuntimeError):
    """An operation was offered to a purgatory after :meth:`Purgatory.shutdown`."""


class DelayedOperation(TimerTask):
    """A request that completes on a condition or expires after ``timeout_s`` seconds.

    Invariant: ``on_complete()`` runs at most once, and only through the first successful
    ``force_complete()``; ``completed`` is True from that moment on (and also after
    ``cancel()``, which retires the operation without running ``on_complete()``).
    Subclasses implement ``try_complete``, ``on_complete`` and, optionally, ``on_expiration``.
    """

    def __init__(self, timeout_s: float) -> None:
        if timeout_s != timeout_s:
            raise ValueError("timeout_s must be a number, got NaN")
        # Timeouts come from clients (a produce's timeout_ms, a fetch's max_wait_ms); as in
        # Kafka, a negative one means "do not wait", not an error.
        self.timeout_s = max(0.0, float(timeout_s))
        self.completed = False
        self.cancelled = False
        self._purgatory: Purgatory | None = None
        self._watch_entries = 0

    # -- for subclasses --------------------------------------------------------------------------

    def try_complete(self) -> bool:
        """Check the condition; if it holds, ``return self.force_complete()``; else False."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Answer the request; runs exactly once, on completion or on expiry."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Runs after ``on_complete()`` when the timeout, not the condition, completed it."""

    # -- the contract ----------------------------------------------------------------------------

    def force_complete(self) -> bool:
        """Complete now. True only for the first caller, who thereby ran ``on_complete()``."""
        if self.completed:
            return False
        self.completed = True
        self._retire()
        try:
            self.on_complete()
        except Exception:
            log.failure("delayed operation {op!r} raised in on_complete", op=self)
        return True

    def run(self) -> None:
        """The timer's entry point: the operation has expired."""
        if self.force_complete():
            try:
                self.on_expiration()
            except Exception:
                log.failure("delayed operation {op!r} raised in on_expiration", op=self)

    def cancel(self) -> bool:
        """Retire the operation without completing it: ``on_complete()`` and
        ``on_expiration()`` will never run. Use it when nobody is waiting for the answer any
        more (the connection closed). Returns False if it had already completed."""
        if self.completed:
            return False
        self.completed = True
        self.cancelled = True
        self._retire()
        return True

    def _retire(self) -> None:
        TimerTask.cancel(self)  # leave the timing wheel, O(1)
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._retired(self)

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "completed" if self.completed else "pending"
        return f"<{type(self).__name__} timeout={self.timeout_s}s {state}>"


class PurgatoryMetrics(Protocol):
    """What a purgatory needs of the broker's metrics (``broker_core.metrics.BrokerMetrics``
    is one): somewhere to export its counts, read at scrape time."""

    def track_purgatory(self, name: str, *, size: Callable[[], float],
                        delayed: Callable[[], float]) -> None:
        """Export the purgatory ``name``'s ``size`` and ``delayed`` counts."""


class Purgatory:
    """Delayed operations watched under keys, completed by triggers or expired by a timing wheel.

    Invariants: an operation is watched by at most one purgatory, under each of its keys at most
    once; every operation in the timing wheel is incomplete and watched; ``size`` counts the
    watch-list entries, of which ``_stale_entries`` belong to retired operations not yet purged.

    ``metrics`` (a :class:`PurgatoryMetrics`, the broker's metrics) gets the gauges
    ``sluice_purgatory_size{purgatory=name}`` and
    ``sluice_purgatory_delayed_operations{purgatory=name}``. ``purge_interval`` is Kafka's
    ``*.purgatory.purge.interval.requests``: the watch lists are swept once more than that many
    entries belong to retired operations.
    """

    def __init__(self, name: str, clock: IReactorTime, *, metrics: PurgatoryMetrics | None = None,
                 purge_interval: int = 1000, tick_s: float = DEFAULT_TICK_S,
                 wheel_size: int = DEFAULT_WHEEL_SIZE) -> None:
        if purge_interval < 1:
            raise ValueError(f"purge_interval must be >= 1, got {purge_interval!r}")
        self.name = name
        self.clock = clock
        self.purge_interval = purge_interval
        self.timer = TimingWheel(clock, tick_s=tick_s, wheel_size=wheel_size)
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._entries = 0
        self._stale_entries = 0
        self._closed = False
        if metrics is not None:
            metrics.track_purgatory(name, size=lambda: self.size, delayed=lambda: self.delayed)

    # -- counts ----------------------------------------------------------------------------------

    @property
    def delayed(self) -> int:
        """Operations waiting for their condition or their timeout."""
        return len(self.timer)

    @property
    def size(self) -> int:
        """Watch-list entries, including retired operations not purged yet (Kafka's
        ``PurgatorySize``); an operation watched under three keys counts three times."""
        return self._entries

    def watched(self, key: Hashable) -> int:
        """Incomplete operations watched under ``key``."""
        return sum(1 for op in self._watchers.get(key, ()) if not op.completed)

    # -- operations ------------------------------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, watch_keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if its condition holds (True); otherwise watch it under every
        key and arm its timeout (False). With ``timeout_s == 0`` an operation that cannot
        complete expires at once and this returns False.

        Raises ValueError for an empty key list or an operation already given to a purgatory,
        and :class:`PurgatoryClosedError` after :meth:`shutdown`.
        """
        if self._closed:
            raise PurgatoryClosedError(f"purgatory {self.name!r} is shut down; cannot watch {op!r}")
        keys = list(dict.fromkeys(watch_keys))
        if not keys:
            raise ValueError(f"{op!r} needs at least one watch key")
        if op._purgatory is not None:
            raise ValueError(f"{op!r} is already watched by purgatory {op._purgatory.name!r}")
        if op.completed or self._safe_try(op):
            return True
        # Watch first, then try again. A trigger that fires after the first try but before the
        # operation is on a key's list walks that list without seeing it; trying once more
        # after it is on every list closes the gap: a change that happened before this point
        # is seen by the second try, a change after it triggers the watch. (On one thread the
        # gap only opens through re-entrancy, e.g. a try_complete that itself causes a
        # trigger, but the order costs nothing and keeps the reasoning local.)
        op._purgatory = self
        for key in keys:
            if op.completed:
                break  # completed by a callback that ran while we were watching
            self._watchers.setdefault(key, []).append(op)
            op._watch_entries += 1
            self._entries += 1
        if op.completed or self._safe_try(op):
            return True
        deadline = self.clock.seconds() + op.timeout_s
        if not self.timer.add(op, deadline):
            op.run()  # already expired (a zero timeout): expire it now
        self._maybe_purge()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Re-try the operations watched under ``key``; returns how many it completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        # Walk a snapshot: completions may re-enter and watch new operations under this key
        # (those were just tried by their own try_complete_else_watch, so none is missed).
        for op in tuple(ops):
            if not op.completed and self._safe_try(op):
                completed += 1
        self._sweep(key)
        return completed

    def check_and_complete_keys(self, keys: Iterable[Hashable]) -> int:
        """:meth:`check_and_complete` for many keys at once, trying each operation once however
        many of the keys it is watched under (after a command that changed thousands of
        partitions, an operation watching all of them is tried once, not thousands of times).
        Returns how many it completed."""
        keys = [k for k in dict.fromkeys(keys) if k in self._watchers]
        ops: dict[int, DelayedOperation] = {}
        for key in keys:
            for op in self._watchers[key]:
                if not op.completed:
                    ops.setdefault(id(op), op)
        completed = 0
        for op in ops.values():
            if not op.completed and self._safe_try(op):
                completed += 1
        for key in keys:
            self._sweep(key)
        return completed

    def purge(self) -> int:
        """Drop retired operations from every watch list now; returns the entries removed."""
        removed = 0
        for key in list(self._watchers):
            removed += self._sweep(key)
        return removed

    def shutdown(self) -> list[DelayedOperation]:
        """Stop the purgatory: disarm the timer and forget every operation.

        Waiting operations are neither completed nor expired (no ``on_complete``, so no answer
        is sent: the broker is going away and closes the connections). They are returned, and
        their number is logged, so nothing is dropped unnoticed; the owner may still answer
        them with ``force_complete()``. Afterwards :meth:`try_complete_else_watch` raises
        :class:`PurgatoryClosedError`; :meth:`check_and_complete` finds nothing.
        """
        self._closed = True
        waiting = [op for op in self.timer.stop() if isinstance(op, DelayedOperation)]
        for ops in self._watchers.values():
            for op in ops:
                op._purgatory = None
        self._watchers.clear()
        self._entries = self._stale_entries = 0
        if waiting:
            log.info("purgatory {name} shut down with {n} operations still waiting",
                     name=self.name, n=len(waiting))
        return waiting

    # -- internals -------------------------------------------------------------------------------

    def _safe_try(self, op: DelayedOperation) -> bool:
        try:
            return bool(op.try_complete())
        except Exception:
            log.failure("delayed operation {op!r} raised in try_complete; completing it now",
                        op=op)
            return op.force_complete()

    def _retired(self, op: DelayedOperation) -> None:
        # Called once per operation, when it completes or is cancelled; its watch entries
        # become stale and are removed lazily.
        self._stale_entries += op._watch_entries

    def _sweep(self, key: Hashable) -> int:
        ops = self._watchers.get(key)
        if ops is None:
            return 0
        live = [op for op in ops if not op.completed]
        removed = len(ops) - len(live)
        if removed:
            for op in ops:
                if op.completed:
                    op._watch_entries -= 1
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]
            self._entries -= removed
            self._stale_entries -= removed
        return removed

    def _maybe_purge(self) -> None:
        if self._stale_entries > self.purge_interval:
            self.purge()
