"""Replica fetchers: how a follower copies its leaders' logs (Kafka's ``ReplicaFetcherThread``).

One :class:`ReplicaFetcher` per source broker fetches every partition this broker follows from
that leader in one long-polling Fetch (``replica_id`` = our broker id). A partition enters a
fetcher in the *truncating* state: before it fetches anything it asks the leader, with
OffsetForLeaderEpoch, where the leader's copy of our latest epoch ends, and truncates there
(never to its high watermark). KIP-279: when the leader answers with an older epoch
than we asked about, we truncate to where *we* think that epoch ends and ask again, until the
epochs agree; so even after several quick failovers the follower's log becomes a prefix of the
leader's.

Invariants:

- a partition is in at most one fetcher, the one of the leader named by the newest LeaderAndIsr
  applied (the replica manager moves it);
- a partition fetches only after its truncation completed for the current leader epoch, and
  its fetch offset is always its log end offset;
- bytes are appended only if the partition is still in this fetcher at the epoch the request
  was sent with (a LeaderAndIsr that arrived while the fetch was in flight wins).

Threading: everything runs on the reactor thread; one request at a time per fetcher.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer, task
from twisted.internet.error import ConnectError
from twisted.internet.error import ConnectionLost as TxConnectionLost
from twisted.logger import Logger

from broker_core.log import UnexpectedAppendOffset
from broker_core.replica.fetch_session import FetchSessionHandler, PartitionFetchState
from broker_core.replica.partition import Partition
from broker_core.rpc import (
    ClientConnection,
    KafkaClientProtocol,
    RequestTimedOut,
    connect_client,
    request_with_timeout,
)
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import InvalidRecordBatch
from broker_core.wire.topic_partition import TopicPartition

FETCH_VERSION = 11  # current_leader_epoch (v9+), not flexible; our brokers serve 4-12
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
UNDEFINED = -1


@dataclass
class FetchState:
    """One followed partition inside a fetcher."""

    partition: Partition
    leader_epoch: int
    truncating: bool = True
    #: Clock time before which the partition is not fetched (after a partition-level error).
    delayed_until: float = 0.0


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1 << 20
    response_max_bytes: int = 10 << 20
    backoff_ms: int = 1000
    request_timeout_ms: int = 30000


def truncation_offset(partition: Partition, leader_epoch: int, leader_end_offset: int
                      ) -> tuple[int, bool]:
    """Where to truncate, given the leader's answer ``(leader_epoch, leader_end_offset)`` to
    "where does my latest epoch end?"; returns ``(offset, done)`` (Kafka's
    ``getOffsetTruncationState``, KIP-279).

    - the leader has no epoch at or below ours (``leader_epoch`` -1): keep what is below its
      answer, which is then its first offset;
    - the leader's epoch is one we have: cut at the smaller of both ends of that epoch; done;
    - we never had the leader's epoch: cut where our own largest epoch below it ends, then ask
      again about the epoch we are left with (not done).
    """
    log = partition.log
    leo = log.log_end_offset
    if leader_end_offset == UNDEFINED:
        # The leader knows no epoch that old or new: fall back to the HW (the older rule),
        # the only offset both sides are known to share.
        return min(log.high_watermark, leo), True
    if leader_epoch == UNDEFINED:
        return min(leader_end_offset, leo), True
    ours_epoch, ours_end = log.leader_epochs.end_offset_for_epoch(leader_epoch)
    if ours_epoch == leader_epoch:
        return min(leader_end_offset, ours_end, leo), True
    if ours_epoch == UNDEFINED or ours_end == UNDEFINED:
        return min(leader_end_offset, leo), True
    return min(ours_end, leo), False


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader; see the module docstring."""

    log = Logger(namespace="sluice.replica.fetcher")

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        address: tuple[str, int],
        *,
        reactor: Any,
        clock: Any,
        config: FetcherConfig,
        on_appended: Callable[[Partition], None],
        on_error: Callable[[Partition, str], None] | None = None,
        connect: Callable[[str, int], defer.Deferred] | None = None,
        on_storage_error: Callable[[Partition, OSError], None] | None = None,
        credential: ClientCredential | None = None,
        tls: PeerTls | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        #: The cluster login every connection to the leader starts with.
        self.credential = credential
        self.tls = tls
        #: Called when writing a partition's log failed (an append or a truncation raised
        #: ``OSError``): the partition leaves this fetcher at once and the replica manager takes
        #: its log directory offline (a disk error is no reason to reconnect and retry).
        self.on_storage_error = on_storage_error
        self.address = address
        self.reactor = reactor
        self.clock = clock
        self.config = config
        self.on_appended = on_appended
        self.on_error = on_error
        self._conn = ClientConnection(connect or self._tcp_connect)
        self._session = FetchSessionHandler()
        self._session_proto: KafkaClientProtocol | None = None
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._running = False
        self._loop: defer.Deferred | None = None
        self._wakeup: defer.Deferred | None = None
        self._sleep: defer.Deferred | None = None

    # -- membership --------------------------------------------------------------------------------

    def add(self, partition: Partition) -> None:
        tp = (partition.topic, partition.index)
        self.partitions[tp] = FetchState(partition, partition.leader_epoch)
        self._wake()

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._running:
            return
        self._running = True
        self._loop = defer.Deferred.fromCoroutine(self._run())
        self._loop.addErrback(lambda f: self.log.failure(
            "fetcher for leader {l} stopped on an unexpected error", f, l=self.leader_id))

    async def stop(self) -> None:
        self._running = False
        self._wake()
        if self._sleep is not None and not self._sleep.called:
            self._sleep.cancel()
        self._conn.close()
        if self._loop is not None:
            try:
                await self._loop
            except Exception:
                pass

    def _wake(self) -> None:
        d, self._wakeup = self._wakeup, None
        if d is not None and not d.called:
            d.callback(None)

    async def _pause(self, seconds: float) -> None:
        self._sleep = task.deferLater(self.clock, seconds, lambda: None)
        try:
            await self._sleep
        except defer.CancelledError:
            pass
        finally:
            self._sleep = None

    # -- the loop ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        while self._running:
            if not self.partitions:
                self._wakeup = defer.Deferred()
                await self._wakeup
                continue
            try:
                proto = await self._conn.to(*self.address)
                if proto is not self._session_proto:
                    # A new connection may reach a restarted leader: open a new session.
                    self._session.reset()
                    self._session_proto = proto
                truncating, ready = self._due()
                if truncating:
                    await self._truncate(proto, truncating)
                    ready = self._due()[1]  # truncation may have finished some
                if ready:
                    await self._fetch(proto, ready)
                elif not truncating and self.partitions:
                    # Everything is backing off after errors: wait for the earliest.
                    now = self.clock.seconds()
                    wait = min(s.delayed_until for s in self.partitions.values()) - now
                    await self._pause(max(0.01, wait))
            except (ConnectError, TxConnectionLost, RequestTimedOut, defer.TimeoutError,
                    defer.CancelledError, OSError) as e:
                if not self._running:
                    break
                self.log.info("fetch from broker {l} at {a} failed ({e}); retrying in {s} ms",
                              l=self.leader_id, a=self.address, e=type(e).__name__,
                              s=self.config.backoff_ms)
                self._conn.drop()
                await self._pause(self.config.backoff_ms / 1000.0)
        self._conn.drop()

    def _due(self) -> tuple[list[tuple[TopicPartition, FetchState]],
                            list[tuple[TopicPartition, FetchState]]]:
        """The partitions not backing off: those to truncate, and those to fetch. One walk:
        it runs for every request, over every partition followed from this leader."""
        now = self.clock.seconds()
        truncating: list[tuple[TopicPartition, FetchState]] = []
        ready: list[tuple[TopicPartition, FetchState]] = []
        for item in self.partitions.items():
            s = item[1]
            if s.delayed_until <= now:
                (truncating if s.truncating else ready).append(item)
        return truncating, ready

    def _tcp_connect(self, host: str, port: int) -> defer.Deferred:
        return connect_client(self.reactor, host, port, f"sluice-replica-{self.broker_id}",
                              credential=self.credential, tls=self.tls,
                              peer_name=f"broker {self.leader_id}")

    def _request(self, proto: KafkaClientProtocol, api: ApiKey, version: int, body: dict,
                 timeout_s: float) -> defer.Deferred:
        return request_with_timeout(proto, self.clock, api, version, body, timeout_s,
                                    f"broker {self.leader_id}")

    # -- truncation (docs/design.md#leader-epochs) -----------------------------------------------

    async def _truncate(self, proto: KafkaClientProtocol,
                        due: list[tuple[TopicPartition, FetchState]]) -> None:
        asking = dict(due)
        by_topic: dict[str, list[dict]] = {}
        for (topic, index), s in asking.items():
            latest = s.partition.log.leader_epochs.latest_epoch
            if latest < 0:
                # Nothing to compare: an empty epoch history means an empty log (or one written
                # before epochs); fetch from the log end and let the leader judge the offset.
                s.truncating = False
                continue
            by_topic.setdefault(topic, []).append(
                {"partition": index, "current_leader_epoch": s.leader_epoch, "leader_epoch": latest})
        if not by_topic:
            return
        body = {"replica_id": self.broker_id, "topics": [
            {"topic": t, "partitions": parts} for t, parts in by_topic.items()]}
        resp = await self._request(proto, ApiKey.OFFSET_FOR_LEADER_EPOCH,
                                   OFFSET_FOR_LEADER_EPOCH_VERSION, body,
                                   self.config.request_timeout_ms / 1000.0)
        for t in resp.topics:
            for p in t.partitions:
                tp = (t.topic, p.partition)
                s = self.partitions.get(tp)
                if s is None or s is not asking.get(tp):
                    continue  # moved while we asked
                if p.error_code:
                    self._partition_error(tp, s, ErrorCode(p.error_code).name)
                    continue
                offset, done = truncation_offset(s.partition, p.leader_epoch, p.end_offset)
                log = s.partition.log
                if offset < log.log_end_offset:
                    self.log.info("truncating {t}-{p} from {leo} to {o} (leader {l} epoch {e} "
                                  "ends at {end})", t=tp[0], p=tp[1], leo=log.log_end_offset,
                                  o=offset, l=self.leader_id, e=p.leader_epoch, end=p.end_offset)
                    try:
                        log.truncate_to(offset)
                    except OSError as e:
                        self._storage_error(tp, s, e)
                        continue
                s.truncating = not done

    # -- fetching ----------------------------------------------------------------------------------

    async def _fetch(self, proto: KafkaClientProtocol,
                     ready: list[tuple[TopicPartition, FetchState]]) -> None:
        sent = dict(ready)
        states: dict[TopicPartition, PartitionFetchState] = {}
        max_bytes = self.config.max_bytes
        for tp, s in ready:
            log = s.partition.log
            states[tp] = (log.log_end_offset, log.log_start_offset, max_bytes, s.leader_epoch)
        # KIP-227: once the leader granted a session, name only partitions whose fetch state
        # changed; the leader answers only partitions with news.
        req = self._session.build(states)
        by_topic: dict[str, list[dict]] = {}
        for tp in req.to_send:
            offset, log_start, part_max, epoch = states[tp]
            by_topic.setdefault(tp[0], []).append({
                "partition": tp[1], "current_leader_epoch": epoch, "fetch_offset": offset,
                "log_start_offset": log_start, "partition_max_bytes": part_max})
        forgotten: dict[str, list[int]] = {}
        for topic, index in req.forgotten:
            forgotten.setdefault(topic, []).append(index)
        body = {"replica_id": self.broker_id, "max_wait_ms": self.config.wait_max_ms,
                "min_bytes": self.config.min_bytes, "max_bytes": self.config.response_max_bytes,
                "isolation_level": 0, "session_id": req.session_id, "session_epoch": req.epoch,
                "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": parts}
                                          for t, parts in forgotten.items()],
                "rack_id": ""}
        timeout = (self.config.wait_max_ms + self.config.request_timeout_ms) / 1000.0
        try:
            resp = await self._request(proto, ApiKey.FETCH, FETCH_VERSION, body, timeout)
        except BaseException:
            self._session.reset()  # the leader may or may not have seen it: start afresh
            raise
        if not self._session.handle_response(req, resp.error_code, resp.session_id):
            self.log.info("fetch session with broker {l} ended ({e}); fetching in full",
                          l=self.leader_id, e=ErrorCode(resp.error_code).name)
            return
        for t in resp.responses:
            for p in t.partitions:
                tp = (t.topic, p.partition_index)
                s = sent.get(tp)
                if s is None:
                    continue
                if self.partitions.get(tp) is not s:
                    continue  # a LeaderAndIsr moved it while the fetch was in flight
                self._handle_partition(tp, s, states[tp][0], p)

    def _handle_partition(self, tp: TopicPartition, s: FetchState, offset: int, p: Any) -> None:
        part = s.partition
        log = part.log
        if p.error_code:
            name = ErrorCode(p.error_code).name
            if name == "OFFSET_OUT_OF_RANGE":
                self._out_of_range(tp, s, p)
            else:
                self._partition_error(tp, s, name)
            return
        if log.log_end_offset != offset:
            return  # truncated meanwhile; the next round fetches from the new end
        records = p.records
        if records is not None and len(records):
            try:
                info = log.append_as_follower(records)
            except OSError as e:
                self._storage_error(tp, s, e)
                return
            except (UnexpectedAppendOffset, InvalidRecordBatch) as e:
                # The leader sent something that does not continue our log: find the
                # divergence point again rather than append a gap or a corrupt batch.
                self.log.warn("{t}-{p}: fetched data does not fit at {o} ({e}); truncating "
                              "again", t=tp[0], p=tp[1], o=offset, e=e)
                s.truncating = True
                return
            if info.record_count:
                self.on_appended(part)
        part.follower_update_high_watermark(p.high_watermark)
        if p.log_start_offset is not None and p.log_start_offset > log.log_start_offset:
            # The leader's DeleteRecords (or retention) moved its log start: follow it, up to
            # what this replica has committed (Kafka's follower does the same).
            log.advance_log_start(min(p.log_start_offset, log.high_watermark))

    def _out_of_range(self, tp: TopicPartition, s: FetchState, p: Any) -> None:
        log = s.partition.log
        leader_start = p.log_start_offset
        if leader_start is not None and leader_start > log.log_end_offset:
            # We are behind the leader's retention: start over at its log start.
            self.log.info("{t}-{p}: log end {leo} is below the leader's log start {s}; "
                          "starting over there", t=tp[0], p=tp[1], leo=log.log_end_offset,
                          s=leader_start)
            try:
                log.truncate_fully_and_start_at(leader_start)
            except OSError as e:
                self._storage_error(tp, s, e)
        else:
            # Our log end is past the leader's: find where we diverge.
            s.truncating = True

    def _storage_error(self, tp: TopicPartition, s: FetchState, error: OSError) -> None:
        """Writing the partition's log failed: stop fetching it here and tell the replica
        manager, which takes the log directory offline (without a callback the error is only
        logged and the partition left to back off, as a lost connection would be)."""
        self.log.error("{t}-{p}: writing the fetched data failed: {e}", t=tp[0], p=tp[1], e=error)
        if self.partitions.get(tp) is s:
            del self.partitions[tp]
        if self.on_storage_error is not None:
            self.on_storage_error(s.partition, error)

    def _partition_error(self, tp: TopicPartition, s: FetchState, name: str) -> None:
        # NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH: the LeaderAndIsr
        # that tells us the truth is on its way (or the leader has not applied its own yet);
        # back off this partition and ask again from scratch.
        self.log.debug("{t}-{p}: {e} from broker {l}; backing off", t=tp[0], p=tp[1], e=name,
                       l=self.leader_id)
        s.delayed_until = self.clock.seconds() + self.config.backoff_ms / 1000.0
        s.truncating = name in ("FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH",
                                "NOT_LEADER_OR_FOLLOWER") or s.truncating
        if self.on_error is not None:
            self.on_error(s.partition, name)


