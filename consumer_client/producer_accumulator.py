"""Records waiting to be sent, as per-partition batches (sans-IO: no reactor, no sockets).

Kafka's ``RecordAccumulator`` in small. Records are appended to the last open batch of their
partition, already encoded as RecordBatch v2 records, so sealing a batch is one compression call
and one 61-byte header. The sender asks :meth:`RecordAccumulator.drain` for what is ready.

Invariants:

- per partition, batches are in send order and at most one batch of a partition is out of the
  accumulator at a time (``muted``): a retried batch goes back to the *front* of its queue, so
  retries never reorder a partition (Kafka's ``max.in.flight.requests.per.connection=1`` rule
  without idempotence, applied per partition rather than per connection);
- ``used`` is the sum of the reserved sizes of every batch not yet completed; it only grows in
  :meth:`append` and only shrinks in :meth:`release`; callers check :meth:`has_room` first;
- a partition's open batch holds at most ``batch.size`` bytes, except while a batch of that
  partition is in flight: it cannot leave before that one is acknowledged anyway, so it may
  grow to ``max_batch`` (about ``max.request.size``). One batch in flight per partition would
  otherwise cap a partition at ``batch.size`` bytes per round trip;
- a batch is *ready* when it is not the last of its queue (full: a later record did not fit),
  holds ``batch.size`` bytes, has lingered ``linger.ms``, or a flush or close is in progress; and
  its retry backoff, if any, has passed.

Time is a plain float of seconds passed in by the caller (``now``); tests use ``task.Clock``.
Not thread-safe: the blocking producer calls it under its own lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from broker_core.wire.record_encoding import encode_record, seal_batch
from broker_core.wire.records import HEADER_SIZE, Compression

#: Upper bound of a record's bytes beyond its key and value when it has no headers: length,
#: attributes, timestamp delta, offset delta, key and value lengths, header count (varints).
RECORD_OVERHEAD = 1 + 5 + 10 + 5 + 5 + 5 + 1


class ProducerBatch:
    """Records of one partition sent together; completed once, with an offset or an error.

    ``waiters`` holds the Twisted producer's per-record Deferreds (index = offset delta);
    ``event`` is set by the blocking producer's futures; ``on_done`` callbacks run once when the
    batch completes (on the sender's thread).
    """

    __slots__ = ("topic", "partition", "buf", "count", "base_ts", "max_ts", "created",
                 "reserved", "attempts", "retry_at", "waiters", "event", "on_done", "payload",
                 "done", "base_offset", "error", "last_error", "last_broker", "last_detail",
                 "producer_id", "producer_epoch", "base_sequence")

    def __init__(self, topic: str, partition: int, base_ts: int, created: float) -> None:
        self.topic = topic
        self.partition = partition
        self.buf = bytearray()
        self.count = 0
        self.base_ts = base_ts
        self.max_ts = base_ts
        self.created = created
        self.reserved = 0
        self.attempts = 0
        self.retry_at = 0.0
        self.waiters: list[Any] = []
        self.event: Any = None
        self.on_done: list[Callable[[ProducerBatch], Any]] = []
        self.payload: bytes | None = None
        self.done = False
        self.base_offset = -1
        self.error: BaseException | None = None
        self.last_error: Any = None  # ErrorCode of the last failed attempt, or None
        self.last_broker = -1
        self.last_detail = ""
        #: Set at the first send by an idempotent producer (-1: not idempotent).
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1

    def __repr__(self) -> str:
        return (f"<ProducerBatch {self.topic}-{self.partition} records={self.count} "
                f"bytes={len(self.buf)} attempts={self.attempts}>")

    def seal(self, compression: Compression) -> bytes:
        """The batch as RecordBatch v2 bytes (built once; a retry resends the same bytes)."""
        if self.payload is None:
            # CreateTime; not transactional, not control.
            self.payload = seal_batch(self.buf, self.count, base_timestamp=self.base_ts,
                                      max_timestamp=self.max_ts, producer_id=self.producer_id,
                                      producer_epoch=self.producer_epoch,
                                      base_sequence=self.base_sequence, compression=compression)
            self.buf = bytearray()  # the encoded records now live in payload only
        return self.payload


#: :meth:`RecordAccumulator.append` results, OR-ed: a new batch was opened (arm its linger
#: timer), and an earlier batch of the partition is now full (wake the sender).
NEW_BATCH = 1
BATCH_FULL = 2


class RecordAccumulator:
    """See the module docstring."""

    def __init__(self, *, batch_size: int, linger_s: float, buffer_memory: int,
                 delivery_timeout_s: float, max_batch: int | None = None) -> None:
        self.batch_size = batch_size
        self.max_batch = max(batch_size, max_batch or batch_size)
        self.linger_s = linger_s
        self.buffer_memory = buffer_memory
        self.delivery_timeout_s = delivery_timeout_s
        self.used = 0
        self.queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.muted: set[tuple[str, int]] = set()
        #: Every batch appended to and not yet completed (flush waits for a snapshot of it).
        self.incomplete: set[ProducerBatch] = set()
        #: While > 0 (a flush or close is in progress), every batch is ready at once.
        self.flushing = 0

    # -- the application side ----------------------------------------------------------------

    def has_room(self, size: int) -> bool:
        return self.used + size <= self.buffer_memory

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes | None]] | None, timestamp_ms: int,
               now: float) -> tuple[ProducerBatch, int, int]:
        """Add one record; returns ``(batch, index in batch, NEW_BATCH|BATCH_FULL flags)``.
        The caller has checked :meth:`has_room` for the record's size; the record is encoded
        before any state changes, so a TypeError leaves the accumulator as it was."""
        tp = (topic, partition)
        q = self.queues.get(tp)
        if q is None:
            q = self.queues[tp] = deque()
        flags = 0
        batch = q[-1] if q else None
        if batch is not None and batch.payload is None:
            rec = encode_record(timestamp_ms - batch.base_ts, batch.count, key, value, headers)
            limit = self.max_batch if tp in self.muted else self.batch_size
            if len(batch.buf) + len(rec) > limit and batch.count:
                batch = None
                flags = BATCH_FULL
        else:
            batch = None
        if batch is None:
            rec = encode_record(0, 0, key, value, headers)
            batch = ProducerBatch(topic, partition, timestamp_ms, now)
            q.append(batch)
            self.incomplete.add(batch)
            flags |= NEW_BATCH
        index = batch.count
        batch.buf += rec
        batch.count = index + 1
        if timestamp_ms > batch.max_ts:
            batch.max_ts = timestamp_ms
        size = len(rec)
        batch.reserved += size
        self.used += size
        return batch, index, flags

    # -- the sender side ---------------------------------------------------------------------

    def drain(self, now: float, leader_of: Callable[[str, int], int],
              can_send: Callable[[int], bool], max_request_size: int,
              ) -> tuple[dict[int, list[ProducerBatch]], float | None, bool, list[ProducerBatch]]:
        """Take the ready batches whose leader can take a request.

        Returns ``(node -> batches, seconds until the next batch may become ready or None,
        whether a ready batch has no known leader, expired batches)``. At most one batch per
        partition; a node's batches add up to at most ``max_request_size`` bytes (one oversized
        batch still goes alone). Taken batches' partitions are muted until :meth:`unmute`.
        Expired batches (older than ``delivery.timeout.ms`` and not in flight) are removed; the
        caller fails them.
        """
        out: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        next_delay: float | None = None
        unknown_leader = False
        expired: list[ProducerBatch] = []
        linger = 0.0 if self.flushing else self.linger_s
        deadline = now - self.delivery_timeout_s
        for tp, q in self.queues.items():
            if not q or tp in self.muted:
                continue
            while q and q[0].created <= deadline:
                expired.append(q.popleft())
            if not q:
                continue
            head = q[0]
            if head.retry_at > now:
                wait = head.retry_at - now
            elif len(q) > 1 or len(head.buf) >= self.batch_size or head.payload is not None:
                wait = 0.0
            else:
                wait = head.created + linger - now
            if wait > 0:
                wait = min(wait, head.created + self.delivery_timeout_s - now)
                next_delay = wait if next_delay is None else min(next_delay, wait)
                continue
            node = leader_of(*tp)
            if node < 0:
                unknown_leader = True
                continue
            if not can_send(node):
                continue
            size = len(head.payload) if head.payload is not None else len(head.buf) + HEADER_SIZE
            used = sizes.get(node, 0)
            if used and used + size > max_request_size:
                next_delay = 0.0  # send it in the node's next request
                continue
            sizes[node] = used + size
            out.setdefault(node, []).append(q.popleft())
            self.muted.add(tp)
        for b in expired:
            self.incomplete.discard(b)
        return out, next_delay, unknown_leader, expired

    def unmute(self, batch: ProducerBatch) -> None:
        self.muted.discard((batch.topic, batch.partition))

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a failed batch back at the front of its partition for another attempt."""
        batch.retry_at = retry_at
        self.queues[(batch.topic, batch.partition)].appendleft(batch)
        self.unmute(batch)

    def release(self, batch: ProducerBatch) -> None:
        """A batch is complete (acknowledged or failed for good): give its memory back."""
        self.used -= batch.reserved
        batch.reserved = 0
        self.incomplete.discard(batch)
        self.unmute(batch)

    def take_sent(self) -> list[ProducerBatch]:
        """Remove every queued batch that was sent before (a retry waiting its turn); the
        caller fails them."""
        out = []
        for q in self.queues.values():
            kept = [b for b in q if not b.attempts]
            out += [b for b in q if b.attempts]
            q.clear()
            q.extend(kept)
        for b in out:
            self.incomplete.discard(b)
        return out

    def abort_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (close without flush); the caller fails them."""
        out = [b for q in self.queues.values() for b in q]
        for q in self.queues.values():
            q.clear()
        return out

    def pending_batches(self) -> int:
        return sum(len(q) for q in self.queues.values())
