"""What one partition of a Fetch response means for the fetcher that asked: the one decision the
consumer's fetch loop (:mod:`consumer_client.consumer_fetcher`) and the Spark reader's
(:func:`consumer_client.spark.reader.read_chunks`) share. Sans-IO: no connection, no clock.

:func:`fetch_outcome` sorts a partition's answer to a fetch at ``offset`` into one
:class:`FetchStep`; what each step leads to stays with the caller, where the two rightly differ:

- ``LEADER_MOVED``: both look the leader up again and fetch the same offset from it;
- ``FAILED`` (any other error, and a first batch whose length no batch can have, reported as
  ``CORRUPT_MESSAGE``): the consumer places the partition again like ``LEADER_MOVED``
  and gives up after ``fetch.max.partition.failures``; the Spark reader fails the task at once;
- ``OUT_OF_RANGE``: the consumer resets per ``auto.offset.reset``; the Spark reader skips or
  fails per ``failOnDataLoss``;
- ``TOO_LARGE``: both ask for more bytes next time (the Spark reader only once its answer
  filled what it asked for; a shorter cut-off batch is waited for like ``NOTHING``).

Invariants: ``RECORDS`` carries only complete batches (``records``, the bytes to decode) and a
``next_offset`` past ``offset``, so a fetch loop that moves to ``next_offset`` never skips or
repeats a record; no other step moves the offset.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import CorruptRecordBatch
from consumer_client.consumer_records import scan_chunk

#: Errors after which the partition's leader is looked up again and the request retried: the
#: leader moved (or is being elected), or the metadata acted on is older than the broker's.
LEADER_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS,
})


class FetchStep(enum.Enum):
    RECORDS = "records"            # complete batches past the offset: hand on, move on
    NOTHING = "nothing"            # no error and no complete batch past the offset (yet)
    TOO_LARGE = "too_large"        # the first batch is cut off at the size asked for
    OUT_OF_RANGE = "out_of_range"  # the offset is not in the leader's log
    LEADER_MOVED = "leader_moved"  # one of LEADER_ERRORS: find the leader, fetch again
    FAILED = "failed"              # any other error


@dataclass(frozen=True)
class FetchOutcome:
    step: FetchStep
    code: int = 0  # the Kafka error code (0 unless an error step)
    records: bytes | memoryview | None = None  # RECORDS: the complete batches
    next_offset: int = -1  # RECORDS: the offset after the last record of ``records``
    size: int = 0  # TOO_LARGE: bytes received (all of one incomplete batch)
    high_watermark: int = -1


def fetch_outcome(p: Any | None, offset: int, response_error: int = 0) -> FetchOutcome:
    """The outcome of partition answer ``p`` (a Fetch response partition, or None when the
    response has none: the broker no longer knows it, as UNKNOWN_TOPIC_OR_PARTITION unless
    ``response_error``, the response's top-level error, says otherwise) to a fetch at
    ``offset``."""
    if p is None:
        return _error(response_error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    hw = p.high_watermark
    if p.error_code:
        return _error(p.error_code, hw)
    records = p.records
    if records is None or not len(records):
        return FetchOutcome(FetchStep.NOTHING, high_watermark=hw)
    try:
        nxt, complete = scan_chunk(records, offset)
    except CorruptRecordBatch:
        # A first batch no decoder could read: an error of the partition, not "too large".
        return _error(ErrorCode.CORRUPT_MESSAGE, hw)
    if complete == 0:
        return FetchOutcome(FetchStep.TOO_LARGE, size=len(records), high_watermark=hw)
    if nxt <= offset:
        # Only batches before the offset asked for: nothing new.
        return FetchOutcome(FetchStep.NOTHING, high_watermark=hw)
    return FetchOutcome(FetchStep.RECORDS, records=records[:complete], next_offset=nxt,
                        high_watermark=hw)


def _error(code: int, hw: int) -> FetchOutcome:
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        step = FetchStep.OUT_OF_RANGE
    elif code in LEADER_ERRORS:
        step = FetchStep.LEADER_MOVED
    else:
        step = FetchStep.FAILED
    return FetchOutcome(step, code=code, high_watermark=hw)
