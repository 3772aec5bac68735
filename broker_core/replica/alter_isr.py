"""The leader's side of AlterIsr (docs/design.md#isr-changes-through-the-controller).

A leader never writes ISR state to ZooKeeper: it asks the controller with an AlterPartition
request (key 56) and keeps using the *maximal* ISR until the answer or a newer LeaderAndIsr
arrives (see :mod:`broker_core.replica.partition`).

Invariants:

- at most one item per partition is queued or in flight; a newer submit for a partition replaces
  its queued item (the newest view of the ISR is the one worth sending);
- items submitted in the same reactor turn travel in one request, and one request is in flight at
  a time (a burst of ISR expansions after a broker restart costs one round trip and one ZooKeeper
  multi);
- an item whose fate is unknown (connection lost, timeout, NOT_CONTROLLER) is sent again after a
  back-off: the controller may or may not have applied it, and only an answer or a LeaderAndIsr
  can tell; an item answered with a partition error is reported and dropped;
- an item :meth:`AlterIsrSender.forget` was called for (a LeaderAndIsr settled it) is never sent
  again, even if it was in flight when forgotten and its fate turns out unknown;
- every answer is reported with the item it answers; the receiver decides whether that item is
  still the partition's pending change (an answer can arrive after a LeaderAndIsr settled its
  item and a newer item was submitted);
- a request waits on one controller only while it is the controller: when another broker becomes
  controller (seen every ``follow_s``), the attempt in progress (connecting, or waiting for an
  answer from a controller cut off from us) is abandoned and the items go to the new one, instead
  of waiting out the connection and request timeouts (the ISR shrinks that let acks=all writes
  go on when the old controller was cut off depend on it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.internet.error import ConnectError
from twisted.internet.error import ConnectionLost as TxConnectionLost
from twisted.logger import Logger

from broker_core.rpc import (
    ClientConnection,
    RequestTimedOut,
    connect_client,
    request_with_timeout,
)
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.topic_partition import TopicPartition

ALTER_PARTITION_VERSION = 1


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition's requested ISR, with the state it was computed from."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    zk_version: int


#: ``on_result(change, error_name_or_None, leader_epoch, isr, zk_version)``.
ResultCallback = Callable[[IsrChange, str | None, int, tuple[int, ...], int], None]


class AlterIsrSender:
    """Queues and sends ISR changes to the active controller; see the module docstring."""

    log = Logger(namespace="sluice.replica.alter_isr")

    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        controller: Callable[[], tuple[int, str, int] | None],
        on_result: ResultCallback,
        *,
        reactor: Any,
        clock: Any,
        backoff_s: float = 0.1,
        timeout_s: float = 30.0,
        connect: Callable[[str, int], defer.Deferred] | None = None,
        follow_s: float = 0.5,
        credential: ClientCredential | None = None,
        tls: PeerTls | None = None,
    ) -> None:
        self.broker_id = broker_id
        #: The cluster login every connection to the controller starts with.
        self.credential = credential
        self.tls = tls
        self.broker_epoch = broker_epoch
        self.controller = controller
        self.on_result = on_result
        self.reactor = reactor
        self.clock = clock
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self._conn = ClientConnection(connect or self._tcp_connect)
        self._queued: dict[TopicPartition, IsrChange] = {}
        self._in_flight: dict[TopicPartition, IsrChange] = {}
        #: In-flight items forgotten while in flight: not re-queued if their fate is unknown.
        self._superseded: set[TopicPartition] = set()
        self._scheduled: Any = None
        self._sending = False
        self._stopped = False
        self._retrying = False
        self.follow_s = follow_s
        self._send_d: defer.Deferred | None = None
        self._target: tuple[int, str, int] | None = None
        self._follow_call: Any = None

    @property
    def pending(self) -> int:
        return len(self._queued) + len(self._in_flight)

    def submit(self, change: IsrChange) -> None:
        if self._stopped:
            return
        self._queued[(change.topic, change.partition)] = change
        self._schedule(0.0)

    def forget(self, tp: TopicPartition) -> None:
        """A newer LeaderAndIsr superseded whatever we asked for ``tp``: do not send it, and do
        not send again an item for ``tp`` that is in flight now."""
        self._queued.pop(tp, None)
        if tp in self._in_flight:
            self._superseded.add(tp)

    def stop(self) -> None:
        self._stopped = True
        if self._scheduled is not None and self._scheduled.active():
            self._scheduled.cancel()
        self._scheduled = None
        self._queued.clear()
        self._stop_following()
        self._conn.close()

    # -- sending -----------------------------------------------------------------------------------

    def _schedule(self, delay: float) -> None:
        if self._scheduled is not None and self._scheduled.active():
            return
        if self._sending:
            return  # the running send re-schedules when it ends
        self._scheduled = self.clock.callLater(delay, self._start_send)

    def _start_send(self) -> None:
        self._scheduled = None
        if self._stopped or self._sending or not self._queued:
            return
        self._sending = True
        d = self._send_d = defer.Deferred.fromCoroutine(self._send())
        self._follow_call = self.clock.callLater(self.follow_s, self._follow)
        d.addErrback(lambda f: self.log.failure("AlterIsr send failed unexpectedly", f))

        def done(_: Any) -> None:
            self._sending = False
            self._send_d = None
            self._stop_following()
            if self._queued and not self._stopped:
                self._schedule(self.backoff_s if self._retrying else 0.0)

        d.addBoth(done)

    def _follow(self) -> None:
        """While a send is in progress: abandon it if another broker became controller."""
        self._follow_call = None
        if self._send_d is None or self._stopped:
            return
        now = self.controller()
        if now is not None and self._target is not None and now != self._target:
            self.log.info("controller moved from {old} to {new}: AlterIsr goes there",
                          old=self._target[0], new=now[0])
            self._send_d.cancel()  # the send requeues its items (CancelledError)
            return
        self._follow_call = self.clock.callLater(self.follow_s, self._follow)

    def _stop_following(self) -> None:
        if self._follow_call is not None and self._follow_call.active():
            self._follow_call.cancel()
        self._follow_call = None

    async def _send(self) -> None:
        batch, self._queued = self._queued, {}
        self._in_flight = batch
        self._retrying = False
        target = self._target = self.controller()
        try:
            if target is None:
                raise _Retry("no controller known yet")
            proto = await self._conn.to(target[1], target[2])
            topics: dict[str, list[dict]] = {}
            for c in batch.values():
                topics.setdefault(c.topic, []).append({
                    "partition_index": c.partition, "leader_epoch": c.leader_epoch,
                    "new_isr": list(c.new_isr), "leader_recovery_state": 0,
                    "partition_epoch": c.zk_version})
            body = {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch(),
                    "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]}
            resp = await request_with_timeout(proto, self.clock, ApiKey.ALTER_PARTITION,
                                              ALTER_PARTITION_VERSION, body, self.timeout_s,
                                              f"controller {target[0]}")
            if resp.error_code:
                raise _Retry(ErrorCode(resp.error_code).name)
            answered: set[TopicPartition] = set()
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.topic_name, p.partition_index)
                    change = batch.get(tp)
                    if change is None:
                        continue
                    answered.add(tp)
                    error = ErrorCode(p.error_code).name if p.error_code else None
                    self._report(change, error, p.leader_epoch, tuple(p.isr), p.partition_epoch)
            for tp, change in batch.items():
                if tp not in answered:
                    self._requeue(tp, change)
                    self._retrying = True
        except (_Retry, ConnectError, TxConnectionLost, RequestTimedOut, defer.TimeoutError,
                defer.CancelledError, OSError) as e:
            if self._stopped:
                return
            self.log.info("AlterIsr for {n} partition(s) not applied ({e}); retrying",
                          n=len(batch), e=e)
            self._conn.drop()
            for tp, change in batch.items():
                self._requeue(tp, change)
            self._retrying = True  # the next send waits backoff_s
        finally:
            self._in_flight = {}
            self._superseded.clear()

    def _requeue(self, tp: TopicPartition, change: IsrChange) -> None:
        if tp in self._superseded:
            return  # settled by a LeaderAndIsr while in flight
        # A newer submit made while this one was in flight takes precedence.
        self._queued.setdefault(tp, change)

    def _report(self, change: IsrChange, error: str | None, leader_epoch: int,
                isr: tuple[int, ...], zk_version: int) -> None:
        try:
            self.on_result(change, error, leader_epoch, isr, zk_version)
        except Exception:
            self.log.failure("AlterIsr result handler failed for {t}-{p}", t=change.topic,
                             p=change.partition)

    def _tcp_connect(self, host: str, port: int) -> defer.Deferred:
        return connect_client(self.reactor, host, port, f"sluice-alter-isr-{self.broker_id}",
                              credential=self.credential, tls=self.tls, peer_name="the controller")


class _Retry(Exception):
    """The request as a whole was not applied; send it again."""
