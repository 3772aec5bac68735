"""``ReplicaManager.adopt_local_logs``, the start-up step that deletes local logs the metadata no
longer assigns here, on a ``task.Clock`` with real logs. The assignment it is given was read
while the broker was already registered, so a LeaderAndIsr may have come in meanwhile."""

from __future__ import annotations

from pathlib import Path

from twisted.internet import task

from broker_core.log import LogConfig, LogManager
from broker_core.metadata_cache import MetadataCache
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState


def make_manager(tmp_path: Path) -> ReplicaManager:
    """Broker 1's replica manager over the logs on disk in ``tmp_path`` (loaded, as at
    start-up)."""
    clock = task.Clock()
    logs = LogManager(tmp_path, LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
    logs.load()
    return ReplicaManager(1, logs, clock=clock, io_pool=None, reactor=None,
                          topic_log_config=lambda topic: LogConfig(),
                          metadata_cache=MetadataCache(), min_insync_replicas=lambda topic: 1)


def test_a_log_left_from_before_that_is_no_longer_assigned_is_deleted(tmp_path):
    old = make_manager(tmp_path)
    old.apply_leader_and_isr(1, [("gone", 0, LeaderAndIsrState(1, 1, (1,), (1,), 1, 0)),
                                 ("kept", 0, LeaderAndIsrState(1, 1, (1,), (1,), 1, 0))],
                             full=False)
    old.log_manager.shutdown()
    rm = make_manager(tmp_path)  # restarted: the logs are on disk, no partition yet
    try:
        assert rm.adopt_local_logs({("kept", 0)}) == [("gone", 0)]
        assert sorted((log.topic, log.partition) for log in rm.log_manager.logs()) == [
            ("kept", 0)]
    finally:
        rm.log_manager.shutdown()


def test_a_partition_a_leader_and_isr_created_during_start_up_is_kept(tmp_path):
    """The topic was created after start-up read the assignments: the controller's LeaderAndIsr
    for it arrived first. Deleting its log would leave the broker leading a partition it
    cannot serve."""
    rm = make_manager(tmp_path)
    try:
        rm.apply_leader_and_isr(2, [("new", 0, LeaderAndIsrState(1, 0, (1,), (1,), 2, 0))],
                                full=False)
        assert rm.adopt_local_logs(set()) == []
        assert rm.get_partition("new", 0) is not None
        assert [(log.topic, log.partition) for log in rm.log_manager.logs()] == [("new", 0)]
    finally:
        rm.log_manager.shutdown()
