"""The idempotent producer's identity and sequence numbers (KIP-98), sans-IO.

With ``enable.idempotence`` the producer asks a broker for a producer id (InitProducerId)
before its first send, stamps every batch with the id, the epoch and the partition's next
sequence number when the batch is first sent, and resends a retried batch byte for byte: a
partition leader that already holds it answers with the original offsets instead of writing it
twice (``docs/producer.md``, Idempotence).

Invariants:

- a batch's sequence is given once, at its first send; the partition's next sequence then moves
  past its records, wrapping from ``2**31 - 1`` to 0 as Kafka's do. Together with the
  producer's one batch in flight per partition, a partition's batches reach the leader in
  sequence order, retries included;
- after a refusal that means the leader's state and ours disagree (OUT_OF_ORDER_SEQUENCE_NUMBER,
  UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH) the epoch is bumped (KIP-360: InitProducerId
  naming the current id and epoch) once no batch is in flight, and every partition's sequences
  start again at 0. A batch sent under the old epoch and not acknowledged cannot be resent under
  the new one (it may have been written: it would be written again), so it fails.
"""

from __future__ import annotations

from broker_core.wire.errors import ErrorCode

#: Produce errors after which the producer bumps its epoch.
NEEDS_BUMP = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                        ErrorCode.INVALID_PRODUCER_EPOCH})
_SEQ_SPACE = 1 << 31


class ProducerIdentity:
    """Producer id, epoch and each partition's next sequence (see the module docstring)."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1
        self.bump_needed = False
        self._next: dict[tuple[str, int], int] = {}

    @property
    def ready(self) -> bool:
        """True when batches may be stamped and sent."""
        return self.producer_id >= 0 and not self.bump_needed

    def init_request(self) -> dict:
        """The InitProducerId body: a new id, or (a bump) the epoch after the current one."""
        bump = self.bump_needed and self.producer_id >= 0
        return {"transactional_id": None, "transaction_timeout_ms": 60_000,
                "producer_id": self.producer_id if bump else -1,
                "producer_epoch": self.epoch if bump else -1}

    def granted(self, producer_id: int, epoch: int) -> None:
        """InitProducerId answered: use ``producer_id`` and ``epoch``; sequences restart."""
        if producer_id < 0 or epoch < 0:
            raise ValueError(f"the broker granted producer id {producer_id} epoch {epoch}")
        self.producer_id, self.epoch = producer_id, epoch
        self.bump_needed = False
        self._next.clear()

    def stamp(self, topic: str, partition: int, count: int) -> tuple[int, int, int]:
        """``(producer id, epoch, base sequence)`` for a batch of ``count`` records sent for
        the first time; advances the partition's sequence."""
        tp = (topic, partition)
        seq = self._next.get(tp, 0)
        self._next[tp] = (seq + count) % _SEQ_SPACE
        return self.producer_id, self.epoch, seq
