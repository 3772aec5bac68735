"""Blocking cluster access for the data source: metadata, ListOffsets, and reading one offset
range of one partition into Arrow record batches.

Runs on the Spark driver (planning, streaming offsets) and in Python workers (reading). No
Twisted: a worker is a short-lived Python process that reads one range and leaves, so plain
sockets (:class:`~consumer_client.connection.BrokerConnection`) and a decoder are all it needs:
:func:`read_range` decodes column-wise into Arrow
(:mod:`consumer_client.spark.arrow_records`), :func:`read_messages` into the consumer's
:class:`~consumer_client.consumer_records.Message` tuples; both share the fetch loop,
:func:`read_chunks`.

Invariants of :func:`read_range`:

- it yields the records of ``[start, end)`` in offset order, each exactly once, whatever leader
  changes happen meanwhile: the next fetch offset only moves past records already yielded, and a
  retried fetch asks again for the same offset;
- it stops at ``end`` even when the broker returns more (a batch is fetched whole);
- a range it cannot read completely ends in :class:`DataLossError` when ``fail_on_data_loss``,
  otherwise it skips what was lost (offsets removed by retention: from the log start on;
  offsets past the log's end: it stops there) and says so in the log.

The cluster's brokers and leaders are a :class:`~consumer_client.cluster_view.ClusterView`
(the one the consumer and producer use), connections a
:class:`~consumer_client.connection_cache.ConnectionCache`, and what a Fetch answer means is
:func:`~consumer_client.fetch_outcome.fetch_outcome`. Every wait and deadline reads the
:class:`Cluster`'s clock (:class:`~consumer_client.blocking_clock.BlockingClock`, the real one
unless a test gives another), so no path here needs real time to pass.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from typing import Any

from broker_core.backoff import Backoff
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.blocking_clock import SYSTEM_CLOCK, BlockingClock
from consumer_client.cluster_view import ClusterView
from consumer_client.connection import BrokerConnection, NoBrokersAvailable, Pending, bootstrap
from consumer_client.connection_cache import ConnectionCache
from consumer_client.consumer_records import Message, decode_chunk
from consumer_client.fetch_outcome import LEADER_ERRORS, FetchStep, fetch_outcome
from consumer_client.security import ClientSecurity
from consumer_client.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
)
from consumer_client.spark.options import Subscription

log = logging.getLogger("sluice.spark")

# Waits between retries after a leader error or an unreachable broker: 50 ms doubling to 1 s.
_RETRY_INITIAL_S = 0.05
_RETRY_MAX_S = 1.0

DATA_LOSS_HINT = ("Some data may have been lost because it is not available in the cluster any "
                  "more (removed by retention, or the topic was deleted or truncated). If you "
                  "want the query to go on in such cases, set the source option "
                  "'failOnDataLoss' to 'false'.")


class SluiceSourceError(Exception):
    """The data source cannot go on; the message names the partition, the broker and the Kafka
    error, or the option to change."""


class DataLossError(SluiceSourceError):
    """Offsets the query must read are gone (see :data:`DATA_LOSS_HINT`)."""


def _error_name(code: int) -> str:
    try:
        e = ErrorCode(code)
        return f"{e.name} ({e.description})"
    except ValueError:
        return f"error code {code}"


class Cluster:
    """A blocking view of the cluster: partition leaders from Metadata (:attr:`view`), one
    cached connection per broker. Not thread-safe; one per task or per driver-side reader.

    A connection that fails is dropped and reopened on next use, and the connections of brokers
    that left the metadata are closed at each refresh; metadata is refreshed on request (after
    a leader error) and, for :meth:`partitions_of`, when older than ``metadata_max_age_s`` on
    ``clock``.
    """

    def __init__(self, servers: str, *, request_timeout_s: float = 30.0,
                 metadata_max_age_s: float = 1.0, client_id: str = "sluice-spark",
                 security: ClientSecurity | None = None,
                 clock: BlockingClock = SYSTEM_CLOCK) -> None:
        self.servers = servers
        self.security = security
        self.request_timeout_s = request_timeout_s
        self.metadata_max_age_s = metadata_max_age_s
        self.client_id = client_id
        self.clock = clock
        self.view = ClusterView()
        self._conns: ConnectionCache[int] = ConnectionCache(self._open)

    # -- connections ----------------------------------------------------------------------------

    def _open(self, node: int) -> BrokerConnection:
        host, port = self.view.brokers[node]
        return BrokerConnection(host, port, client_id=self.client_id,
                                timeout=self.request_timeout_s, security=self.security)

    def connection(self, node: int) -> BrokerConnection:
        return self._conns.get(node)

    def drop(self, node: int) -> None:
        self._conns.drop(node)

    def close(self) -> None:
        self._conns.close()

    # -- metadata -------------------------------------------------------------------------------

    def leader(self, tp: TopicPartition) -> int | None:
        """The partition's leader when the view has one and knows where to reach it."""
        node = self.view.leader_for(*tp)
        return node if node in self.view.brokers else None

    def refresh(self, topics: Iterable[str] | None = None) -> Any:
        """Metadata for ``topics`` (None: every topic) from a known broker, else bootstrap."""
        names = None if topics is None else sorted(set(topics))
        body = {"topics": None if names is None else [{"name": t} for t in names],
                "allow_auto_topic_creation": False}
        md = None
        for node in self._conns.keys() + [n for n in self.view.brokers if n not in self._conns]:
            try:
                md = self.connection(node).request(ApiKey.METADATA, body)
                break
            except OSError:
                self.drop(node)
        if md is None:
            try:
                with bootstrap(self.servers, client_id=self.client_id,
                               timeout=self.request_timeout_s, security=self.security) as conn:
                    md = conn.request(ApiKey.METADATA, body)
            except NoBrokersAvailable as e:
                raise SluiceSourceError(f"option 'bootstrap.servers': {e}") from None
        previous = self.view
        self.view = previous.updated(md, names, self.clock.monotonic())
        for node in self.view.brokers_gone(previous):
            self.drop(node)
        return md

    def partitions_of(self, sub: Subscription, *, max_age_s: float | None = None
                      ) -> list[TopicPartition]:
        """The partitions ``sub`` names now. A subscribed or assigned topic that does not exist,
        or an assigned partition it does not have, raises naming the option."""
        age = self.metadata_max_age_s if max_age_s is None else max_age_s
        fresh = self.view.is_fresh(self.clock.monotonic(), age)
        if sub.pattern is not None:
            if not fresh:
                self.refresh(None)
            rx = re.compile(sub.pattern)
            return sorted((t, p) for t, ps in self.view.topics.items()
                          if rx.fullmatch(t) for p in ps)
        topics = list(sub.topics) or list(sub.assign)
        if not fresh or any(t not in self.view.topics for t in topics):
            self.refresh(topics)
        out = []
        for t in topics:
            have = self.view.partitions_for(t)
            if have is None:
                code = self.view.topic_errors.get(t, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise SluiceSourceError(f"option {sub.option!r}: topic {t!r} does not exist "
                                            "(UNKNOWN_TOPIC_OR_PARTITION)")
                raise SluiceSourceError(f"option {sub.option!r}: topic {t!r} cannot be read: "
                                        f"{_error_name(code)}")
            if sub.assign:
                bad = [p for p in sub.assign[t] if p not in have]
                if bad:
                    raise SluiceSourceError(
                        f"option 'assign': topic {t!r} has no partition "
                        f"{', '.join(map(str, bad))} (it has {len(have)} partitions)")
                out += [(t, p) for p in sub.assign[t]]
            else:
                out += [(t, p) for p in have]
        return sorted(out)

    # -- offsets --------------------------------------------------------------------------------

    def list_offsets(self, tps: Iterable[TopicPartition], timestamp: int,
                     deadline_s: float | None = None) -> PartitionOffsets:
        """Each partition's earliest (``timestamp`` -2) or latest (-1) offset, asked of its
        leader; leader errors are retried (fresh metadata) until ``deadline_s`` (default: the
        request timeout) and then raise :class:`SluiceSourceError`."""
        want = set(tps)
        out: PartitionOffsets = {}
        deadline = self.clock.monotonic() + (self.request_timeout_s if deadline_s is None
                                       else deadline_s)
        last_error = ""
        backoff = Backoff(_RETRY_INITIAL_S, _RETRY_MAX_S)
        while want:
            if any(self.leader(tp) is None for tp in want):
                self.refresh({t for t, _ in want})
            by_leader: dict[int | None, list[TopicPartition]] = {}
            for tp in want:
                by_leader.setdefault(self.leader(tp), []).append(tp)
            for leader, parts in by_leader.items():
                if leader is None:
                    last_error = f"{parts[0][0]}-{parts[0][1]} has no leader"
                    continue
                topics: dict[str, list[int]] = {}
                for t, p in parts:
                    topics.setdefault(t, []).append(p)
                try:
                    resp = self.connection(leader).request(ApiKey.LIST_OFFSETS, {
                        "replica_id": -1, "isolation_level": 0, "topics": [
                            {"name": t, "partitions": [
                                {"partition_index": p, "timestamp": timestamp} for p in ps]}
                            for t, ps in topics.items()]})
                except OSError as e:
                    self.drop(leader)
                    last_error = f"broker {leader} unreachable ({e})"
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        if p.error_code == 0:
                            out[tp] = p.offset
                            want.discard(tp)
                        elif p.error_code in LEADER_ERRORS:
                            last_error = (f"{tp[0]}-{tp[1]} on broker {leader}: "
                                          f"{_error_name(p.error_code)}")
                        else:
                            raise SluiceSourceError(
                                f"ListOffsets for {tp[0]}-{tp[1]} from broker {leader} failed: "
                                f"{_error_name(p.error_code)}")
            if want:
                if self.clock.monotonic() > deadline:
                    raise SluiceSourceError(f"could not look up offsets of "
                                            f"{len(want)} partitions: {last_error}")
                self.clock.sleep(backoff.next_wait())
                self.refresh({t for t, _ in want})
        return out

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self.list_offsets(tps, EARLIEST)

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self.list_offsets(tps, LATEST)


# -- reading a range -------------------------------------------------------------------------------


def read_range(cluster: Cluster, rng: OffsetRange, *, fail_on_data_loss: bool = True,
               include_headers: bool = False, max_partition_fetch_bytes: int = 4 << 20,
               poll_timeout_s: float = 120.0, max_wait_ms: int = 500) -> Iterator[Any]:
    """Arrow record batches of the records of ``rng`` (see the module docstring), decoded
    column-wise (:func:`~consumer_client.spark.arrow_records.decode_record_batch`).
    ``rng.start`` may be :data:`EARLIEST` (a partition new to a streaming query)."""
    from consumer_client.spark.arrow_records import decode_record_batch

    for data, offset, end in read_chunks(cluster, rng, fail_on_data_loss=fail_on_data_loss,
                                         max_partition_fetch_bytes=max_partition_fetch_bytes,
                                         poll_timeout_s=poll_timeout_s,
                                         max_wait_ms=max_wait_ms):
        batch = decode_record_batch(rng.topic, rng.partition, data, offset, end,
                                    include_headers=include_headers)
        if batch is not None:
            yield batch


def read_messages(cluster: Cluster, rng: OffsetRange, *, fail_on_data_loss: bool = True,
                  max_partition_fetch_bytes: int = 4 << 20, poll_timeout_s: float = 120.0,
                  max_wait_ms: int = 500) -> Iterator[list[Message]]:
    """Lists of :class:`Message` covering ``rng``, decoded by the consumer's decoder (one list
    per Fetch response that had any)."""
    for data, offset, end in read_chunks(cluster, rng, fail_on_data_loss=fail_on_data_loss,
                                         max_partition_fetch_bytes=max_partition_fetch_bytes,
                                         poll_timeout_s=poll_timeout_s,
                                         max_wait_ms=max_wait_ms):
        messages = decode_chunk(rng.topic, rng.partition, data, offset)
        if messages and messages[-1].offset >= end:
            messages = [m for m in messages if m.offset < end]
        if messages:
            yield messages


def read_chunks(cluster: Cluster, rng: OffsetRange, *, fail_on_data_loss: bool = True,
                max_partition_fetch_bytes: int = 4 << 20, poll_timeout_s: float = 120.0,
                max_wait_ms: int = 500) -> Iterator[tuple[bytes | memoryview, int, int]]:
    """``(record_data, fetch_offset, end)`` per Fetch response covering ``rng``: the complete
    batches the leader returned for ``fetch_offset``, to be decoded by the caller, which keeps
    the records in ``[fetch_offset, end)``. Consecutive chunks' fetch offsets only move past
    the batches already yielded (batch headers are scanned, nothing is decoded here).

    The fetch for the next chunk is sent before a chunk is handed over, so the leader reads
    and sends it while the caller decodes (one request ahead, on the same connection; if the
    caller stops early, that connection is closed, since its answer would otherwise be taken
    for the next request's).

    Backoffs and the ``poll_timeout_s`` deadline run on ``cluster.clock``."""
    ahead: list[tuple[int, int, Pending] | None] = [None]  # (leader, offset, request) sent early
    try:
        yield from _read_chunks(cluster, rng, fail_on_data_loss, max_partition_fetch_bytes,
                                poll_timeout_s, max_wait_ms, ahead)
    finally:
        if ahead[0] is not None:
            cluster.drop(ahead[0][0])


def _fetch_body(topic: str, partition: int, offset: int, max_bytes: int,
                max_wait_ms: int) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _fetch_at(cluster: Cluster, leader: int, early: tuple[int, int, Pending] | None,
              topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int
              ) -> tuple[Any, Any]:
    """``(connection, answer)`` of a fetch at ``offset`` from ``leader``: the one sent early if it
    is that fetch, else a new one (an early fetch of anything else is dropped with its
    connection, unread). Raises OSError when the connection fails."""
    conn = cluster.connection(leader)
    if early is not None and early[:2] == (leader, offset):
        pending = early[2]
    else:
        if early is not None:  # not the fetch wanted now: its answer must not be read
            cluster.drop(early[0])
            conn = cluster.connection(leader)
        pending = conn.send(ApiKey.FETCH, _fetch_body(
            topic, partition, offset, max_bytes, max_wait_ms))
    return conn, conn.receive(pending)


def _out_of_range(cluster: Cluster, tp: tuple[str, int], where: str, offset: int, end: int,
                  fail_on_data_loss: bool) -> int | None:
    """After OFFSET_OUT_OF_RANGE at ``offset``: the offset to read on from (past lost offsets,
    or ``offset`` again when the log moved between the fetch and the lookup), or None when the
    log ends before ``end``. Raises DataLossError for lost offsets if ``fail_on_data_loss``."""
    first = cluster.earliest([tp])[tp]
    last = cluster.latest([tp])[tp]
    if offset < first:
        lost_to = min(first, end)
        if fail_on_data_loss:
            raise DataLossError(
                f"offsets [{offset}, {lost_to}) of {where} are gone: the partition "
                f"starts at {first} now. {DATA_LOSS_HINT}")
        log.warning("skipping lost offsets [%d, %d) of %s (failOnDataLoss=false)",
                    offset, lost_to, where)
        return lost_to
    if offset >= last:
        _past_end(where, offset, end, last, fail_on_data_loss)
        return None
    return offset  # the log moved between the fetch and the lookup: try again


def _read_chunks(cluster: Cluster, rng: OffsetRange, fail_on_data_loss: bool,
                 max_partition_fetch_bytes: int, poll_timeout_s: float, max_wait_ms: int,
                 ahead: list[tuple[int, int, Pending] | None]
                 ) -> Iterator[tuple[bytes | memoryview, int, int]]:
    """:func:`read_chunks`'s loop; ``ahead[0]`` is the fetch sent early, if any."""
    topic, partition, offset, end = rng
    tp = (topic, partition)
    where = f"{topic}-{partition}"
    if offset == EARLIEST:
        offset = cluster.earliest([tp])[tp]
    clock = cluster.clock
    deadline = clock.monotonic() + poll_timeout_s
    backoff = Backoff(_RETRY_INITIAL_S, _RETRY_MAX_S)
    last_error = "no answer yet"
    while offset < end:
        if clock.monotonic() > deadline:
            raise SluiceSourceError(
                f"reading {where} offsets [{offset}, {end}) made no progress for "
                f"{poll_timeout_s:.0f}s (kafkaConsumer.pollTimeoutMs): {last_error}")
        leader = cluster.leader(tp)
        if leader is None:
            cluster.refresh([topic])
            leader = cluster.leader(tp)
            if leader is None:
                last_error = f"{where} has no leader"
                clock.sleep(backoff.next_wait())
                continue
        early, ahead[0] = ahead[0], None
        try:
            conn, resp = _fetch_at(cluster, leader, early, topic, partition, offset,
                                   max_partition_fetch_bytes, max_wait_ms)
        except OSError as e:
            # The leader died or moved away: find the new one and ask it for the same offset.
            cluster.drop(leader)
            last_error = f"fetch from broker {leader} failed ({e})"
            _pause_and_refresh(cluster, topic, backoff.next_wait())
            continue
        p = resp.responses[0].partitions[0] if resp.responses and resp.responses[0].partitions \
            else None
        # The decision is the consumer's too (fetch_outcome); what follows from it differs:
        # any error but a leader's fails the task, and lost offsets go by failOnDataLoss.
        out = fetch_outcome(p, offset, resp.error_code)
        if out.step is FetchStep.LEADER_MOVED:
            last_error = f"broker {leader} answered {_error_name(out.code)} for {where}"
            _pause_and_refresh(cluster, topic, backoff.next_wait())
            continue
        if out.step is FetchStep.OUT_OF_RANGE:
            resume = _out_of_range(cluster, tp, where, offset, end, fail_on_data_loss)
            if resume is None:
                return
            offset = resume
            continue
        if out.step is FetchStep.FAILED:
            raise SluiceSourceError(f"fetch of {where} at offset {offset} from broker {leader} "
                                    f"failed: {_error_name(out.code)}")
        if out.step is FetchStep.RECORDS:
            nxt = out.next_offset
            if nxt < end:
                try:
                    ahead[0] = (leader, nxt, conn.send(ApiKey.FETCH, _fetch_body(
                        topic, partition, nxt, max_partition_fetch_bytes, max_wait_ms)))
                except OSError:
                    cluster.drop(leader)  # the next turn reconnects (or finds a new leader)
            assert out.records is not None
            yield out.records, offset, end
            offset = nxt
            deadline = clock.monotonic() + poll_timeout_s
            backoff.reset()
            continue
        if out.step is FetchStep.TOO_LARGE and out.size >= max_partition_fetch_bytes:
            # A single batch larger than asked for: ask for more rather than stall.
            max_partition_fetch_bytes = min(2 * max_partition_fetch_bytes, 2**31 - 1)  # int32
            continue
        # Nothing at `offset` yet although `end` is past it: a new leader whose high watermark
        # has not caught up, or a log that really ends before `end` (truncated).
        hw = out.high_watermark
        last_error = f"no records at offset {offset}; high watermark {hw}"
        if hw <= offset and clock.monotonic() + max_wait_ms / 1000 > deadline:
            _past_end(where, offset, end, hw, fail_on_data_loss)
            return


def _pause_and_refresh(cluster: Cluster, topic: str, delay: float) -> None:
    cluster.clock.sleep(delay)
    try:
        cluster.refresh([topic])
    except SluiceSourceError:
        pass  # no broker reachable right now; the caller's deadline decides when to give up


def _past_end(where: str, offset: int, end: int, log_end: int, fail: bool) -> None:
    if fail:
        raise DataLossError(f"offsets [{offset}, {end}) of {where} cannot be read: the partition "
                            f"ends at {log_end}. {DATA_LOSS_HINT}")
    log.warning("offsets [%d, %d) of %s are past the partition's end %d; skipped "
                "(failOnDataLoss=false)", offset, end, where, log_end)
