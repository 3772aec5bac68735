"""What a record set must pass before a log appends it, and what it becomes: the leader's path
(validate, apply the topic's timestamp and compression settings, answer a producer's retry) and
the follower's (whole batches continuing the log exactly at its end).

Invariants: the functions here write nothing and change no state; a refusal raises before the
log is touched, so a refused append changes nothing. Time comes in as ``time_ms``.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_core.log.config import LogConfig
from broker_core.log.errors import RecordTooLarge, UnexpectedAppendOffset
from broker_core.log.leader_rewrite import as_create_time, check_timestamps, rewrite_for_topic
from broker_core.log.producer_state import BatchMetadata, ProducerStateError, ProducerStateManager
from broker_core.log.validator import validate_records
from broker_core.wire.records import (
    LOG_OVERHEAD,
    BatchInfo,
    assign_offsets,
    batch_size_at,
    iter_batches,
)


def leader_batches(records: bytes | memoryview, base_offset: int, leader_epoch: int,
                   config: LogConfig, time_ms: Callable[[], int],
                   producer_state: ProducerStateManager
                   ) -> tuple[bytes | bytearray, list[BatchInfo], BatchMetadata | None]:
    """The bytes to store for a produced record set, offsets stamped from ``base_offset`` and
    ``leader_epoch``, with their batches; or, for a retry of a batch the log holds, that batch
    (third item; the bytes are then not rewritten and must not be stored).

    Every record of every batch is parsed first (:mod:`broker_core.log.validator`),
    a compressed batch decompressed to at most ``max.message.bytes``; then the topic's
    timestamp bounds are checked, a batch with a producer id is checked against
    ``producer_state``, and ``message.timestamp.type`` and ``compression.type`` are applied
    (:mod:`broker_core.log.leader_rewrite`). Raises
    :class:`~broker_core.wire.records.InvalidRecordBatch` subclasses, :class:`RecordTooLarge`
    and :class:`~broker_core.log.producer_state.ProducerStateError`.
    """
    buf, infos = assign_offsets(records, base_offset, leader_epoch)
    limit = config.max_message_bytes
    for info in infos:
        if info.size > limit:
            raise RecordTooLarge(info.size, limit)
    validate_records(buf, infos, max_decompressed_bytes=limit)
    if config.message_timestamp_type == "CreateTime":
        # Stored with the topic's timestamp type, as Kafka does, before the bounds look
        # at the records' timestamps.
        buf, infos = as_create_time(buf, infos, max_batch_bytes=limit)
    now_ms = time_ms()
    check_timestamps(buf, infos, timestamp_type=config.message_timestamp_type,
                     before_max_ms=config.message_timestamp_before_max_ms,
                     after_max_ms=config.message_timestamp_after_max_ms,
                     max_difference_ms=config.message_timestamp_difference_max_ms,
                     now_ms=now_ms, max_batch_bytes=limit)
    # A retry of a batch the log holds is answered before any rewrite work: nothing is
    # appended (the rewrite keeps producer ids and sequences, so the checks see the same).
    duplicate = check_producers(producer_state, infos)
    if duplicate is not None:
        return buf, infos, duplicate
    buf, infos = rewrite_for_topic(
        buf, infos, compression_type=config.compression_type,
        timestamp_type=config.message_timestamp_type, now_ms=now_ms,
        max_batch_bytes=limit)
    return buf, infos, None


def check_producers(producer_state: ProducerStateManager,
                    infos: list[BatchInfo]) -> BatchMetadata | None:
    """The producer-state checks of a produced record set: the original batch when it
    is a retry of one the log holds; :class:`ProducerStateError` when refused."""
    if not any(info.producer_id >= 0 or info.is_transactional for info in infos):
        return None
    if len(infos) > 1:
        # Clients send one batch per partition; several would need their duplicates
        # answered one by one, which a ProduceResponse cannot say.
        raise ProducerStateError("INVALID_RECORD", f"{len(infos)} batches with a producer "
                                 "id in one partition's records; send one")
    return producer_state.check(infos[0])


def follower_batches(records: bytes | memoryview,
                     log_end_offset: int) -> tuple[bytes, list[BatchInfo]]:
    """The whole batches of a fetched record set (a trailing partial batch dropped, as a fetch
    response may end with one), which must continue the log exactly at ``log_end_offset``
    (:class:`UnexpectedAppendOffset` otherwise); ``b""`` and no batches if there are none.
    Every batch is checked (CRC included) by :func:`~broker_core.wire.records.iter_batches`."""
    view = memoryview(records)
    data = bytes(view[:whole_batches_length(view)])
    if not data:
        return data, []
    infos = list(iter_batches(data))
    expected = log_end_offset
    for info in infos:
        if info.base_offset != expected:
            raise UnexpectedAppendOffset(info.base_offset, expected)
        expected = info.last_offset + 1
    return data, infos


def whole_batches_length(data: bytes | bytearray | memoryview) -> int:
    """Length of the prefix of ``data`` made of batches whose declared size fits (no other
    check): a fetch response may end with a partial batch, which a follower ignores."""
    pos = 0
    end = len(data)
    while True:
        size = batch_size_at(data, pos)
        if size is None or size < LOG_OVERHEAD or pos + size > end:
            return pos
        pos += size
