"""Tells the controller that this broker's log directories went offline (KIP-112), through the
metadata store, the same way in both metadata modes (ZooKeeper, or the Raft quorum's store):

1. ``/brokers/offline_replicas/[id]`` is set to what is offline (the directories and the
   partitions whose logs were in them) as of this broker's registration epoch;
2. a sequential ``/log_dir_event_notification/log_dir_event_<seq>`` naming this broker (Kafka's
   notification) wakes the controller, which reads the first and moves leadership away.

A failed write (the store disconnected, a quorum without a leader) is retried with a capped
exponential back-off on the injected clock until it is accepted; a report asked for while one is
being written is written again after it (it may say more). Nothing is written before the broker
is registered (its epoch is what makes the record valid); :meth:`registered` writes it then.

State machine: IDLE -> WRITING -> (IDLE | WAITING -> WRITING ...), with ``dirty`` meaning "the
state changed since the last accepted write". Invariant: while ``dirty`` and the broker is
registered, a write is in flight or scheduled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.backoff import exponential_backoff
from broker_core.metadata import MetadataStoreError, NodeExists, NoNode
from broker_core.wire.topic_partition import TopicPartition

RETRY_INITIAL_S = 0.2
RETRY_MAX_S = 5.0


class Unreportable(Exception):
    """The offline state cannot be written to the metadata store however often it is tried."""


class LogDirFailureReporter:
    """See the module docstring. ``offline()`` returns ``(offline directories, partitions)``;
    ``broker_epoch()`` the registration epoch (-1 until registered)."""

    log = Logger(namespace="sluice.replica.log_dirs")

    def __init__(self, broker_id: int, store: Any, clock: Any, *,
                 offline: Callable[[], tuple[list[str], list[TopicPartition]]],
                 broker_epoch: Callable[[], int],
                 give_up: Callable[[str], None] | None = None,
                 retry_initial_s: float = RETRY_INITIAL_S,
                 retry_max_s: float = RETRY_MAX_S) -> None:
        self.broker_id = broker_id
        self.store = store
        self.clock = clock
        self.offline = offline
        self.broker_epoch = broker_epoch
        #: Called with the reason when the state cannot be reported at all (a record too large
        #: for the store, or refused by it): retrying would never tell the controller.
        self.give_up = give_up
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.dirty = False
        self.writing = False
        self.attempts = 0
        #: Notifications accepted by the store (for tests and logs).
        self.reported = 0
        self._retry: Any = None
        self._stopped = False

    @property
    def waiting(self) -> bool:
        """A retry is scheduled."""
        return self._retry is not None and self._retry.active()

    def report(self) -> None:
        """The offline state changed: write it and notify the controller (soon, and again
        until the store accepts it)."""
        self.dirty = True
        self._maybe_write()

    def registered(self) -> None:
        """The broker (re-)registered: a new epoch, so any offline state is reported again;
        with none, a previous incarnation's record is removed (best effort: the controller
        ignores a record of another epoch anyway)."""
        dirs, partitions = self.offline()
        if dirs or partitions:  # a partition may be offline on its own (a failed read check)
            self.report()
        else:
            d = self.store.delete(paths.offline_replicas(self.broker_id))
            d.addErrback(lambda f: f.trap(MetadataStoreError))

    def stop(self) -> None:
        self._stopped = True
        if self.waiting:
            self._retry.cancel()
        self._retry = None

    def _maybe_write(self) -> None:
        if self._stopped or self.writing or self.waiting or not self.dirty:
            return
        if self.broker_epoch() < 0:
            return  # registered() writes it
        self.dirty = False
        self.writing = True
        self.attempts += 1
        d = defer.Deferred.fromCoroutine(self._write())
        d.addCallbacks(self._written, self._failed)

    async def _write(self) -> None:
        dirs, partitions = self.offline()
        value = paths.OfflineReplicas(self.broker_id, self.broker_epoch(), tuple(dirs),
                                      tuple(sorted(partitions))).to_bytes()
        if len(value) > paths.MAX_OFFLINE_RECORD_BYTES:
            raise Unreportable(f"the record of {len(partitions)} offline replicas is "
                               f"{len(value)} bytes, over the {paths.MAX_OFFLINE_RECORD_BYTES} "
                               "a metadata store value may hold")
        path = paths.offline_replicas(self.broker_id)
        try:
            await self.store.set(path, value)
        except NoNode:
            try:
                await self.store.create(path, value, makepath=True)
            except NodeExists:
                await self.store.set(path, value)
        await self.store.create(paths.LOG_DIR_EVENT_PREFIX,
                                paths.LogDirEventNotification(self.broker_id).to_bytes(),
                                sequence=True, makepath=True)

    def _written(self, _: Any) -> None:
        self.writing = False
        self.reported += 1
        self.log.info("told the controller that log directories {d} are offline",
                      d=self.offline()[0])
        self.attempts = 0
        self._maybe_write()

    def _failed(self, failure: Any) -> None:
        self.writing = False
        if failure.check(Unreportable, ValueError):  # too large, or refused as malformed
            self.log.critical("cannot tell the controller which replicas are offline: {e}",
                              e=failure.getErrorMessage())
            if self.give_up is not None:
                self.give_up(f"its offline replicas cannot be reported: "
                             f"{failure.getErrorMessage()}")
            return
        self.dirty = True
        delay = exponential_backoff(max(1, self.attempts), self.retry_initial_s,
                                    self.retry_max_s)
        self.log.warn("could not report the offline log directories ({e}); retrying in "
                      "{s:.1f} s", e=failure.getErrorMessage(), s=delay)
        if self._stopped:
            return

        def retry() -> None:
            self._retry = None
            self._maybe_write()

        self._retry = self.clock.callLater(delay, retry)
