"""The Twisted-native producer: ``send()`` records, get Deferreds of where they landed.

Pieces (Kafka's producer in small): the partitioner (:mod:`consumer_client.partitioner`) picks a
partition, the :class:`~consumer_client.producer_accumulator.RecordAccumulator` appends the
encoded record to that partition's open batch, and the sender (the ``_run`` half of
:class:`Producer`) sends ready batches to partition leaders, many partitions per Produce request,
up to ``max.in.flight.requests.per.connection`` pipelined requests per broker, and completes,
retries or fails each batch from the response. :mod:`consumer_client.producer_retry` decides
retries; metadata comes from the shared :class:`~consumer_client.cluster.ClusterClient`, refreshed
by :class:`~consumer_client.producer_metadata.MetadataRefresher`; with ``enable.idempotence``,
:class:`~consumer_client.producer_id_requests.ProducerIdRequester` gets the producer id and epoch.

Invariants:

- per partition, records are acknowledged in the order they were sent, retries included: at
  most one batch of a partition is in flight, and a retried batch goes back to the front;
- every ``send()`` Deferred fires exactly once: with a :class:`RecordMetadata`, or with a
  :class:`~consumer_client.producer_errors.ProducerError` that names the topic, the partition,
  the broker and Kafka's error;
- memory held by unacknowledged records stays under ``buffer.memory``: a send that does not fit
  waits (FIFO, outside the buffer) until acknowledged batches free enough, for at most
  ``max.block.ms``; ``wait_for_capacity()`` lets a sending loop pause instead of queueing;
- all state is touched on the reactor thread only, except what
  :class:`~consumer_client.blocking_producer.BlockingProducer` does under ``_lock``.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from twisted.internet import defer
from twisted.internet.error import ConnectError, ConnectionLost
from twisted.logger import Logger
from twisted.python.failure import Failure

from broker_core.rpc import RequestTimedOut
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.cluster import ClusterClient
from consumer_client.connection import NoBrokersAvailable
from consumer_client.producer_accumulator import (
    BATCH_FULL,
    NEW_BATCH,
    RECORD_OVERHEAD,
    ProducerBatch,
    RecordAccumulator,
)
from consumer_client.producer_config import ProducerConfig
from consumer_client.producer_errors import (
    AuthenticationFailed,
    BufferExhausted,
    DeliveryTimeout,
    MetadataUnavailable,
    ProduceError,
    ProducerClosed,
    RecordTooLarge,
    UnknownTopic,
)
from consumer_client.producer_id_requests import ProducerIdRequester
from consumer_client.producer_idempotence import NEEDS_BUMP, ProducerIdentity
from consumer_client.producer_metadata import MetadataRefresher
from consumer_client.producer_retry import Action, decide

# The network-level errors after which a request's batches are retried (nothing was answered).
_TRANSIENT = (ConnectError, ConnectionLost, RequestTimedOut, defer.TimeoutError, OSError,
              NoBrokersAvailable)

# Client-side wait beyond the broker-side Produce timeout, so that the broker's own answer
# (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, ...) normally wins over a bare timeout.
_NETWORK_MARGIN_S = 1.0

# How far a partition's open batch may grow while its previous batch is in flight: under
# max.request.size, and under the broker's message.max.bytes default (1048588) with room for
# the request around it, so a grown batch is never refused as too large.
_MAX_GROWN_BATCH = 1_000_000

Headers = Sequence[tuple[str, bytes | None]]


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. ``offset`` is -1 with acks=0 (no answer)."""

    topic: str
    partition: int
    offset: int


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    """The bytes a record is charged against ``buffer.memory`` (an upper bound of its encoding)."""
    size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (
        len(key) if key is not None else 0)
    if headers:
        size += sum(10 + len(k) * 3 + (len(v) if v is not None else 0) for k, v in headers)
    return size


class _Parked:
    """A send that waits for metadata or for memory: its arguments and its Deferred."""

    __slots__ = ("args", "size", "d", "timer")

    def __init__(self, args: tuple, size: int, d: defer.Deferred) -> None:
        self.args = args
        self.size = size
        self.d = d
        self.timer: Any = None


