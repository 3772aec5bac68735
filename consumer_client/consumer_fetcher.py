"""The consumer's fetchers: one fetch loop per partition leader (StartFetcher).

:class:`FetcherManager` owns the current assignment's :class:`PartitionState` s. It finds each
partition's leader, resolves a start offset of -1 with ListOffsets per ``auto.offset.reset``,
and hands the partition to the :class:`LeaderFetcher` of that leader, which fetches every
partition it holds in one Fetch request, like the broker's replica fetchers.

Invariants:

- a partition is held by at most one leader fetcher, or is *homeless* (waiting for a leader or a
  start offset); a response for a partition that moved or was reset while the request was in
  flight is ignored;
- a partition whose stream is full is left out of the next request (backpressure); taking a
  chunk from the stream wakes the fetchers;
- the next Fetch is sent as soon as a response is queued (pipelining): the application
  consumes one chunk while the next is on its way;
- leaders come from the cluster view (shared by every consumer on the ClusterClient): a
  placement asks for Metadata only when the view names no leader for a partition to place, or
  after any failure since the last refresh. A new assignment whose leaders the view knows (a
  rebalance of a running group) is placed without a request; a leader that moved since shows
  up as an error of the first Fetch, which refreshes;
- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION and friends, or a
  lost connection, send the partition back to homeless: metadata is refreshed and it is placed
  again. OFFSET_OUT_OF_RANGE resets per ``auto.offset.reset``. A partition that keeps failing
  (``fetch.max.partition.failures`` rounds in a row) is reported through ``on_failed``; the
  consumer then reconnects to the coordinator to make it rebalance.

What one partition's answer means is :func:`~consumer_client.fetch_outcome.fetch_outcome`, the
decision the Spark reader's fetch loop shares; what the consumer does with it (reset per
``auto.offset.reset``, place again on any error) stays here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet import defer
from twisted.internet.error import ConnectError, ConnectionLost
from twisted.logger import Logger

from broker_core.rpc import RequestTimedOut
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.cluster import ClusterClient, UnsupportedApi
from consumer_client.connection import NoBrokersAvailable
from consumer_client.consumer_config import ConsumerConfig
from consumer_client.consumer_streams import Chunk, PartitionState
from consumer_client.fetch_outcome import FetchStep, fetch_outcome
from consumer_client.security import AUTHENTICATION_ERRORS

#: Failures that send a fetcher's partitions back to placement. A refused login or TLS handshake
#: is among them: the fetch loop must not die with it (a user's credential removed while the
#: consumer runs); the rediscovery its failures lead to fails the consumer with it.
NETWORK_ERRORS = (ConnectError, ConnectionLost, RequestTimedOut, defer.TimeoutError, OSError,
                  NoBrokersAvailable, UnsupportedApi, *AUTHENTICATION_ERRORS)
EARLIEST, LATEST = -2, -1

#: The largest partition_max_bytes a Fetch request can carry (an int32).
_MAX_FETCH_BYTES = 2**31 - 1


class LeaderFetcher:
    """Fetches the partitions one broker leads; see the module docstring."""

    log = Logger(namespace="sluice.consumer.fetcher")

    def __init__(self, manager: FetcherManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.parts: dict[tuple[str, int], PartitionState] = {}
        self.running = False
        self._wakeup: defer.Deferred | None = None
        self._timer: Any = None
        self.requests = 0

    def add(self, ps: PartitionState) -> None:
        ps.leader = self.leader
        self.parts[ps.tp] = ps
        self.wake()

    def remove(self, ps: PartitionState) -> None:
        if self.parts.get(ps.tp) is ps:
            del self.parts[ps.tp]

    def start(self) -> None:
        self.running = True
        d = defer.Deferred.fromCoroutine(self._run())
        d.addErrback(lambda f: self.log.failure("fetcher for broker {b} failed", f,
                                                b=self.leader))

    def stop(self) -> None:
        self.running = False
        self.parts = {}
        self.wake()

    def wake(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        d, self._wakeup = self._wakeup, None
        if d is not None and not d.called:
            d.callback(None)

    async def _run(self) -> None:
        m = self.manager
        cfg = m.config
        timeout = (cfg.fetch_max_wait_ms + cfg.request_timeout_ms) / 1000.0
        while self.running:
            now = m.clock.seconds()
            ready = []
            next_due = None
            for ps in self.parts.values():
                if ps.stream.full:
                    continue
                if ps.delayed_until > now:
                    if next_due is None or ps.delayed_until < next_due:
                        next_due = ps.delayed_until
                    continue
                ready.append(ps)
            if not ready:
                self._wakeup = defer.Deferred()
                if next_due is not None:
                    self._timer = m.clock.callLater(max(0.0, next_due - now), self.wake)
                await self._wakeup
                continue
            sent = {ps.tp: (ps, ps.fetch_offset) for ps in ready}
            by_topic: dict[str, list[dict]] = {}
            for ps in ready:
                by_topic.setdefault(ps.topic, []).append({
                    "partition": ps.partition, "current_leader_epoch": -1,
                    "fetch_offset": ps.fetch_offset, "log_start_offset": -1,
                    "partition_max_bytes": max(ps.max_bytes, cfg.max_partition_fetch_bytes)})
            body = {"replica_id": -1, "max_wait_ms": cfg.fetch_max_wait_ms,
                    "min_bytes": cfg.fetch_min_bytes, "max_bytes": cfg.fetch_max_bytes,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
                    "forgotten_topics_data": [], "rack_id": ""}
            self.requests += 1
            try:
                resp = await m.cluster.request(self.leader, ApiKey.FETCH, body, timeout)
            except NETWORK_ERRORS as e:
                if not self.running:
                    return
                self.log.info("fetch from broker {b} failed ({e}); finding leaders again",
                              b=self.leader, e=e.__class__.__name__)
                m.cluster.disconnect(self.leader)
                m.leader_failed(self, f"fetch from broker {self.leader} failed: {e}")
                return
            m.before_handling()
            if not self.running:
                return
            for t in resp.responses:
                for p in t.partitions:
                    entry = sent.get((t.topic, p.partition_index))
                    if entry is None:
                        continue
                    ps, offset = entry
                    if self.parts.get(ps.tp) is not ps or ps.fetch_offset != offset:
                        continue  # moved, reset or released while the request was out
                    self._handle(ps, offset, p)

    def _handle(self, ps: PartitionState, offset: int, p: Any) -> None:
        m = self.manager
        out = fetch_outcome(p, offset)
        if out.step is FetchStep.RECORDS:
            ps.failures = 0
            ps.max_bytes = 0
            ps.fetch_offset = out.next_offset
            ps.stream.put(Chunk(ps, out.records, offset, out.next_offset, m.config.check_crcs))
            return
        if out.step is FetchStep.NOTHING:
            ps.failures = 0
            return
        if out.step is FetchStep.TOO_LARGE:
            # One batch is larger than we asked for (a broker without KIP-74 would send it
            # cut off): ask for more next time rather than stall on it.
            ps.failures = 0
            # Capped at the largest size a Fetch request can carry (int32).
            ps.max_bytes = min(2 * max(ps.max_bytes, m.config.max_partition_fetch_bytes),
                               _MAX_FETCH_BYTES)
            return
        self.remove(ps)
        if out.step is FetchStep.OUT_OF_RANGE:
            m.reset_offset(ps, why=f"offset {offset} out of range")
            return
        # A moved leader and any other error alike: place it again (the failure count gives
        # up on a partition that keeps failing).
        m.relocate(ps, f"{_name(out.code)} from broker {self.leader}")


class FetcherManager:
    """The fetchers of one consumer; see the module docstring."""

    log = Logger(namespace="sluice.consumer.fetcher")

    def __init__(self, cluster: ClusterClient, config: ConsumerConfig, clock: Any,
                 on_failed: Callable[[PartitionState, str], None], *,
                 before_handling: Callable[[], Any] = lambda: None) -> None:
        self.cluster = cluster
        self.config = config
        self.clock = clock
        self.on_failed = on_failed
        #: Called when a fetch answer arrives, before it is handled; it may stop the fetchers
        #: (the consumer acts on an overdue session timer there), and then the answer is
        #: dropped.
        self.before_handling = before_handling
        self.fetchers: dict[int, LeaderFetcher] = {}
        self.parts: dict[tuple[str, int], PartitionState] = {}
        self.homeless: dict[tuple[str, int], PartitionState] = {}
        self._placing = False
        self._place_timer: Any = None
        self._epoch = 0
        #: A failure happened since the last metadata refresh: the view's leaders are in doubt,
        #: the next placement refreshes even if the view names a leader for every partition.
        self._view_in_doubt = False

    # -- assignment -----------------------------------------------------------------------------

    def start(self, parts: Iterable[PartitionState]) -> None:
        """Fetch ``parts`` (a new assignment) from their leaders."""
        self.stop()
        self.parts = {ps.tp: ps for ps in parts}
        self.homeless = dict(self.parts)
        if self.homeless:
            self._schedule_placement(0.0)

    def stop(self) -> None:
        """Stop fetching everything. In-flight responses are dropped when they arrive."""
        self._epoch += 1
        for f in self.fetchers.values():
            f.stop()
        self.fetchers = {}
        self.parts = {}
        self.homeless = {}
        if self._place_timer is not None and self._place_timer.active():
            self._place_timer.cancel()
        self._place_timer = None

    def wake(self) -> None:
        """A stream has room again."""
        for f in self.fetchers.values():
            f.wake()

    @property
    def placed(self) -> dict[tuple[str, int], int]:
        """Partition -> leader being fetched from."""
        return {tp: f.leader for f in self.fetchers.values() for tp in f.parts}

    # -- errors ---------------------------------------------------------------------------------

    def relocate(self, ps: PartitionState, why: str) -> None:
        """The partition's leader is in doubt: refresh metadata and place it again."""
        if not ps.active or self.parts.get(ps.tp) is not ps:
            return
        ps.leader = -1
        ps.last_error = why
        self.homeless[ps.tp] = ps
        self._count_failure(ps, why)
        self._schedule_placement(self._backoff(ps))

    def leader_failed(self, fetcher: LeaderFetcher, why: str) -> None:
        if self.fetchers.get(fetcher.leader) is fetcher:
            del self.fetchers[fetcher.leader]
        parts = list(fetcher.parts.values())
        fetcher.stop()
        for ps in parts:
            self.relocate(ps, why)

    def reset_offset(self, ps: PartitionState, why: str) -> None:
        """Out of range: start again per ``auto.offset.reset`` (ListOffsets at the leader)."""
        if not ps.active or self.parts.get(ps.tp) is not ps:
            return
        self.log.info("{t}-{p}: {why}; resetting to the {where} offset", t=ps.topic,
                      p=ps.partition, why=why, where=self.config.reset_to)
        ps.last_error = why
        if ps.queued == 0 and ps.consumed == ps.fetch_offset:
            ps.consumed = -1  # nothing in between to deliver: the position follows the reset
        ps.fetch_offset = -1
        ps.leader = -1
        self.homeless[ps.tp] = ps
        self._schedule_placement(0.0)

    def _count_failure(self, ps: PartitionState, why: str) -> None:
        self._view_in_doubt = True
        ps.failures += 1
        if ps.failures >= self.config.fetch_max_partition_failures:
            self.log.warn("{t}-{p} failed {n} times in a row ({why}); giving up on it",
                          t=ps.topic, p=ps.partition, n=ps.failures, why=why)
            self.on_failed(ps, why)

    def _backoff(self, ps: PartitionState) -> float:
        if ps.failures <= 1:
            return 0.0
        return self.config.retry_wait_s(ps.failures - 1)

    # -- placement ------------------------------------------------------------------------------

    def _schedule_placement(self, delay: float) -> None:
        if self._placing:
            return
        if self._place_timer is not None and self._place_timer.active():
            if self._place_timer.getTime() <= self.clock.seconds() + delay:
                return
            self._place_timer.cancel()
        self._place_timer = self.clock.callLater(delay, self._place_now)

    def _place_now(self) -> None:
        self._place_timer = None
        self._placing = True
        d = defer.Deferred.fromCoroutine(self._place(self._epoch))

        def done(_: Any) -> None:
            self._placing = False
            if self.homeless:
                delay = max(self._backoff(ps) for ps in self.homeless.values())
                self._schedule_placement(max(delay, self.config.retry_backoff_ms / 1000.0))

        d.addErrback(lambda f: self.log.failure("placing partitions failed", f))
        d.addBoth(done)

    async def _place(self, epoch: int) -> None:
        homeless = list(self.homeless.values())
        if self._view_in_doubt or any(self.cluster.leader_for(ps.topic, ps.partition) < 0
                                      for ps in homeless):
            topics = sorted({ps.topic for ps in homeless})
            self._view_in_doubt = False  # failures from here on count against the new view
            try:
                await self.cluster.refresh(topics)
            except NETWORK_ERRORS as e:
                if epoch == self._epoch:
                    for ps in homeless:
                        self._count_failure(ps, f"metadata refresh failed: {e}")
                return
            if epoch != self._epoch:
                return
        unresolved: dict[int, list[PartitionState]] = {}
        for ps in homeless:
            if not ps.active or self.homeless.get(ps.tp) is not ps:
                continue
            leader = self.cluster.leader_for(ps.topic, ps.partition)
            if leader < 0:
                err = self.cluster.view.topic_errors.get(ps.topic)
                self._count_failure(ps, f"no leader ({err.name if err else 'LEADER_NOT_AVAILABLE'})")
                continue
            if ps.fetch_offset < 0:
                unresolved.setdefault(leader, []).append(ps)
                continue
            self._assign(ps, leader)
        self._start_new()
        for leader, parts in unresolved.items():
            await self._resolve_offsets(epoch, leader, parts)

    def _assign(self, ps: PartitionState, leader: int) -> None:
        self.homeless.pop(ps.tp, None)
        f = self.fetchers.get(leader)
        if f is None:
            f = self.fetchers[leader] = LeaderFetcher(self, leader)
        f.add(ps)

    def _start_new(self) -> None:
        # Started once every partition of this round is placed, so the first request of a
        # new fetcher asks for all of them (not one, then the rest after a long poll).
        for f in list(self.fetchers.values()):
            if not f.running:
                f.start()

    async def _resolve_offsets(self, epoch: int, leader: int,
                               parts: list[PartitionState]) -> None:
        ts = EARLIEST if self.config.reset_to == "earliest" else LATEST
        by_topic: dict[str, list[dict]] = {}
        for ps in parts:
            by_topic.setdefault(ps.topic, []).append(
                {"partition_index": ps.partition, "timestamp": ts, "current_leader_epoch": -1})
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()]}
        try:
            resp = await self.cluster.request(leader, ApiKey.LIST_OFFSETS, body)
        except NETWORK_ERRORS as e:
            if epoch == self._epoch:
                for ps in parts:
                    self._count_failure(ps, f"ListOffsets to broker {leader} failed: {e}")
            return
        if epoch != self._epoch:
            return
        index = {ps.tp: ps for ps in parts}
        for t in resp.topics:
            for p in t.partitions:
                ps = index.get((t.name, p.partition_index))
                if ps is None or not ps.active or self.homeless.get(ps.tp) is not ps:
                    continue
                if p.error_code:
                    self._count_failure(ps, f"ListOffsets: {_name(p.error_code)}")
                    continue
                ps.fetch_offset = p.offset
                if ps.consumed < 0:
                    ps.consumed = p.offset
                self._assign(ps, leader)
        self._start_new()


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
