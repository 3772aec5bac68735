"""Idempotent producers' state of one partition: per producer id its epoch and its last five
batches, so the leader can tell a retried batch from a new one (KIP-98).

Sans-IO: :class:`ProducerStateManager` sees batch headers (:class:`BatchInfo`) and a time, never
a file; the log feeds it every batch it appends (the leader's after :meth:`check`, a follower's
and those replayed when the log opens or is truncated without checks), and
:mod:`broker_core.log.producer_snapshot` stores it.

What :meth:`check` answers for a batch with a producer id (``producer_id >= 0``), in Kafka's
order (``ProducerAppendInfo``):

- no epoch, no sequence, or a transactional batch: INVALID_RECORD (a producer id needs both,
  and transactions are not served);
- a producer this partition does not know, with a sequence other than 0: UNKNOWN_PRODUCER_ID
  (both clients then reset the producer's sequences: KIP-360);
- an epoch older than the producer's: INVALID_PRODUCER_EPOCH (a zombie after a bump);
- a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
- the same epoch: a batch with the same first and last sequence as one of the last five is a
  duplicate, answered as a success with the original's offsets and nothing appended;
  otherwise its first sequence must follow the last one's, else
  OUT_OF_ORDER_SEQUENCE_NUMBER.

Invariants: at most :data:`MAX_BATCHES` batches per producer, newest last, their sequences and
offsets increasing; at most :data:`MAX_PRODUCERS` producers (the least recently written goes
first: any client may name any producer id, so the table must be bounded). Sequences wrap from
``2**31 - 1`` to 0, as Kafka's do. A producer whose last batch's timestamp is
``producer.id.expiration.ms`` old is forgotten (:meth:`remove_expired`); the timestamp is the
batch's ``maxTimestamp``, as Kafka's, so rebuilding from the log gives the same state.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from broker_core.wire.records import BatchInfo

#: Kafka's ``ProducerStateEntry.NumBatchesToRetain``: clients keep at most five batches in
#: flight per partition, so a retry is always of one of the last five.
MAX_BATCHES = 5
#: Producers remembered per partition.
MAX_PRODUCERS = 10_000
INT32_MAX = (1 << 31) - 1
INT16_MAX = (1 << 15) - 1


class ProducerStateError(Exception):
    """A batch the producer state refuses; ``error_code_name`` is the Produce error."""

    def __init__(self, error_code_name: str, message: str) -> None:
        super().__init__(message)
        self.error_code_name = error_code_name


@dataclass(frozen=True)
class BatchMetadata:
    """What is kept of one appended batch: its sequences, offsets and max timestamp."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].timestamp if self.batches else -1


def last_sequence(info: BatchInfo) -> int:
    """The batch's last sequence number, wrapping past ``2**31 - 1`` to 0."""
    return (info.base_sequence + info.last_offset_delta) % (INT32_MAX + 1)


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateManager:
    """See the module docstring."""

    def __init__(self, max_producers: int = MAX_PRODUCERS) -> None:
        self.max_producers = max_producers
        #: Ordered from least to most recently written.
        self.entries: dict[int, ProducerEntry] = {}

    def check(self, info: BatchInfo) -> BatchMetadata | None:
        """For a batch the leader is about to append: None when it may be appended, the
        original batch when it is a duplicate; :class:`ProducerStateError` when refused.
        Changes nothing."""
        pid = info.producer_id
        if info.is_transactional:
            raise ProducerStateError("INVALID_RECORD", "transactional batches are not served: "
                                     "Sluice has no transaction coordinator")
        if pid < 0:
            return None
        if info.producer_epoch < 0 or info.base_sequence < 0:
            raise ProducerStateError(
                "INVALID_RECORD", f"producer {pid}'s batch has epoch {info.producer_epoch} and "
                f"sequence {info.base_sequence}; an idempotent batch needs both")
        entry = self.entries.get(pid)
        seq = info.base_sequence
        if entry is None:
            if seq != 0:
                raise ProducerStateError(
                    "UNKNOWN_PRODUCER_ID", f"producer {pid} is not known to this partition and "
                    f"its batch starts at sequence {seq}, not 0")
            return None
        if info.producer_epoch < entry.epoch:
            raise ProducerStateError(
                "INVALID_PRODUCER_EPOCH", f"producer {pid}'s epoch {info.producer_epoch} is "
                f"older than its current epoch {entry.epoch}")
        if info.producer_epoch > entry.epoch:
            if seq != 0:
                raise ProducerStateError(
                    "OUT_OF_ORDER_SEQUENCE_NUMBER", f"producer {pid}'s new epoch "
                    f"{info.producer_epoch} starts at sequence {seq}, not 0")
            return None
        last = last_sequence(info)
        for batch in entry.batches:
            if batch.first_seq == seq and batch.last_seq == last:
                return batch
        if entry.batches and seq != _next_seq(entry.last_seq):
            raise ProducerStateError(
                "OUT_OF_ORDER_SEQUENCE_NUMBER", f"producer {pid} (epoch {entry.epoch}) sent "
                f"sequence {seq}; the next expected is {_next_seq(entry.last_seq)}")
        return None

    def update(self, info: BatchInfo) -> None:
        """Record an appended batch (``info`` carries its offsets in the log); no checks."""
        pid = info.producer_id
        if pid < 0 or info.producer_epoch < 0 or info.base_sequence < 0:
            return
        entry = self.entries.pop(pid, None)
        if entry is None or info.producer_epoch != entry.epoch:
            # A new epoch starts over: sequences of the old one mean nothing in it.
            entry = ProducerEntry(pid, info.producer_epoch)
        entry.batches.append(BatchMetadata(info.base_sequence, last_sequence(info),
                                           info.base_offset, info.last_offset,
                                           info.max_timestamp))
        self.entries[pid] = entry  # most recently written last
        while len(self.entries) > self.max_producers:
            del self.entries[next(iter(self.entries))]

    def restore(self, entry: ProducerEntry) -> None:
        """Put back an entry read from a snapshot (least recently written first)."""
        self.entries.pop(entry.producer_id, None)
        self.entries[entry.producer_id] = entry
        while len(self.entries) > self.max_producers:
            del self.entries[next(iter(self.entries))]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is ``expiration_ms`` old; how many went."""
        doomed = [pid for pid, e in self.entries.items()
                  if now_ms - e.last_timestamp >= expiration_ms]
        for pid in doomed:
            del self.entries[pid]
        return len(doomed)

    def clear(self) -> None:
        self.entries.clear()

    def __len__(self) -> int:
        return len(self.entries)
