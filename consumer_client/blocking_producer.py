"""The blocking producer: the Twisted :class:`~consumer_client.producer.Producer` driven from
ordinary threads (scripts, Spark tasks), like kafka-python's ``KafkaProducer``.

The core runs on the reactor of :class:`~consumer_client.reactor_thread.ReactorThread`. ``send``
appends to the core's accumulator directly on the calling thread, under the core's lock, so a
record costs no thread hop; the reactor thread is woken once per *batch* (a new batch arms its
linger timer, a full one is sent), never once per record.

Invariants:

- ``send`` blocks only for metadata of a topic it has not seen and for room in ``buffer.memory``,
  each at most ``max.block.ms``, then raises (:class:`UnknownTopic`,
  :class:`MetadataUnavailable`, :class:`BufferExhausted`);
- the accumulator is touched only under ``_lock`` (this thread's appends, the reactor's drains
  and completions), and the partitioner is called under it too;
- a :class:`SendFuture` resolves exactly once, when its batch completes, with the record's
  :class:`RecordMetadata` or its :class:`ProduceError` (topic, partition, broker, Kafka error).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet import defer

from consumer_client.producer import Headers, Producer, RecordMetadata, record_size
from consumer_client.producer_accumulator import NEW_BATCH, ProducerBatch
from consumer_client.producer_config import ProducerConfig
from consumer_client.producer_errors import (
    BufferExhausted,
    ProduceError,
    ProducerClosed,
    RecordTooLarge,
)
from consumer_client.reactor_thread import ReactorThread

__all__ = ["BlockingProducer", "SendFuture", "RecordMetadata"]


class SendFuture:
    """The outcome of one :meth:`BlockingProducer.send` (like kafka-python's
    ``FutureRecordMetadata``): :meth:`get` waits and returns the :class:`RecordMetadata` or
    raises the send's :class:`~consumer_client.producer_errors.ProducerError`."""

    __slots__ = ("_batch", "_index", "_lock")

    def __init__(self, batch: ProducerBatch, index: int, lock: Any) -> None:
        self._batch = batch
        self._index = index
        self._lock = lock

    def done(self) -> bool:
        return self._batch.done

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (None: for ever); raises TimeoutError if the record
        is still unacknowledged then, or the send's error."""
        b = self._batch
        if not b.done and not b.event.wait(timeout):
            raise TimeoutError(f"record for topic {b.topic!r} partition {b.partition} not "
                               f"acknowledged within {timeout}s (it may still be)")
        if b.error is not None:
            raise b.error
        return RecordMetadata(b.topic, b.partition,
                              -1 if b.base_offset < 0 else b.base_offset + self._index)

    result = get  # concurrent.futures spelling

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.get(timeout)
        except TimeoutError:
            raise
        except Exception as e:  # noqa: BLE001 - returned, not raised: that is the API
            return e
        return None

    def add_done_callback(self, fn: Callable[[SendFuture], Any]) -> None:
        """Call ``fn(self)`` once the record completes: on the reactor thread, or right away on
        this thread if it already has. ``fn`` must not block."""
        with self._lock:
            if not self._batch.done:
                self._batch.on_done.append(lambda _: fn(self))
                return
        fn(self)


class BlockingProducer:
    """A thread-safe, blocking Kafka producer (see the module docstring).

    >>> p = BlockingProducer({"bootstrap.servers": "127.0.0.1:9092"})  # doctest: +SKIP
    >>> p.send("events", b"hello", key=b"user-1").get(timeout=10)  # doctest: +SKIP
    RecordMetadata(topic='events', partition=2, offset=41)
    >>> p.close()  # doctest: +SKIP
    """

    def __init__(self, config: ProducerConfig | Mapping[str, object] | None = None,
                 **kwargs: object) -> None:
        if not isinstance(config, ProducerConfig):
            config = ProducerConfig.from_kwargs(config, **kwargs)
        self.config = config
        self._rt = ReactorThread.get()
        self._core: Producer = self._rt.call(lambda: Producer(config, reactor=self._rt.reactor))
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._waiting_for_room = 0
        self._core._lock = self._lock
        self._core._on_release = self._released
        self._acc = self._core._acc
        self._partitioner = config.partitioner
        self._max_record = min(config.max_request_size, config.buffer_memory)
        self._max_block_s = config.max_block_ms / 1000
        self._closed = False

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             partition: int | None = None, headers: Headers | None = None,
             timestamp: int | None = None) -> SendFuture:
        """Queue one record and return its :class:`SendFuture` (see the class docstring for
        when this blocks). Thread-safe."""
        if self._closed:
            raise ProducerClosed(f"producer closed; record for topic {topic!r} not sent")
        core = self._core
        parts = core._topics.get(topic)
        if parts is None:
            self._rt.call(core.wait_for_topic, topic)
            parts = core._topics[topic]
        size = record_size(key, value, headers)
        if size > self._max_record:
            raise RecordTooLarge(f"a record of about {size} bytes for topic {topic!r} is larger "
                                 f"than max.request.size ({self.config.max_request_size}) or "
                                 f"buffer.memory ({self.config.buffer_memory})")
        if partition is not None and not 0 <= partition < len(parts[0]):
            raise core._bad_partition(topic, partition, len(parts[0]))
        now = time.time()
        if timestamp is None:
            timestamp = int(now * 1000)
        acc = self._acc
        with self._lock:
            if not acc.has_room(size):
                self._wait_for_room(topic, size)
            if partition is None:
                partition = self._partitioner.partition(topic, key, parts[0], parts[1])
            batch, index, flags = acc.append(topic, partition, key, value, headers, timestamp,
                                             now)
            if flags & NEW_BATCH:
                batch.event = threading.Event()
        if flags:
            self._rt.call_soon(core._on_append, flags)
        return SendFuture(batch, index, self._lock)

    def _wait_for_room(self, topic: str, size: int) -> None:
        """With ``_lock`` held: wait until ``size`` bytes fit, at most ``max.block.ms``."""
        deadline = time.monotonic() + self._max_block_s
        self._waiting_for_room += 1
        try:
            while not self._acc.has_room(size):
                left = deadline - time.monotonic()
                if left <= 0 or not self._room.wait(left):
                    if self._acc.has_room(size):
                        return
                    raise BufferExhausted(
                        f"no room for a {size}-byte record for topic {topic!r} in buffer.memory "
                        f"({self.config.buffer_memory} bytes, {self._acc.used} in use) within "
                        f"max.block.ms={self.config.max_block_ms}: the brokers do not "
                        "acknowledge as fast as records are sent")
        finally:
            self._waiting_for_room -= 1

    def _released(self) -> None:
        # On the reactor thread, after a batch freed its memory.
        if self._waiting_for_room:
            with self._room:
                self._room.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until every record sent before the call has
        completed; TimeoutError after ``timeout`` seconds (None: wait as long as it takes)."""
        def start() -> defer.Deferred:
            d = self._core.flush()
            if timeout is not None:
                d.addTimeout(timeout, self._rt.reactor)
            return d
        try:
            self._rt.call(start)
        except defer.TimeoutError:
            raise TimeoutError(f"records still unacknowledged after {timeout}s") from None

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids; :class:`UnknownTopic` after ``max.block.ms``."""
        return self._rt.call(self._core.partitions_for, topic)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (at most ``timeout`` seconds), then close the connections.
        Records still undelivered then fail with ProducerClosed. Idempotent."""
        self._closed = True
        self._rt.call(self._core.close, timeout)


__all__ += ["ProduceError"]