class Producer:
    """A Kafka producer on the Twisted reactor (see the module docstring for its invariants).

    ``Producer({"bootstrap.servers": "127.0.0.1:9092", "acks": "all"})`` or keyword arguments
    with underscores (``Producer(bootstrap_servers=..., linger_ms=10)``). ``reactor`` is the
    clock and connector (a ``task.Clock`` with a fake ``cluster`` in unit tests).
    """

    log = Logger(namespace="sluice.client.producer")

    def __init__(self, config: ProducerConfig | Mapping[str, object] | None = None, *,
                 reactor: Any = None, cluster: ClusterClient | None = None,
                 **kwargs: object) -> None:
        if not isinstance(config, ProducerConfig):
            config = ProducerConfig.from_kwargs(config, **kwargs)
        if reactor is None:
            from twisted.internet import reactor as default_reactor
            reactor = default_reactor
        self.config = cfg = config
        self._clock = reactor
        self._cluster = cluster or ClusterClient(
            cfg.bootstrap_servers, reactor=reactor, client_id=cfg.client_id,
            request_timeout_s=cfg.request_timeout_ms / 1000, security=cfg.security)
        self._partitioner = cfg.partitioner
        self._acc = RecordAccumulator(batch_size=cfg.batch_size, linger_s=cfg.linger_ms / 1000,
                                      buffer_memory=cfg.buffer_memory,
                                      delivery_timeout_s=cfg.delivery_timeout_ms / 1000,
                                      max_batch=min(cfg.max_request_size, _MAX_GROWN_BATCH))
        self._max_record = min(cfg.max_request_size, cfg.buffer_memory)
        self._linger_s = cfg.linger_ms / 1000
        self._backoff_s = cfg.retry_backoff_ms / 1000
        self._max_block_s = cfg.max_block_ms / 1000
        # topic -> (all partitions sorted, partitions with a leader); (topic, p) -> leader id
        self._topics: dict[str, tuple[list[int], list[int]]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        # Partitions whose leader answered "not me" (or could not be reached): treated as
        # leaderless until the next metadata refresh, so a retry never goes back to it first.
        self._stale: set[tuple[str, int]] = set()
        self._topic_errors: dict[str, ErrorCode] = {}
        #: Asks the brokers about the topics in use; hands the answers to :meth:`_apply`.
        self._metadata = MetadataRefresher(self)
        self._meta_waiters: dict[str, list[_Parked]] = {}
        #: Bytes of the sends in ``_meta_waiters``: outside the buffer, but counted by
        #: ``wait_for_capacity`` so a loop that awaits it stays bounded before metadata arrives.
        self._parked_bytes = 0
        self._topic_waiters: dict[str, list[defer.Deferred]] = {}
        self._mem_waiters: deque[_Parked] = deque()
        self._capacity_waiters: list[tuple[int, defer.Deferred]] = []
        self._in_flight: dict[int, int] = {}
        #: ``enable.idempotence``: the producer id, epoch and sequences (None: off).
        self._identity = ProducerIdentity() if cfg.enable_idempotence else None
        self._id_requests = ProducerIdRequester(self)
        self._timer: Any = None
        self._closed = False
        self._stopped = False
        self._close_d: defer.Deferred | None = None
        #: Guards the accumulator when a BlockingProducer appends from another thread.
        self._lock: Any = contextlib.nullcontext()
        #: Called on the reactor thread whenever memory was released (the blocking producer
        #: wakes its waiting senders).
        self._on_release: Callable[[], None] | None = None

    # -- the application's API ---------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             partition: int | None = None, headers: Headers | None = None,
             timestamp: int | None = None) -> defer.Deferred:
        """Queue one record; the Deferred fires with its :class:`RecordMetadata` once the
        broker acknowledged it (per ``acks``), or fails with a
        :class:`~consumer_client.producer_errors.ProducerError`.

        ``partition`` None lets the partitioner choose; ``timestamp`` is CreateTime in ms (now
        if None). Never blocks: without metadata for the topic or room in ``buffer.memory``
        the record waits (up to ``max.block.ms``) and the Deferred fires later.
        """
        parts = self._topics.get(topic)
        size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (
            len(key) if key is not None else 0)
        if (parts is None or self._closed or self._mem_waiters or headers
                or not self._acc.has_room(size) or size > self._max_record):
            return self._send_slow(topic, value, key, partition, headers, timestamp)
        if partition is None:
            partition = self._partitioner.partition(topic, key, parts[0], parts[1])
        elif not 0 <= partition < len(parts[0]):
            return defer.fail(self._bad_partition(topic, partition, len(parts[0])))
        now = self._clock.seconds()
        if timestamp is None:
            timestamp = int(now * 1000)
        d: defer.Deferred = defer.Deferred()
        batch, _, flags = self._acc.append(topic, partition, key, value, headers, timestamp, now)
        batch.waiters.append(d)
        if flags:
            self._on_append(flags)
        return d

    def flush(self) -> defer.Deferred:
        """Send everything queued now without waiting for ``linger.ms``; fires (with None) when
        every record sent before the call has completed (acknowledged or failed)."""
        return defer.Deferred.fromCoroutine(self._flush())

    def wait_for_capacity(self, nbytes: int | None = None) -> defer.Deferred:
        """Fires (with None) once ``nbytes`` (default ``max.request.size``) fit into
        ``buffer.memory`` and no earlier send is waiting for memory: ``await`` it in a sending
        loop to apply backpressure instead of parking sends. Already fired when there is room.
        The default waits for a whole request's worth of room: resuming after every freed batch
        would ping-pong between the loop and the sender (measured: 3x slower)."""
        need = self.config.max_request_size if nbytes is None else nbytes
        need = min(need, self.config.buffer_memory)
        if not self._mem_waiters and self._acc.has_room(need + self._parked_bytes):
            return defer.succeed(None)
        d: defer.Deferred = defer.Deferred()
        self._capacity_waiters.append((need, d))
        return d

    @property
    def buffer_used(self) -> int:
        """Bytes of ``buffer.memory`` held by records not yet acknowledged."""
        return self._acc.used

    def partitions_for(self, topic: str) -> defer.Deferred:
        """Fires with the topic's partition ids (fetching metadata if needed), or fails with
        :class:`~consumer_client.producer_errors.UnknownTopic` after ``max.block.ms``."""
        return self.wait_for_topic(topic).addCallback(lambda _: list(self._topics[topic][0]))

    def wait_for_topic(self, topic: str) -> defer.Deferred:
        """Fires (with None) once ``topic`` is in the metadata; fails with
        :class:`~consumer_client.producer_errors.UnknownTopic` after ``max.block.ms``."""
        if topic in self._topics:
            return defer.succeed(None)
        d: defer.Deferred = defer.Deferred()
        waiters = self._topic_waiters.setdefault(topic, [])
        waiters.append(d)
        timer = self._clock.callLater(self._max_block_s, self._topic_wait_expired, topic, d)
        d.addBoth(lambda r: (timer.active() and timer.cancel(), r)[1])
        self._metadata.want(topic)
        return d

    def close(self, timeout: float | None = None) -> defer.Deferred:
        """Stop accepting records, deliver what is queued (waiting at most ``timeout`` seconds,
        None: as long as delivery takes), fail whatever is left with
        :class:`~consumer_client.producer_errors.ProducerClosed`, close the connections.
        Idempotent; fires with None."""
        if self._close_d is None:
            self._closed = True
            self._close_d = defer.Deferred.fromCoroutine(self._close(timeout))
        return _chain(self._close_d)

    # -- appending ---------------------------------------------------------------------------

    def _send_slow(self, topic: str, value: bytes | None, key: bytes | None,
                   partition: int | None, headers: Headers | None, timestamp: int | None,
                   parked: _Parked | None = None) -> defer.Deferred:
        """Every case the fast path in :meth:`send` leaves out: no metadata yet, closed, memory
        short or others already waiting for it, headers, oversized records."""
        d = parked.d if parked is not None else defer.Deferred()
        if parked is None:
            if self._closed:
                d.errback(Failure(ProducerClosed(f"producer closed; record for topic {topic!r} "
                                                 "not sent")))
                return d
            if timestamp is None:
                timestamp = int(self._clock.seconds() * 1000)
            size = record_size(key, value, headers)
            if size > self._max_record:
                d.errback(Failure(RecordTooLarge(
                    f"a record of about {size} bytes for topic {topic!r} is larger than "
                    f"max.request.size ({self.config.max_request_size}) or buffer.memory "
                    f"({self.config.buffer_memory})")))
                return d
            parked = _Parked((topic, value, key, partition, headers, timestamp), size, d)
        parts = self._topics.get(topic)
        if parts is None:
            self._park_for_metadata(topic, parked)
            return d
        if partition is not None and not 0 <= partition < len(parts[0]):
            d.errback(Failure(self._bad_partition(topic, partition, len(parts[0]))))
            return d
        if (self._mem_waiters and self._mem_waiters[0] is not parked) or not self._acc.has_room(
                parked.size):
            if parked.timer is None or not parked.timer.active():
                parked.timer = self._clock.callLater(self._max_block_s, self._memory_wait_expired,
                                                     parked)
            if parked not in self._mem_waiters:
                self._mem_waiters.append(parked)
            return d
        self._append(parked)
        return d

    def _append(self, parked: _Parked) -> None:
        topic, value, key, partition, headers, timestamp = parked.args
        parts = self._topics[topic]
        if partition is None:
            partition = self._partitioner.partition(topic, key, parts[0], parts[1])
        if parked.timer is not None and parked.timer.active():
            parked.timer.cancel()
        try:
            batch, _, flags = self._acc.append(topic, partition, key, value, headers, timestamp,
                                               self._clock.seconds())
        except Exception as e:  # a value that is not bytes: this record fails, nothing else
            parked.d.errback(Failure(e))
            return
        batch.waiters.append(parked.d)
        if flags:
            self._on_append(flags)

    @staticmethod
    def _bad_partition(topic: str, partition: int, count: int) -> ProduceError:
        return ProduceError(topic, partition, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"the topic has {count} partitions (0..{count - 1})")

    def _park_for_metadata(self, topic: str, parked: _Parked) -> None:
        self._meta_waiters.setdefault(topic, []).append(parked)
        self._parked_bytes += parked.size
        parked.timer = self._clock.callLater(self._max_block_s, self._metadata_wait_expired,
                                             topic, parked)
        self._metadata.want(topic)

    def _unknown_topic(self, topic: str) -> UnknownTopic | MetadataUnavailable:
        """The error of a send or a wait for ``topic`` that outlived ``max.block.ms``: the
        brokers' word on the topic if one answered, else why none did."""
        within = f"max.block.ms={self.config.max_block_ms}"
        if topic not in self._topic_errors and self._metadata.error is not None:
            return MetadataUnavailable(topic, None, -1, None,
                                       f"within {within}: {self._metadata.error}")
        return UnknownTopic(topic, None, -1, self._topic_errors.get(topic),
                            f"not found within {within}")

    def _metadata_wait_expired(self, topic: str, parked: _Parked) -> None:
        waiting = self._meta_waiters.get(topic, [])
        if parked in waiting:
            waiting.remove(parked)
            self._parked_bytes -= parked.size
            parked.d.errback(Failure(self._unknown_topic(topic)))
            self._memory_released()

    def _topic_wait_expired(self, topic: str, d: defer.Deferred) -> None:
        waiting = self._topic_waiters.get(topic, [])
        if d in waiting:
            waiting.remove(d)
            d.errback(Failure(self._unknown_topic(topic)))

    def _memory_wait_expired(self, parked: _Parked) -> None:
        if parked in self._mem_waiters:
            self._mem_waiters.remove(parked)
            topic = parked.args[0]
            parked.d.errback(Failure(BufferExhausted(
                f"no room for a {parked.size}-byte record for topic {topic!r} in buffer.memory "
                f"({self.config.buffer_memory} bytes, {self._acc.used} in use) within "
                f"max.block.ms={self.config.max_block_ms}: the brokers do not acknowledge as "
                "fast as records are sent")))
            self._memory_released()

    def _memory_released(self) -> None:
        """Admit waiting sends in order while they fit, then wake capacity waiters."""
        while self._mem_waiters and self._acc.has_room(self._mem_waiters[0].size):
            self._append(self._mem_waiters.popleft())
        if self._capacity_waiters and not self._mem_waiters:
            still = []
            for need, d in self._capacity_waiters:
                if self._acc.has_room(need + self._parked_bytes):
                    d.callback(None)
                else:
                    still.append((need, d))
            self._capacity_waiters = still
        if self._on_release is not None:
            self._on_release()

    # -- metadata (refreshed by MetadataRefresher) ------------------------------------------

    def _authentication_failed(self, error: AuthenticationFailed) -> None:
        """Fail every send and wait parked for metadata with ``error`` now (retrying would be
        refused the same way); a later send tries again."""
        self.log.error("{error}", error=error)
        meta, self._meta_waiters = self._meta_waiters, {}
        topic_waiters, self._topic_waiters = self._topic_waiters, {}
        for parked in [p for ps in meta.values() for p in ps]:
            if parked.timer is not None and parked.timer.active():
                parked.timer.cancel()
            self._parked_bytes -= parked.size
            parked.d.errback(Failure(error))
        for d in [d for ds in topic_waiters.values() for d in ds]:
            d.errback(Failure(error))
        self._memory_released()

    def _apply(self, view: Any, topics: list[str]) -> None:
        for topic in topics:
            parts = view.topics.get(topic)
            if not parts:
                if topic in view.topic_errors:
                    self._topic_errors[topic] = view.topic_errors[topic]
                continue
            ids = sorted(parts)
            self._topics[topic] = (ids, [p for p in ids if parts[p].leader >= 0])
            for p in ids:
                self._leaders[(topic, p)] = parts[p].leader
                self._stale.discard((topic, p))
            for d in self._topic_waiters.pop(topic, []):
                d.callback(None)
            for parked in self._meta_waiters.pop(topic, []):
                if parked.timer is not None and parked.timer.active():
                    parked.timer.cancel()
                parked.timer = None
                self._parked_bytes -= parked.size
                self._send_slow(*parked.args, parked=parked)
        self._memory_released()

    def _leader_of(self, topic: str, partition: int) -> int:
        tp = (topic, partition)
        if tp in self._stale:
            return -1
        return self._leaders.get(tp, -1)

    # -- the sender --------------------------------------------------------------------------

    def _on_append(self, flags: int) -> None:
        if flags & BATCH_FULL:
            self._schedule(0)
        elif flags & NEW_BATCH:
            self._schedule(self._linger_s)

    def _schedule(self, delay: float) -> None:
        """Run the sender ``delay`` seconds from now, unless it already runs sooner."""
        if self._stopped:
            return
        t = self._timer
        if t is not None and t.active():
            if t.getTime() <= self._clock.seconds() + delay:
                return
            t.reset(delay)
        else:
            self._timer = self._clock.callLater(delay, self._run)

    def _can_send(self, node: int) -> bool:
        return self._in_flight.get(node, 0) < self.config.max_in_flight_requests_per_connection

    def _run(self) -> None:
        """One sender pass: fail expired batches, send ready ones, re-arm the timer."""
        self._timer = None
        if self._stopped:
            return
        now = self._clock.seconds()
        can_send = self._can_send
        if self._identity is not None and not self._identity.ready:
            # Nothing is sent without a producer id, nor while the epoch waits to be bumped;
            # the drain still fails expired batches.
            self._id_requests.maybe_request()
            can_send = _never
        with self._lock:
            ready, next_delay, unknown, expired = self._acc.drain(
                now, self._leader_of, can_send, self.config.max_request_size)
        for batch in expired:
            self._finish(batch, -1, self._timeout_error(batch))
        if unknown:
            self._metadata.request_refresh()
        for node, batches in ready.items():
            self._send(node, batches)
        if next_delay is not None:
            self._schedule(max(next_delay, 0.0))
        elif unknown:
            self._schedule(self._backoff_s)

    def _send(self, node: int, batches: list[ProducerBatch]) -> None:
        cfg = self.config
        topic_data: dict[str, list[dict]] = {}
        for b in batches:
            if self._identity is not None and b.payload is None:
                b.producer_id, b.producer_epoch, b.base_sequence = self._identity.stamp(
                    b.topic, b.partition, b.count)
            b.attempts += 1
            b.last_broker = node
            topic_data.setdefault(b.topic, []).append(
                {"index": b.partition, "records": b.seal(cfg.compression_type)})
        body = {"transactional_id": None, "acks": cfg.acks, "timeout_ms": cfg.request_timeout_ms,
                "topic_data": [{"name": t, "partition_data": pd} for t, pd in topic_data.items()]}
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        if cfg.acks == 0:
            d = defer.Deferred.fromCoroutine(self._cluster.send_oneway(node, ApiKey.PRODUCE, body))
            d.addCallbacks(self._on_written, self._on_request_failed, callbackArgs=(node, batches),
                           errbackArgs=(node, batches))
        else:
            d = defer.Deferred.fromCoroutine(self._cluster.request(
                node, ApiKey.PRODUCE, body, cfg.request_timeout_ms / 1000 + _NETWORK_MARGIN_S))
            d.addCallbacks(self._on_response, self._on_request_failed,
                           callbackArgs=(node, batches), errbackArgs=(node, batches))
        d.addErrback(lambda f: self.log.failure("handling a Produce response failed", f))

    def _on_written(self, _: Any, node: int, batches: list[ProducerBatch]) -> None:
        self._in_flight[node] -= 1
        for b in batches:
            self._finish(b, -1, None)
        self._schedule(0)

    def _on_response(self, resp: Any, node: int, batches: list[ProducerBatch]) -> None:
        self._in_flight[node] -= 1
        by_tp = {(b.topic, b.partition): b for b in batches}
        now = self._clock.seconds()
        refresh = False
        for t in resp.responses:
            for p in t.partition_responses:
                b = by_tp.pop((t.name, p.index), None)
                if b is None:
                    continue
                if p.error_code == 0 or (p.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
                                         and self._identity is not None):
                    # A duplicate: a retry of a batch the leader holds (older brokers say so
                    # with this error; Sluice's answer a success with the original offsets).
                    self._finish(b, p.base_offset, None)
                    continue
                try:
                    code = ErrorCode(p.error_code)
                except ValueError:
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                if self._identity is not None and code in NEEDS_BUMP:
                    self.log.warn("{topic}-{partition}: {error}; bumping the producer epoch",
                                  topic=b.topic, partition=b.partition, error=code.name)
                    self._identity.bump_needed = True
                refresh |= self._retry_or_fail(b, code, getattr(p, "error_message", None) or "",
                                               now, node)
        for b in by_tp.values():
            refresh |= self._retry_or_fail(b, None, "the response did not mention the partition",
                                           now, node)
        if refresh:
            self._metadata.request_refresh()
        self._schedule(0)

    def _on_request_failed(self, failure: Failure, node: int,
                           batches: list[ProducerBatch]) -> None:
        self._in_flight[node] -= 1
        err = failure.value
        now = self._clock.seconds()
        if isinstance(err, _TRANSIENT):
            detail = f"no answer: {err.__class__.__name__}: {err}"
            for b in batches:
                self._retry_or_fail(b, None, detail, now, node)
            self._cluster.disconnect(node)
            self._metadata.request_refresh()
        else:  # a bug or an unsupported API: retrying would fail the same way
            self.log.failure("Produce to broker {node} failed", failure, node=node)
            for b in batches:
                self._finish(b, -1, ProduceError(b.topic, b.partition, node, None,
                                                 f"{err.__class__.__name__}: {err}", b.attempts))
        self._schedule(0)

    def _retry_or_fail(self, b: ProducerBatch, code: ErrorCode | None, detail: str, now: float,
                       node: int) -> bool:
        """Apply :func:`~consumer_client.producer_retry.decide`; True if metadata is stale."""
        b.last_error, b.last_detail = code, detail
        if self._stopped:
            self._finish(b, -1, ProducerClosed(
                f"producer closed before topic {b.topic!r} partition {b.partition} was "
                f"acknowledged (last error: {code.name if code else detail})"))
            return False
        action = decide(code, b.attempts, self.config.retries, now, b.created, self._backoff_s,
                        self._acc.delivery_timeout_s)
        if action is Action.RETRY or action is Action.RETRY_AFTER_REFRESH:
            self.log.debug("retrying {topic}-{partition} after {error} from broker {node}",
                           topic=b.topic, partition=b.partition, error=code or detail, node=node)
            with self._lock:
                self._acc.reenqueue(b, now + self._backoff_s)
            if action is Action.RETRY_AFTER_REFRESH:
                self._stale.add((b.topic, b.partition))
                return True
            return False
        if action is Action.TIMEOUT:
            self._finish(b, -1, self._timeout_error(b))
        else:
            self._finish(b, -1, ProduceError(b.topic, b.partition, node, code, detail,
                                             b.attempts))
        return False

    def _timeout_error(self, b: ProducerBatch) -> DeliveryTimeout:
        detail = b.last_detail
        if not b.attempts and not detail:
            leader = self._leader_of(b.topic, b.partition)
            detail = ("no leader known for the partition" if leader < 0
                      else f"never sent (leader broker {leader} did not take more requests)")
        return DeliveryTimeout(b.topic, b.partition, b.last_broker, b.last_error, detail,
                               b.attempts, self.config.delivery_timeout_ms)

    def _finish(self, b: ProducerBatch, base_offset: int, error: BaseException | None) -> None:
        """Complete a batch once: fire its records' Deferreds/futures, free its memory."""
        with self._lock:
            if b.done:
                return
            b.base_offset, b.error, b.done = base_offset, error, True
            self._acc.release(b)
            on_done, b.on_done = b.on_done, []
        if b.event is not None:
            b.event.set()
        waiters, b.waiters = b.waiters, []
        if error is None:
            topic, partition = b.topic, b.partition
            if base_offset < 0:
                for d in waiters:
                    d.callback(RecordMetadata(topic, partition, -1))
            else:
                for i, d in enumerate(waiters):
                    d.callback(RecordMetadata(topic, partition, base_offset + i))
        elif waiters:
            f = Failure(error)
            for d in waiters:
                d.errback(f)
        for cb in on_done:
            try:
                cb(b)
            except Exception:
                self.log.failure("a batch completion callback failed")
        self._memory_released()

    # -- flush and close ---------------------------------------------------------------------

    async def _flush(self) -> None:
        with self._lock:
            self._acc.flushing += 1
        try:
            self._schedule(0)
            while True:
                with self._lock:
                    batches = list(self._acc.incomplete)
                parked = [p.d for p in self._mem_waiters] + [
                    p.d for ps in self._meta_waiters.values() for p in ps]
                if not batches and not parked:
                    return
                waits = [_when_done(b) for b in batches] + [_settled(d) for d in parked]
                # gatherResults, not DeferredList: a cancelled flush (close's timeout) must
                # raise here instead of looking like a completed round.
                try:
                    await defer.gatherResults(waits, consumeErrors=True)
                except defer.FirstError as e:
                    e.subFailure.raiseException()
                if not parked:
                    return
        finally:
            with self._lock:
                self._acc.flushing -= 1

    async def _close(self, timeout: float | None) -> None:
        flushed = self.flush()
        if timeout is not None:
            flushed.addTimeout(timeout, self._clock)
        try:
            await flushed
        except defer.TimeoutError:
            self.log.warn("close: records still undelivered after {timeout}s", timeout=timeout)
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._metadata.cancel()
        closed = ProducerClosed("producer closed before the record was delivered")
        for parked in list(self._mem_waiters) + [p for ps in self._meta_waiters.values()
                                                 for p in ps]:
            if parked.timer is not None and parked.timer.active():
                parked.timer.cancel()
            parked.d.errback(Failure(closed))
        self._mem_waiters.clear()
        self._meta_waiters.clear()
        self._parked_bytes = 0
        with self._lock:
            left = self._acc.abort_all()
        for b in left:
            self._finish(b, -1, closed)
        self._cluster.close()  # in-flight requests fail with ConnectionLost -> ProducerClosed


def _never(node: int) -> bool:
    return False


def _when_done(b: ProducerBatch) -> defer.Deferred:
    d: defer.Deferred = defer.Deferred()
    if b.done:
        d.callback(None)
    else:
        b.on_done.append(lambda _: None if d.called else d.callback(None))
    return d


def _settled(d: defer.Deferred) -> defer.Deferred:
    """Fires (with None) when ``d`` fires, leaving ``d``'s result to its owner."""
    out: defer.Deferred = defer.Deferred()

    def passthrough(result: Any) -> Any:
        if not out.called:  # it may have been cancelled (a flush that timed out)
            out.callback(None)
        return result

    d.addBoth(passthrough)
    return out


def _chain(d: defer.Deferred) -> defer.Deferred:
    out: defer.Deferred = defer.Deferred()

    def ok(v: Any) -> Any:
        out.callback(v)
        return v

    def bad(f: Failure) -> None:
        out.errback(f)

    d.addCallbacks(ok, bad)
    return out
