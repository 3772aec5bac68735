"""The replica manager: routes produce, fetch and offset requests to local partitions, applies the
controller's LeaderAndIsr and StopReplica commands, runs replication (follower fetchers, the
leader's follower bookkeeping, ISR changes through AlterIsr) and the log housekeeping (flush off
the reactor thread, retention, time-based roll, checkpoints).

Kafka's layering (``ReplicaManager.scala``): this class owns the map of local partitions and the
purgatories; :class:`~broker_core.replica.partition.Partition` owns leader state; the
:class:`~broker_core.log.Log` owns offsets and bytes.

This class is the facade; the jobs live beside it, each reading and changing this manager's
state: :mod:`~broker_core.replica.leader_and_isr` (applying LeaderAndIsr),
:mod:`~broker_core.replica.produce_path` (Produce, DeleteRecords),
:mod:`~broker_core.replica.fetch_path` (Fetch, the leader's record of its followers' fetches)
and :mod:`~broker_core.replica.storage_failure` (failed log directories and partitions).

Failed log directories (KIP-112): an ``OSError`` from a partition's log (an append, a follower's
append or truncation, a read, a flush, a roll, a checkpoint, a leader-epoch file write) takes its
whole log directory offline (:meth:`ReplicaManager.fail_log_dir`): every partition in it stops
being served (produce and fetch answer KAFKA_STORAGE_ERROR, its follower fetch stops, waiting
requests are answered), its files are not touched again, and ``on_log_dir_failure`` tells the
broker, which tells the controller.

Threading: every method runs on the reactor thread. The only work sent elsewhere is ``Log.flush``
(fsync), the checkpoint writes and the leader-epoch file writes (one job for every partition a
LeaderAndIsr changed, :class:`~broker_core.log.leader_epoch.WriteBehind`), which run on
``io_pool``; a log has at most one flush in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twisted.internet import defer, task, threads
from twisted.logger import Logger

from broker_core.log import Log, LogConfig, LogManager
from broker_core.log.dir_state import DirStatus
from broker_core.log.leader_epoch import WriteBehind
from broker_core.metadata_cache import MetadataCache
from broker_core.purgatory import Purgatory
from broker_core.replica.alter_isr import AlterIsrSender, IsrChange
from broker_core.replica.fetch_path import FetchPath, FetchResult
from broker_core.replica.fetch_session import FetchContext, FetchSessionCache
from broker_core.replica.fetcher import FetcherConfig, ReplicaFetcherManager
from broker_core.replica.leader_and_isr import LeaderAndIsrApplier
from broker_core.replica.min_isr_cache import MinIsrCache
from broker_core.replica.partition import LeaderAndIsrState, Partition, PendingIsrChange
from broker_core.replica.produce_path import ProducePath, ProduceResult
from broker_core.replica.storage_failure import StorageFailures
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import ClientCredential
from broker_core.wire.topic_partition import TopicPartition

#: Re-exported: callers import the results of :meth:`ReplicaManager.append` and
#: :meth:`ReplicaManager.read` from here.
__all__ = ["FetchResult", "ProduceResult", "ReplicaManager"]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

#: Leader-epoch files changed by one event from which their writing waits
#: :data:`EPOCH_WRITE_BURST_DELAY_S` (see :class:`~broker_core.log.leader_epoch.WriteBehind`): a
#: failover's thousands of new leaderships are written once the new leaders are serving, not
#: while their first produce requests wait for the reactor. A handful of changes (a controlled
#: move, a preferred election of a few partitions) is written at once as before.
EPOCH_WRITE_BURST_FILES = 500
EPOCH_WRITE_BURST_DELAY_S = 2.0


class ReplicaManager:
    """See the module docstring."""

    log = Logger(namespace="sluice.replica")

    # Over 80 lines, kept whole: 24 keyword settings in the signature, then only assignments
    # and the collaborators built from them (the work is in those, one module each).
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        *,
        clock: Any,
        io_pool: Any,
        reactor: Any,
        topic_log_config: Callable[[str], LogConfig],
        metadata_cache: MetadataCache,
        metrics: Any = None,
        checkpoint_interval_s: float = 5.0,
        retention_check_interval_s: float = 300.0,
        flush_check_interval_s: float = 1.0,
        fetch_purge_interval: int = 1000,
        produce_purge_interval: int = 1000,
        fetcher_config: FetcherConfig | None = None,
        replica_lag_time_max_ms: int = 30000,
        min_insync_replicas: Callable[[str], int] = lambda topic: 1,
        broker_epoch: Callable[[], int] = lambda: -1,
        connect: Callable[[str, int], defer.Deferred] | None = None,
        credential: ClientCredential | None = None,
        tls: PeerTls | None = None,
        on_log_dir_failure: Callable[[DirStatus, list[TopicPartition]], None] | None = None,
        producer_id_expiration_ms: int = 86_400_000,
        producer_id_expiration_check_interval_s: float = 600.0,
    ) -> None:
        self.broker_id = broker_id
        #: Told of each log directory that goes offline, with the partitions it held.
        self.on_log_dir_failure = on_log_dir_failure
        self.log_manager = log_manager
        self.clock = clock
        self.reactor = reactor
        self.io_pool = io_pool
        self.topic_log_config = topic_log_config
        self.metadata_cache = metadata_cache
        self.metrics = metrics
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = -1
        self.produce_purgatory = Purgatory("produce", clock, metrics=metrics,
                                           purge_interval=produce_purge_interval)
        self.fetch_purgatory = Purgatory("fetch", clock, metrics=metrics,
                                         purge_interval=fetch_purge_interval)
        #: DeleteRecords waiting for the followers' log starts (Kafka's DelayedDeleteRecords).
        self.delete_records_purgatory = Purgatory("delete_records", clock, metrics=metrics)
        #: Followers' incremental fetch sessions on this leader (KIP-227).
        self.fetch_sessions = FetchSessionCache()
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        #: Each topic's min.insync.replicas, cached between changes of its settings.
        self._min_isr = MinIsrCache(min_insync_replicas)
        self.fetchers = ReplicaFetcherManager(
            broker_id, reactor=reactor, clock=clock, config=fetcher_config or FetcherConfig(),
            on_appended=self._on_follower_append, connect=connect, credential=credential,
            tls=tls,
            on_storage_error=lambda p, e: self.storage_error((p.topic, p.index), e,
                                                             "follower append"))
        self.alter_isr = AlterIsrSender(
            broker_id, broker_epoch, self._controller_address, self._on_isr_result,
            reactor=reactor, clock=clock, connect=connect, credential=credential, tls=tls)
        self._flushing: set[TopicPartition] = set()
        #: Partitions appended to as leader since the fetch purgatory was last woken for
        #: appends, and the one ``callLater(0)`` that wakes it (see :meth:`appended`).
        self._appended: dict[TopicPartition, None] = {}
        self._appended_wake: Any = None
        self._checkpointing = False
        self.epoch_writes = WriteBehind(
            clock, lambda fn: threads.deferToThreadPool(reactor, io_pool, fn),
            on_error=self._epoch_write_failed,
            burst_files=EPOCH_WRITE_BURST_FILES, burst_delay_s=EPOCH_WRITE_BURST_DELAY_S)
        self._loops: list[task.LoopingCall] = []
        # The jobs split out of this class; each reads and changes this manager's state.
        self._leader_and_isr = LeaderAndIsrApplier(self)
        self._produce = ProducePath(self)
        self._fetch = FetchPath(self)
        self._storage = StorageFailures(self)
        self._intervals = (
            (self._checkpoint, checkpoint_interval_s),
            (self._retention, retention_check_interval_s),
            (self._flush_due, flush_check_interval_s),
            (self._expire_producers, producer_id_expiration_check_interval_s),
            # Kafka checks at half the lag limit, so a lagging follower leaves within 1.5x.
            (self._shrink_isrs, replica_lag_time_max_ms / 2000.0),
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        for fn, interval in self._intervals:
            loop = task.LoopingCall(self._guarded, fn)
            loop.clock = self.clock
            loop.start(interval, now=False)
            self._loops.append(loop)

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        # A LoopingCall stops for good when its callable fails: log and keep the loop alive.
        try:
            d = fn()
        except Exception:
            self.log.failure("periodic task {fn} failed", fn=fn.__name__)
            return None
        if isinstance(d, defer.Deferred):
            d.addErrback(lambda f: self.log.failure("periodic task {fn} failed", f,
                                                    fn=fn.__name__))
        return d

    async def stop(self) -> None:
        if self._appended_wake is not None and self._appended_wake.active():
            self._appended_wake.cancel()
        self._appended_wake = None
        self._appended.clear()
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._loops.clear()
        self.alter_isr.stop()
        await self.fetchers.stop()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.delete_records_purgatory.shutdown()

    # -- partitions ------------------------------------------------------------------------------

    @property
    def min_insync_replicas(self) -> Callable[[str], int]:
        """The topic's min.insync.replicas, looked up once per config change (cached)."""
        return self._min_isr

    @min_insync_replicas.setter
    def min_insync_replicas(self, lookup: Callable[[str], int]) -> None:
        self._min_isr = MinIsrCache(lookup)

    def forget_topic_settings(self, topic: str) -> None:
        """Drop what is cached of ``topic``'s settings (its ``min.insync.replicas``): its
        overrides were just read, replaced or removed."""
        self._min_isr.forget(topic)

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1
                         ) -> tuple[Partition | None, str | None]:
        """The partition if we lead it, else the error name a client should get.

        KIP-320: a request that names the leader epoch it believes current (-1: no check) is
        refused with FENCED_LEADER_EPOCH if that epoch is older than ours and with
        UNKNOWN_LEADER_EPOCH if newer (we have not applied it yet)."""
        p = self.partitions.get((topic, index))
        if p is None:
            if self.log_manager.is_offline(topic, index):
                return None, "KAFKA_STORAGE_ERROR"
            known = self.metadata_cache.partition(topic, index) is not None
            return None, "NOT_LEADER_OR_FOLLOWER" if known else "UNKNOWN_TOPIC_OR_PARTITION"
        if current_leader_epoch >= 0 and current_leader_epoch != p.leader_epoch:
            return None, ("FENCED_LEADER_EPOCH" if current_leader_epoch < p.leader_epoch
                          else "UNKNOWN_LEADER_EPOCH")
        if not p.is_leader:
            return None, "NOT_LEADER_OR_FOLLOWER"
        return p, None

    def _get_or_create(self, topic: str, index: int) -> Partition:
        p = self.partitions.get((topic, index))
        if p is None:
            log = self.log_manager.get_or_create(topic, index, self.topic_log_config(topic))
            log.leader_epochs.write_behind = self.epoch_writes
            # A topic re-created under the same name reads its configs afresh.
            self._min_isr.forget(topic)
            p = Partition(topic, index, self.broker_id, log)
            self.partitions[(topic, index)] = p
        return p

    def adopt_local_logs(self, assigned: set[TopicPartition]) -> list[TopicPartition]:
        """Start-up: delete local logs no longer assigned here; return what was deleted.

        ``assigned`` is read from the metadata store after the broker registered, so controller
        commands may have arrived during that read: a partition a LeaderAndIsr made a replica
        here is newer than ``assigned`` and is kept (a topic created while the broker started
        would otherwise lose the log it had just been given)."""
        deleted = []
        for log in list(self.log_manager.logs()):
            tp = (log.topic, log.partition)
            if tp not in assigned and tp not in self.partitions:
                self.log.info("deleting local partition {t}-{p}: no longer assigned to this broker",
                              t=log.topic, p=log.partition)
                self._stop_partition(tp, delete=True)
                deleted.append(tp)
        return deleted

    def update_topic_config(self, topic: str) -> None:
        # Called for every topic with a partition here when the broker's dynamic configs
        # change: forget every cached min.insync.replicas, not only this topic's.
        self._min_isr.clear()
        config = self.topic_log_config(topic)
        for (t, _), p in self.partitions.items():
            if t == topic:
                p.log.update_config(config)

    # -- controller commands (docs/design.md#controller-commands) ---------------------------------

    def apply_leader_and_isr(
        self,
        controller_epoch: int,
        states: Iterable[tuple[str, int, LeaderAndIsrState]],
        *,
        full: bool,
        leaders: Mapping[int, tuple[str, int]] | None = None,
    ) -> dict[TopicPartition, str | None] | str:
        """Apply a LeaderAndIsr command. Returns per-partition errors, or a request-level error
        name (STALE_CONTROLLER_EPOCH) when the command comes from a deposed controller.

        ``leaders`` maps leader ids to addresses (the request's live leaders); a follower
        fetches from there, or from the address in the metadata cache. See
        :mod:`broker_core.replica.leader_and_isr`."""
        return self._leader_and_isr.apply(controller_epoch, states, full=full, leaders=leaders)

    def _follow(self, p: Partition, leader: int,
                leaders: Mapping[int, tuple[str, int]] | None) -> None:
        self._leader_and_isr.follow(p, leader, leaders)

    def apply_stop_replica(
        self, controller_epoch: int, partitions: Iterable[tuple[str, int, bool]]
    ) -> dict[TopicPartition, str | None] | str:
        if controller_epoch < self.controller_epoch:
            return "STALE_CONTROLLER_EPOCH"
        self.controller_epoch = controller_epoch
        results: dict[TopicPartition, str | None] = {}
        for topic, index, delete in partitions:
            tp = (topic, index)
            try:
                self._stop_partition(tp, delete=delete, wake=False)
                results[tp] = None
            except OSError as e:
                self.log.error("stop replica {t}-{p} failed: {e}", t=topic, p=index, e=e)
                results[tp] = "KAFKA_STORAGE_ERROR"
        self._wake_many(list(results))
        return results

    def _stop_partition(self, tp: TopicPartition, *, delete: bool, wake: bool = True) -> None:
        self.fetchers.unfollow([tp])
        self.alter_isr.forget(tp)
        p = self.partitions.pop(tp, None)
        if p is not None:
            p.state = None
            if wake:
                self._wake(tp)
        if delete:
            if self.log_manager.get(*tp) is not None:
                self.log_manager.delete(*tp)
                self.log.info("deleted log of {t}-{p}", t=tp[0], p=tp[1])

    def _wake(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)

    def appended(self, tps: Iterable[TopicPartition]) -> None:
        """New data was appended to leader partitions ``tps``: wake the fetches parked on
        them (followers' long polls) once, at the end of this reactor turn.

        Every produce request read in one turn (from one connection or several) is appended
        before the parked fetches answer, so each follower gets all of it in one response,
        instead of the first request's batch now and the rest one fetch round later: under
        load, when many small requests arrive together, that is one follower round trip per
        turn instead of one per request. Nothing waits longer than the current turn: the
        ``callLater(0)`` runs before the reactor polls again."""
        pending = self._appended
        for tp in tps:
            pending[tp] = None
        if pending and self._appended_wake is None:
            self._appended_wake = self.clock.callLater(0, self._wake_appended)

    def _wake_appended(self) -> None:
        self._appended_wake = None
        tps, self._appended = list(self._appended), {}
        self.fetch_purgatory.check_and_complete_keys(tps)

    def _wake_many(self, tps: list[TopicPartition]) -> None:
        self.produce_purgatory.check_and_complete_keys(tps)
        self.fetch_purgatory.check_and_complete_keys(tps)
        self.delete_records_purgatory.check_and_complete_keys(tps)

    # -- failed log directories (KIP-112) ------------------------------------------------------

    def storage_error(self, tp: TopicPartition | None, error: BaseException, what: str) -> None:
        """An I/O error while doing ``what`` to partition ``tp``'s log (``None``: no partition
        known; the directory is found from the file the error names): take its log
        directory offline. An error that cannot be placed in a directory is only logged; a
        :class:`~broker_core.log.CorruptLogError` takes only partition ``tp`` offline."""
        self._storage.storage_error(tp, error, what)

    def fail_log_dir(self, log_dir: Any, error: BaseException | str, what: str) -> None:
        """Take ``log_dir`` offline (see the module docstring); nothing happens if it is
        offline already. Its partitions leave ``partitions`` (so every request for them finds
        KAFKA_STORAGE_ERROR), their fetchers and pending ISR changes stop, and requests waiting
        on them are answered now."""
        self._storage.fail_log_dir(log_dir, error, what)

    def fail_partition(self, tp: TopicPartition, error: BaseException, what: str) -> None:
        """Take partition ``tp`` offline on this broker after its log failed a check: as for a
        failed directory, but for this partition alone (see :meth:`fail_log_dir`)."""
        self._storage.fail_partition(tp, error, what)

    def _epoch_write_failed(self, failure: Any) -> None:
        if failure.check(OSError):
            self.storage_error(None, failure.value, "leader-epoch file write")
        else:
            self.log.failure("writing leader-epoch files failed", failure)

    # -- produce ----------------------------------------------------------------------------------

    def append(
        self,
        acks: int,
        timeout_ms: int,
        entries: Iterable[tuple[str, int, Any]],
    ) -> defer.Deferred:
        """Append to leader partitions; fire with ``{tp: ProduceResult}``.

        acks 0 and 1 answer at once; acks=-1 waits in the produce purgatory until the high
        watermark passes each appended batch or ``timeout_ms`` passes (REQUEST_TIMED_OUT).
        See :mod:`broker_core.replica.produce_path`.
        """
        return self._produce.append(acks, timeout_ms, entries)

    # -- DeleteRecords (KIP-107) -------------------------------------------------------------------

    def delete_records(self, requests: list[tuple[str, int, int]], timeout_ms: int
                       ) -> defer.Deferred:
        """Move partitions' log starts up to the offsets asked (-1: the high watermark) on
        their leader (this broker), then wait, as Kafka does, until every live replica has
        moved its own (the followers follow the log start their fetch answers carry, and tell
        it back in their next fetch) or ``timeout_ms`` passes. Fires with
        ``{(topic, partition): (error name or None, low watermark)}``.

        Refused at once, changing nothing: not the leader, an offset past the high watermark
        (or negative but -1: OFFSET_OUT_OF_RANGE). An offset at or below the log start moves
        nothing and waits like any other. The segments wholly below a new start go at the next
        retention run (only those: running retention here would apply its limits early)."""
        return self._produce.delete_records(requests, timeout_ms)

    def _record_follower_log_starts(self, replica_id: int,
                                    starts: Sequence[tuple[str, int, int]]) -> None:
        self._produce.record_follower_log_starts(replica_id, starts)

    # -- fetch ------------------------------------------------------------------------------------

    def read(self, topic: str, index: int, offset: int, max_bytes: int, *,
             consumer: bool = True, current_leader_epoch: int = -1) -> FetchResult:
        """Read from a leader partition; consumers never see past the high watermark, followers
        read up to the log end.

        An offset between HW and LEO returns an empty set, past LEO it is
        OFFSET_OUT_OF_RANGE.
        """
        return self._fetch.read(topic, index, offset, max_bytes, consumer=consumer,
                                current_leader_epoch=current_leader_epoch)

    def fetch(
        self,
        requests: list[tuple[str, int, int, int, int]],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        replica_id: int = -1,
        follower_log_starts: Sequence[tuple[str, int, int]] = (),
        session: FetchContext | None = None,
    ) -> defer.Deferred:
        """Consumer or follower fetch: ``requests`` are ``(topic, partition, offset,
        partition_max_bytes, current_leader_epoch)`` (epoch -1: unchecked); ``replica_id`` >= 0
        is a follower, and ``follower_log_starts`` the ``(topic, partition, log start)`` its
        request reported (for DeleteRecords' low watermark). ``session``, the request's
        fetch session context: in an incremental follower fetch, partitions with nothing new
        for it are not read (their rows would be left out of the answer).

        Fires with ``[(topic, partition, FetchResult)]`` in request order. Waits in the fetch
        purgatory (long poll) while fewer than ``min_bytes`` are available, no partition has an
        error, and ``max_wait_ms`` has not passed. A follower's fetch offset is its log end: it
        is recorded on arrival (it may advance the HW and admit the follower to the ISR), and
        the follower reads up to our log end, not the HW. See
        :mod:`broker_core.replica.fetch_path`.
        """
        return self._fetch.fetch(requests, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                 max_bytes=max_bytes, replica_id=replica_id,
                                 follower_log_starts=follower_log_starts, session=session)

    # -- replication: the leader's side ----------------------------------------------------------

    def _record_follower_fetches(self, replica_id: int,
                                 reqs: list[tuple[str, int, int, int, int]]) -> None:
        self._fetch.record_follower_fetches(replica_id, reqs)

    def _propose_isr(self, p: Partition, new_isr: tuple[int, ...]) -> None:
        pending = p.propose_isr(new_isr)
        self.alter_isr.submit(IsrChange(p.topic, p.index, pending.leader_epoch, pending.isr,
                                        pending.partition_epoch))
        if p.maybe_advance_high_watermark():  # an expansion can only hold the HW back; no-op
            self._wake(p.topic_partition)

    def _shrink_isrs(self) -> None:
        now_ms = self._now_ms()
        for p in list(self.partitions.values()):
            if not p.is_leader or p.pending_isr is not None:
                continue
            out = p.out_of_sync_replicas(now_ms, self.replica_lag_time_max_ms)
            if out:
                new_isr = tuple(b for b in p.isr if b not in out)
                self.log.info("{t}-{p}: replicas {out} lag more than {ms} ms; asking the "
                              "controller to shrink the ISR to {isr}", t=p.topic, p=p.index,
                              out=out, ms=self.replica_lag_time_max_ms, isr=list(new_isr))
                self._propose_isr(p, new_isr)

    def _on_isr_result(self, change: IsrChange, error: str | None, leader_epoch: int,
                       isr: tuple[int, ...], zk_version: int) -> None:
        """The controller's answer to ``change``. It counts only if ``change`` is the partition's
        pending change (same proposed ISR, leader epoch and partition epoch): an answer that
        arrives after a LeaderAndIsr settled its change must not end a newer change that is
        still in flight, or the HW would stop counting a replica that change adds."""
        tp = (change.topic, change.partition)
        p = self.partitions.get(tp)
        if p is None or not p.is_leader:
            return
        answered = PendingIsrChange(change.new_isr, change.leader_epoch, change.zk_version)
        if p.pending_isr != answered:
            self.log.debug("{t}-{p}: ignoring the answer to ISR {isr} at partition epoch {v}: "
                           "not the pending change ({pending})", t=tp[0], p=tp[1],
                           isr=list(change.new_isr), v=change.zk_version, pending=p.pending_isr)
            return
        if error is not None:
            self.log.info("{t}-{p}: controller refused ISR {isr}: {e}", t=tp[0], p=tp[1],
                          isr=list(change.new_isr), e=error)
            p.refuse_isr_change(answered)
        else:
            old = p.isr
            if p.apply_isr_update(answered, leader_epoch, isr, zk_version):
                self._isr_changed(p, old)
        if p.maybe_advance_high_watermark():
            self._wake(tp)
        else:
            # An ISR that shrank below min.insync.replicas must fail waiting acks=all produces.
            self.produce_purgatory.check_and_complete(tp)

    def _isr_changed(self, p: Partition, old: tuple[int, ...]) -> None:
        """Log and count an ISR change of a partition we lead (the controller's answer and its
        LeaderAndIsr both carry it; whichever arrives second finds nothing changed)."""
        new = p.isr
        if set(new) == set(old):
            return
        self.log.info("{t}-{p}: ISR {old} -> {new}", t=p.topic, p=p.index, old=list(old),
                      new=list(new))
        if self.metrics is not None:
            if len(new) < len(old):
                self.metrics.isr_shrinks_total.inc()
            else:
                self.metrics.isr_expands_total.inc()

    def _controller_address(self) -> tuple[int, str, int] | None:
        cid = self.metadata_cache.controller_id
        b = self.metadata_cache.brokers.get(cid)
        return None if b is None else (cid, b.host, b.port)

    # -- replication: the follower's side --------------------------------------------------------

    def _on_follower_append(self, p: Partition) -> None:
        self._maybe_flush(p.log)

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    # -- offsets ----------------------------------------------------------------------------------

    def list_offset(self, topic: str, index: int, timestamp: int) -> tuple[str | None, int, int, int]:
        """ListOffsets for one partition: ``(error, timestamp, offset, leader_epoch)``."""
        p, error = self.leader_partition(topic, index)
        if p is None:
            return error, -1, -1, -1
        log = p.log
        if timestamp == EARLIEST_TIMESTAMP:
            return None, -1, log.log_start_offset, p.leader_epoch
        if timestamp == LATEST_TIMESTAMP:
            return None, -1, p.high_watermark, p.leader_epoch
        if timestamp == MAX_TIMESTAMP:
            found = log.offset_for_max_timestamp() if hasattr(log, "offset_for_max_timestamp") \
                else None
            if found is None:
                return None, -1, -1, p.leader_epoch
            return None, found[1], found[0], p.leader_epoch
        if timestamp < 0:
            return "INVALID_REQUEST", -1, -1, -1
        found = log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= p.high_watermark:
            return None, -1, -1, p.leader_epoch
        return None, found[1], found[0], p.leader_epoch

    # -- housekeeping -----------------------------------------------------------------------------

    def _maybe_flush(self, log: Log) -> None:
        if log.should_flush():
            self._flush(log)

    def _flush(self, log: Log) -> None:
        tp = (log.topic, log.partition)
        if tp in self._flushing:
            return
        self._flushing.add(tp)
        started = self.clock.seconds()
        d = threads.deferToThreadPool(self.reactor, self.io_pool, log.flush)

        def done(result: Any) -> Any:
            self._flushing.discard(tp)
            if self.metrics is not None:
                self.metrics.flush_duration_seconds.observe(self.clock.seconds() - started)
            return result

        d.addBoth(done)

        def failed(f: Any) -> None:
            if f.check(OSError):
                self.storage_error(tp, f.value, "flush")
            else:
                self.log.failure("flush of {t}-{p} failed", f, t=tp[0], p=tp[1])

        d.addErrback(failed)

    def _flush_due(self) -> None:
        for p in list(self.partitions.values()):
            self._maybe_flush(p.log)

    def _retention(self) -> None:
        for p in list(self.partitions.values()):
            log = p.log
            if self.partitions.get(p.topic_partition) is not p:
                continue  # its directory went offline earlier in this round
            try:
                rolled = log.maybe_roll()
                deleted = log.delete_old_segments()
            except OSError as e:
                self.storage_error(p.topic_partition, e, "roll or retention")
                continue
            if rolled:
                self.log.info("rolled segment of {t}-{p} (segment.ms)", t=p.topic, p=p.index)
            if deleted:
                self.log.info("retention deleted {n} segment(s) of {t}-{p}; log start now {s}",
                              n=deleted, t=p.topic, p=p.index, s=log.log_start_offset)

    def _expire_producers(self) -> None:
        """Forget idempotent producers silent for ``producer.id.expiration.ms``."""
        now = self._now_ms()
        for p in list(self.partitions.values()):
            gone = p.log.remove_expired_producers(now, self.producer_id_expiration_ms)
            if gone:
                self.log.info("forgot {n} expired producer(s) of {t}-{p}", n=gone, t=p.topic,
                              p=p.index)

    def _checkpoint(self) -> defer.Deferred | None:
        if self._checkpointing:
            return None
        self._checkpointing = True
        d = threads.deferToThreadPool(self.reactor, self.io_pool, self.log_manager.checkpoint)

        def done(result: Any) -> Any:
            self._checkpointing = False
            return result

        def failed_dirs(failed: dict[Any, OSError] | None) -> None:
            for log_dir, error in (failed or {}).items():
                self.fail_log_dir(log_dir, error, "checkpoint")

        d.addBoth(done)
        d.addCallback(failed_dirs)
        return d

    def follower_lag_metrics(self) -> Iterable[tuple[str, int, int, int]]:
        """Rows for the follower-lag collector: (topic, partition, follower, messages behind)
        for partitions led here and followers that have fetched since."""
        for (topic, index), p in list(self.partitions.items()):
            if not p.is_leader:
                continue
            leo = p.log.log_end_offset
            for r in p.remotes.values():
                if r.log_end_offset >= 0:
                    yield topic, index, r.broker_id, max(0, leo - r.log_end_offset)

    def partition_metrics(self) -> Iterable[tuple[str, int, int, int, bool, int, int, int]]:
        """Rows for the metrics collector: (topic, partition, log end, size, is leader, ISR
        size, replica count, min.insync.replicas)."""
        for (topic, index), p in list(self.partitions.items()):
            replicas = len(p.state.replicas) if p.state is not None else 0
            yield (topic, index, p.log.log_end_offset, p.log.size_bytes, p.is_leader,
                   len(p.isr), replicas, self.min_insync_replicas(topic))
