"""Failed storage on this broker (KIP-112): an ``OSError`` from a partition's log takes its
whole log directory offline, a :class:`~broker_core.log.CorruptLogError` (bad bytes read back
from a disk that otherwise answers) takes that one partition offline.

Owns no state: the partitions, fetchers, pending ISR changes and purgatories are the
:class:`~broker_core.replica.manager.ReplicaManager`'s. Invariants: an offline partition leaves
``partitions`` (every request for it finds KAFKA_STORAGE_ERROR), its fetcher and pending ISR
change stop, requests waiting on it are answered at once, its files are not touched again, and
the broker is told once (``on_log_dir_failure``); failing what is already offline does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker_core.log import CorruptLogError
from broker_core.wire.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker_core.replica.manager import ReplicaManager


class StorageFailures:
    """Takes ``replicas``' failed log directories and partitions offline; see the module
    docstring."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def storage_error(self, tp: TopicPartition | None, error: BaseException, what: str) -> None:
        """See :meth:`ReplicaManager.storage_error`."""
        rm = self.replicas
        if tp is not None and isinstance(error, CorruptLogError):
            # Bad bytes in one log, read back from a disk that otherwise answers: only that
            # partition stops being served (its leadership moves; a restart's recovery cuts
            # the log at the damage and the replica refetches), not the whole directory.
            self.fail_partition(tp, error, what)
            return
        log_dir = rm.log_manager.dir_of(*tp) if tp is not None else None
        if log_dir is None:
            log_dir = rm.log_manager.dir_for_error(error)
        if log_dir is None:
            rm.log.error("{what} failed with an I/O error outside any log directory: {e}",
                         what=what, e=error)
            return
        self.fail_log_dir(log_dir, error, what if tp is None else f"{what} of {tp[0]}-{tp[1]}")

    def fail_log_dir(self, log_dir: Any, error: BaseException | str, what: str) -> None:
        """See :meth:`ReplicaManager.fail_log_dir`."""
        rm = self.replicas
        gone = rm.log_manager.fail_dir(log_dir, error)
        if gone is None:
            return
        status = rm.log_manager.dir_states.status(log_dir)
        led = self._stop_serving(gone)
        rm.log.critical(
            "log directory {d} is OFFLINE after an I/O error during {what} ({e}): {n} partitions "
            "({l} led here) are no longer served and its files are left untouched until the "
            "broker restarts; online directories: {online}", d=str(log_dir), what=what,
            e=status.error, n=len(gone), l=led,
            online=[str(x) for x in rm.log_manager.dir_states.online()])
        if rm.on_log_dir_failure is not None:
            rm.on_log_dir_failure(status, gone)

    def _stop_serving(self, tps: list[TopicPartition]) -> int:
        """Forget partitions whose logs were taken offline: their fetchers and pending ISR
        changes stop, requests waiting on them are answered now. Returns how many were led."""
        rm = self.replicas
        led = 0
        for tp in tps:
            rm.fetchers.unfollow([tp])
            rm.alter_isr.forget(tp)
            rm._flushing.discard(tp)
            p = rm.partitions.pop(tp, None)
            if p is not None:
                led += p.is_leader
                p.state = None
        rm.fetchers.shutdown_idle()
        rm._wake_many(tps)
        return led

    def fail_partition(self, tp: TopicPartition, error: BaseException, what: str) -> None:
        """See :meth:`ReplicaManager.fail_partition`."""
        rm = self.replicas
        log_dir = rm.log_manager.dir_of(*tp)
        if log_dir is None or not rm.log_manager.fail_partition(tp):
            return
        self._stop_serving([tp])
        rm.log.critical(
            "partition {t}-{p} is OFFLINE on this broker after {what}: {e}; it is no longer "
            "served here (its leadership moves) and its files are left untouched until the "
            "broker restarts, whose recovery cuts the log at the damage; the other partitions "
            "of {d} are served", t=tp[0], p=tp[1], what=what, e=error, d=str(log_dir))
        if rm.on_log_dir_failure is not None:
            rm.on_log_dir_failure(rm.log_manager.dir_states.status(log_dir), [tp])