class ReplicaFetcherManager:
    """Keeps one :class:`ReplicaFetcher` per source broker and moves partitions between them."""

    def __init__(self, broker_id: int, *, reactor: Any, clock: Any, config: FetcherConfig,
                 on_appended: Callable[[Partition], None],
                 connect: Callable[[str, int], defer.Deferred] | None = None,
                 on_storage_error: Callable[[Partition, OSError], None] | None = None,
                 credential: ClientCredential | None = None,
                 tls: PeerTls | None = None) -> None:
        self.broker_id = broker_id
        self.credential = credential
        self.tls = tls
        self.reactor = reactor
        self.clock = clock
        self.config = config
        self.on_appended = on_appended
        self.connect = connect
        self.on_storage_error = on_storage_error
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._where: dict[TopicPartition, int] = {}
        self._stopped = False
        self._leaving = False

    def follow(self, partition: Partition, leader_id: int, address: tuple[str, int]) -> None:
        """Fetch ``partition`` from ``leader_id`` (after truncating), leaving any other fetcher.
        Ignored once stopped: a LeaderAndIsr that arrives while the broker shuts down must not
        start fetching again. Once :meth:`begin_leaving` was called, only a partition already
        fetched from ``leader_id`` goes on being fetched."""
        tp = (partition.topic, partition.index)
        kept = self._where.get(tp) == leader_id
        self.unfollow([tp])
        if self._stopped or (self._leaving and not kept):
            return
        fetcher = self.fetchers.get(leader_id)
        if fetcher is not None:
            # A leader that restarted may listen elsewhere now: the fetcher's next request
            # connects to the new address, for every partition it fetches from that leader.
            fetcher.address = address
        else:
            fetcher = ReplicaFetcher(self.broker_id, leader_id, address, reactor=self.reactor,
                                     clock=self.clock, config=self.config,
                                     on_appended=self.on_appended, connect=self.connect,
                                     credential=self.credential, tls=self.tls,
                                     on_storage_error=self.on_storage_error)
            self.fetchers[leader_id] = fetcher
            fetcher.start()
        fetcher.add(partition)
        self._where[tp] = leader_id

    def unfollow(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            leader = self._where.pop(tp, None)
            if leader is not None and leader in self.fetchers:
                self.fetchers[leader].remove([tp])

    def following(self, tp: TopicPartition) -> int | None:
        return self._where.get(tp)

    def shutdown_idle(self) -> None:
        """Stop fetchers left with no partitions."""
        for leader, f in list(self.fetchers.items()):
            if not f.partitions:
                del self.fetchers[leader]
                defer.Deferred.fromCoroutine(f.stop())

    def begin_leaving(self) -> None:
        """The broker is shutting down: its controlled shutdown takes it out of every ISR and
        hands its leaderships to others, which makes it their follower. Fetching those would
        only make their new leaders ask the controller to take it back into the ISR. While
        that request is pending, a leader counts the broker in the ISR its high watermark
        waits for, so acks=all writes wait for a broker about to exit (until a new controller
        answers, if the controller was the leaving broker). So start no new fetch from here
        on; the partitions fetched now go on until :meth:`stop`, or until a LeaderAndIsr
        leaves this broker out of their ISR (acks=all writes to them wait for this broker until
        the controller took it out of their ISR)."""
        self._leaving = True

    @property
    def leaving(self) -> bool:
        """Whether :meth:`begin_leaving` was called (and no :meth:`start` since). A partition
        whose ISR no longer holds a leaving broker is then fetched no more either
        (``LeaderAndIsrApplier``)."""
        return self._leaving

    def start(self) -> None:
        """Accept partitions again after :meth:`stop` (or :meth:`begin_leaving`)."""
        self._stopped = False
        self._leaving = False

    async def stop(self) -> None:
        self._stopped = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._where.clear()
        for f in fetchers:
            await f.stop()
