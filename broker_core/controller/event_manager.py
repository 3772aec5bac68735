"""The controller's event queue (Kafka's ControllerEventManager, KAFKA-5027).

ZooKeeper watches, requests from brokers and timers only *enqueue* an event; events run one at a
time, in the order they were enqueued, on the reactor. Invariants:

- at most one event runs at any time (``_running``); an event enqueued while one runs waits;
- while the metadata-store session is suspended nothing runs; queued events wait for
  :meth:`EventManager.resume`;
- an event that raises never stops the queue: :class:`NotController` makes the controller
  resign, a metadata-store error is logged (a broker change the store did not take is judged
  again later), anything else is logged as a failure;
- delayed events (:meth:`EventManager.later`) are cancelled by :meth:`EventManager.cancel_delayed`
  (the controller calls it when it resigns), so a deposed controller never acts on them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet import defer

from broker_core.metadata import ConnectionLost, MetadataStoreError, StoreStopping

#: Work stopped by a conflicting write (leader/ISR decisions that conflicted in every round, a
#: partition removal), or a broker change whose writes the store did not take (no quorum
#: leader, ZooKeeper unreachable), is taken up again by a new event this many seconds later,
#: from the state read then.
CONFLICT_RETRY_S = 1.0

Event = Callable[[], Awaitable[None]]


class NotController(Exception):
    """This broker lost the controllership while handling an event."""


class EventManager:
    """The serial event queue of one controller. ``controller`` supplies what the loop needs:
    ``active`` and ``election.standing`` (whether a failing event still matters), ``log`` and
    ``metrics`` (read when used: tests replace the controller's logger), ``_resign()`` (on
    :class:`NotController`) and ``broker_failover.retry_broker_change()`` (a broker change the
    store did not take)."""

    def __init__(self, controller: Any, reactor: Any) -> None:
        self.controller = controller
        self.reactor = reactor
        self.suspended = False
        self._events: deque[tuple[str, Event]] = deque()
        self._running = False
        # Delayed retries of work a conflicting write stopped (cancelled on resigning).
        self._delayed: set[Any] = set()

    def enqueue(self, name: str, fn: Event) -> None:
        """Queue ``fn`` (named ``name`` in logs) and run the queue unless it runs already."""
        self._events.append((name, fn))
        metrics = self.controller.metrics
        if metrics is not None:
            metrics.controller_event_queue_size.set(len(self._events))
        self.drain()

    def drain(self) -> None:
        """Start running queued events, unless they run already or the session is suspended."""
        if self._running or self.suspended:
            return
        self._running = True
        d = defer.Deferred.fromCoroutine(self._run_events())
        d.addErrback(lambda f: self.controller.log.failure("controller event loop failed", f))

    def clear(self) -> None:
        """Drop every queued event (the session is lost: they were for a controllership that is
        over)."""
        self._events.clear()

    def suspend(self) -> None:
        self.suspended = True

    def resume(self) -> None:
        self.suspended = False

    async def _run_events(self) -> None:
        c = self.controller
        try:
            while self._events and not self.suspended:
                name, fn = self._events.popleft()
                started = time.monotonic()
                try:
                    await fn()
                except NotController:
                    c.log.warn("lost the controllership while handling {event}", event=name)
                    await c._resign()
                except MetadataStoreError as e:
                    self._store_error(name, e)
                except Exception:
                    c.log.failure("controller event {event} failed", event=name)
                finally:
                    if c.metrics is not None:
                        c.metrics.controller_event_duration_seconds.observe(
                            time.monotonic() - started)
                        c.metrics.controller_event_queue_size.set(len(self._events))
        finally:
            self._running = False

    def _store_error(self, name: str, e: MetadataStoreError) -> None:
        """Log an event the metadata store failed (called inside the ``except``)."""
        c = self.controller
        if not c.election.standing or not c.active:
            # Stopping or resigned: the store is going away under queued events.
            c.log.debug("controller event {event} dropped: {e}", event=name, e=e)
        elif isinstance(e, StoreStopping):
            # The broker is stopping and its last writes got their short wait (in quorum mode
            # the rest of the quorum may be gone already).
            c.log.info("controller event {event} dropped, the broker is stopping: {e}",
                       event=name, e=e)
        elif isinstance(e, ConnectionLost):
            # The store took no write (no quorum leader, ZooKeeper unreachable): a condition,
            # not a bug. A broker change is judged again (it reads the registrations afresh),
            # or dead leaders' partitions would wait for the next registration change.
            c.log.warn("controller event {event} not completed, the metadata store did not "
                       "take its writes: {e}", event=name, e=e)
            if name == "broker_change":
                c.broker_failover.retry_broker_change()
        else:
            c.log.failure("controller event {event} failed", event=name)

    def later(self, name: str, fn: Event) -> None:
        """Run ``fn`` as a new event :data:`CONFLICT_RETRY_S` from now (unless the controller
        resigns first)."""
        call: Any = None

        def fire() -> None:
            self._delayed.discard(call)
            if self.controller.active:
                self.enqueue(name, fn)

        call = self.reactor.callLater(CONFLICT_RETRY_S, fire)
        self._delayed.add(call)

    def cancel_delayed(self) -> None:
        """Cancel every event :meth:`later` scheduled that has not been queued yet."""
        for call in self._delayed:
            if call.active():
                call.cancel()
        self._delayed.clear()
