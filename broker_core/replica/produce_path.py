"""The write path on a leader: Produce (``append``) and DeleteRecords (KIP-107).

Owns no state: the partitions and purgatories are the
:class:`~broker_core.replica.manager.ReplicaManager`'s. Invariants: a refused partition changes
nothing and answers an error (not the leader, an empty or invalid batch, an ISR below
min.insync.replicas for acks=-1); an I/O error takes the log directory offline; parked fetches
are woken once per reactor turn, after every partition of every request of that turn is
appended (:meth:`ReplicaManager.appended`); acks=-1 and DeleteRecords
answer only when the high watermark (the followers' log starts) pass what was written (moved),
or at their timeout.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from broker_core.log import RecordTooLarge
from broker_core.log.producer_state import ProducerStateError
from broker_core.replica.delayed import DelayedDeleteRecords, DelayedProduce
from broker_core.replica.partition import Partition
from broker_core.wire.records import InvalidRecordBatch
from broker_core.wire.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker_core.replica.manager import ReplicaManager


@dataclass
class ProduceResult:
    error: str | None = None  # ErrorCode name, None for success
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    #: The time the leader stamped the batches with (topic message.timestamp.type
    #: LogAppendTime), else -1.
    log_append_time_ms: int = -1
    # (batch_index, message) of the records that made the leader refuse the batch (v8+).
    record_errors: list[tuple[int, str]] = field(default_factory=list)


class ProducePath:
    """Produce and DeleteRecords over ``replicas``' partitions; see the module docstring."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    # -- produce ----------------------------------------------------------------------------------

    def append(
        self,
        acks: int,
        timeout_ms: int,
        entries: Iterable[tuple[str, int, Any]],
    ) -> defer.Deferred:
        """See :meth:`ReplicaManager.append`."""
        rm = self.replicas
        results: dict[TopicPartition, ProduceResult] = {}
        waiting: dict[TopicPartition, int] = {}
        appended: list[TopicPartition] = []
        hw_moved: list[TopicPartition] = []
        metered: dict[str, list[int]] = {}  # topic -> [bytes, messages] appended
        for topic, index, records in entries:
            tp = (topic, index)
            p, error = rm.leader_partition(topic, index)
            if p is None:
                results[tp] = ProduceResult(error=error)
                continue
            result, next_offset = self._append_one(p, acks, records, metered)
            results[tp] = result
            if next_offset is None:
                continue
            if p.maybe_advance_high_watermark():  # only with no follower in the ISR
                hw_moved.append(tp)
            rm._maybe_flush(p.log)
            appended.append(tp)
            if acks == -1:
                waiting[tp] = next_offset
        if metered and rm.metrics is not None:
            # Once per topic and request, not per partition: a batching producer names
            # hundreds of partitions of one topic in a request.
            for topic, (size, count) in metered.items():
                rm.metrics.bytes_in_by_topic(topic).inc(size)
                rm.metrics.messages_in_by_topic(topic).inc(count)
        # Wake the parked fetches once, after every partition is appended (and every other
        # produce request of this reactor turn): a follower fetches all its partitions from
        # us in one request, so it then gets all of it in one answer instead of the first
        # partition alone (and one more fetch round before the rest can commit).
        rm.appended(appended)
        # Waiting acks=all produces complete only when the HW moves, which an append does only
        # with an ISR of one. Re-trying them on every append cost O(waiting) per request:
        # quadratic once hundreds of small requests wait (linger.ms=0).
        if hw_moved:
            rm.produce_purgatory.check_and_complete_keys(hw_moved)
        if not waiting:
            return defer.succeed(results)
        return self._wait_for_replicas(timeout_ms, waiting, results)

    def _append_one(self, p: Partition, acks: int, records: Any,
                    metered: dict[str, list[int]]) -> tuple[ProduceResult, int | None]:
        """Append ``records`` to leader partition ``p``: its result, and the offset after the
        appended batches (None: refused, nothing appended). Adds what it appended to
        ``metered[topic]`` (``[bytes, messages]``) for the caller to count once."""
        rm = self.replicas
        topic, index = p.topic, p.index
        if records is None or len(records) == 0:
            return ProduceResult(error="INVALID_RECORD", message="empty record set"), None
        if acks == -1:
            min_isr = rm.min_insync_replicas(topic)
            if len(p.isr) < min_isr:
                return ProduceResult(
                    error="NOT_ENOUGH_REPLICAS",
                    message=f"ISR {list(p.isr)} is smaller than min.insync.replicas={min_isr}"
                ), None
        try:
            info = p.log.append_as_leader(records, p.leader_epoch)
        except InvalidRecordBatch as e:
            return ProduceResult(error=e.error_code_name, message=str(e),
                                 record_errors=getattr(e, "record_errors", [])), None
        except RecordTooLarge as e:
            return ProduceResult(error="MESSAGE_TOO_LARGE", message=str(e)), None
        except ProducerStateError as e:
            return ProduceResult(error=e.error_code_name, message=str(e),
                                 log_start_offset=p.log.log_start_offset), None
        except OSError as e:
            rm.log.error("append to {t}-{p} failed: {e}", t=topic, p=index, e=e)
            rm.storage_error((topic, index), e, "append")
            return ProduceResult(error="KAFKA_STORAGE_ERROR", message=str(e)), None
        if not info.duplicate:
            counts = metered.get(topic)
            if counts is None:
                metered[topic] = [info.size, info.record_count]
            else:
                counts[0] += info.size
                counts[1] += info.record_count
        stamped = p.log.config.message_timestamp_type == "LogAppendTime"
        return ProduceResult(base_offset=info.first_offset,
                             log_start_offset=p.log.log_start_offset,
                             log_append_time_ms=info.max_timestamp if stamped
                             else -1), info.last_offset + 1

    def _wait_for_replicas(self, timeout_ms: int, waiting: dict[TopicPartition, int],
                           results: dict[TopicPartition, ProduceResult]) -> defer.Deferred:
        """Park an acks=-1 produce until the HW passes ``waiting``'s offsets; fire with
        ``results``, its waiting partitions' errors filled in."""
        rm = self.replicas
        d: defer.Deferred = defer.Deferred()

        def hw_of(tp: TopicPartition) -> int | None:
            part = rm.partitions.get(tp)
            return part.high_watermark if part is not None and part.is_leader else None

        def enough_replicas(tp: TopicPartition) -> bool:
            part = rm.partitions.get(tp)
            return part is not None and len(part.isr) >= rm.min_insync_replicas(tp[0])

        def respond(outcome: dict[TopicPartition, str | None]) -> None:
            for tp, error in outcome.items():
                if error is not None:
                    results[tp] = ProduceResult(error=error)
            d.callback(results)

        op = DelayedProduce(timeout_ms / 1000.0, waiting, hw_of, respond, enough_replicas)
        rm.produce_purgatory.try_complete_else_watch(op, list(waiting))
        return d

    # -- DeleteRecords (KIP-107) -------------------------------------------------------------------

    def delete_records(self, requests: list[tuple[str, int, int]], timeout_ms: int
                       ) -> defer.Deferred:
        """See :meth:`ReplicaManager.delete_records`."""
        rm = self.replicas
        results: dict[TopicPartition, tuple[str | None, int]] = {}
        waiting: dict[TopicPartition, int] = {}
        for topic, index, offset in requests:
            tp = (topic, index)
            p, error = rm.leader_partition(topic, index)
            if p is None:
                results[tp] = (error, -1)
                continue
            log = p.log
            target = p.high_watermark if offset == -1 else offset
            if target < 0 or target > p.high_watermark:
                results[tp] = ("OFFSET_OUT_OF_RANGE", -1)
                continue
            try:
                if log.advance_log_start(target):
                    rm.log.info("DeleteRecords moved the log start of {t}-{p} to {s}",
                                t=topic, p=index, s=log.log_start_offset)
            except OSError as e:
                rm.storage_error(tp, e, "delete records")
                results[tp] = ("KAFKA_STORAGE_ERROR", -1)
                continue
            waiting[tp] = target
        if not waiting:
            return defer.succeed(results)
        d: defer.Deferred = defer.Deferred()

        def low_watermark_of(tp: TopicPartition) -> int | None:
            part = rm.partitions.get(tp)
            if part is None or not part.is_leader:
                return None
            return part.low_watermark(lambda b: b in rm.metadata_cache.brokers)

        def respond(outcome: dict[TopicPartition, tuple[str | None, int]]) -> None:
            results.update(outcome)
            d.callback(results)

        op = DelayedDeleteRecords(max(timeout_ms, 0) / 1000.0, waiting, low_watermark_of,
                                  respond)
        rm.delete_records_purgatory.try_complete_else_watch(op, list(waiting))
        return d

    def record_follower_log_starts(self, replica_id: int,
                                   starts: Sequence[tuple[str, int, int]]) -> None:
        """The log starts a follower's fetch reported (the partitions it names: in a fetch
        session, those whose state changed); a change may complete a DeleteRecords."""
        rm = self.replicas
        for topic, index, log_start in starts:
            p = rm.partitions.get((topic, index))
            if p is not None and p.is_leader and p.record_follower_log_start(replica_id,
                                                                               log_start):
                rm.delete_records_purgatory.check_and_complete((topic, index))
