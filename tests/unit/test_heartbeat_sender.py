"""The broker's side of broker liveness on a task.Clock: heartbeats to the controller found in
the store, and a broker that cannot reach the controller (its store session alive) records it and
gives up the leaderships the controller moved, learning them from the store; when heartbeats are
answered again it withdraws the record. A real ReplicaManager with real logs; the in-memory store
of the coordinator tests."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.controller.broker_liveness import UnreachableVote
from broker_core.controller.heartbeat_sender import ControllerHeartbeatSender
from broker_core.log import LogConfig, LogManager
from broker_core.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.replica.published_leadership import adopt_published_leadership
from broker_core.wire.apis import ApiKey
from tests.support.memory_store import MemoryStore

SESSION = 3.0
BEAT = 0.5
REPLICAS = (1, 2, 3)


class Controller3:
    """The connection to controller 3: hangs while ``cut``, else answers heartbeats."""

    def __init__(self) -> None:
        self.cut = True
        self.beats: list[dict] = []
        self.closed = False
        self.transport = SimpleNamespace(loseConnection=lambda: None)

    def connect(self, host: str, port: int) -> defer.Deferred:
        if self.cut:
            return defer.Deferred()  # packets dropped: neither opens nor fails
        return defer.succeed(self)

    def request(self, api_key: int, version: int, body: dict) -> defer.Deferred:
        assert api_key == ApiKey.BROKER_HEARTBEAT and version == 0
        self.beats.append(body)
        return defer.succeed(SimpleNamespace(error_code=0, is_fenced=False))


def setup(tmp_path):
    clock = task.Clock()
    store = MemoryStore()
    store.create(paths.CONTROLLER_EPOCH, b"4")
    store.create(paths.broker(3), paths.BrokerRegistration(3, "h3", 9003).to_bytes(),
                 makepath=True)
    store.create(paths.CONTROLLER, paths.ControllerRegistration(3, 0).to_bytes())
    # The controller already moved t-0 to broker 2 (epoch 2) and dropped broker 1 from its ISR.
    store.create(paths.leader_and_isr("t", 0), paths.LeaderAndIsr(2, 2, [2, 3], 4).to_bytes(),
                 makepath=True)
    # t-1 is still led by broker 1 as far as the store says.
    store.create(paths.leader_and_isr("t", 1), paths.LeaderAndIsr(1, 1, [1, 2, 3], 4).to_bytes(),
                 makepath=True)
    logs = LogManager(tmp_path, LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
    cache = MetadataCache()
    cache.apply(3, 4, [BrokerEndpoint(b, f"h{b}", 9000 + b, None) for b in REPLICAS],
                [("t", p, PartitionState(1, 1, REPLICAS, REPLICAS)) for p in (0, 1)])
    rm = ReplicaManager(1, logs, clock=clock, io_pool=None, reactor=None,
                        topic_log_config=lambda topic: LogConfig(), metadata_cache=cache,
                        min_insync_replicas=lambda topic: 2,
                        connect=lambda host, port: defer.Deferred())  # followers: no network
    rm.epoch_writes.run_blocking = lambda fn: defer.maybeDeferred(fn)  # no thread pool here
    rm.apply_leader_and_isr(4, [("t", p, LeaderAndIsrState(1, 1, REPLICAS, REPLICAS, 4, 0))
                                for p in (0, 1)], full=False)
    ctrl = Controller3()
    sender = ControllerHeartbeatSender(
        1, lambda: 77, store, reactor=None, clock=clock, interval_s=BEAT,
        session_timeout_s=SESSION, is_controller=lambda: False,
        adopt=lambda: defer.Deferred.fromCoroutine(
            adopt_published_leadership(1, store, rm, cache)),
        connect=ctrl.connect)
    return clock, store, cache, rm, ctrl, sender


def test_a_cut_off_broker_records_it_and_gives_up_the_moved_leaderships(tmp_path):
    clock, store, cache, rm, ctrl, sender = setup(tmp_path)
    try:
        sender.start()
        clock.advance(BEAT)
        assert rm.get_partition("t", 0).is_leader
        # Two beats without an answer: the broker looks in the store. t-0, which the store says
        # broker 2 leads at a newer epoch, is given up; t-1, which it still leads as far as the
        # store says, is kept.
        for _ in range(2):
            clock.advance(BEAT)
        p0 = rm.get_partition("t", 0)
        assert not p0.is_leader and p0.leader_epoch == 2
        assert cache.partition("t", 0).leader == 2
        assert rm.get_partition("t", 1).is_leader and cache.partition("t", 1).leader == 1
        assert paths.controller_unreachable(1) not in store.nodes
        # A whole session without an answer: recorded against controller 3 at epoch 4.
        for _ in range(int(SESSION / BEAT) - 4):
            clock.advance(BEAT)
        assert paths.controller_unreachable(1) not in store.nodes
        clock.advance(BEAT)
        data, _ = store.nodes[paths.controller_unreachable(1)]
        assert UnreachableVote.from_bytes(1, data) == UnreachableVote(1, 3, 4)
        # The heal: the next heartbeat is answered and the record goes.
        ctrl.cut = False
        for _ in range(int(SESSION / BEAT) + 2):
            clock.advance(BEAT)
        assert ctrl.beats and ctrl.beats[-1]["broker_id"] == 1
        assert ctrl.beats[-1]["broker_epoch"] == 77
        assert paths.controller_unreachable(1) not in store.nodes
        assert not sender.lease.expired
    finally:
        sender.stop()
        rm.log_manager.shutdown()


def test_no_record_while_the_store_session_is_not_connected(tmp_path):
    from broker_core.metadata import SessionState

    clock, store, cache, rm, ctrl, sender = setup(tmp_path)
    try:
        sender.start()
        store.state(SessionState.SUSPENDED)
        for _ in range(int(3 * SESSION / BEAT)):
            clock.advance(BEAT)
        assert paths.controller_unreachable(1) not in store.nodes
        assert rm.get_partition("t", 0).is_leader  # nothing read from a store it cannot reach
    finally:
        sender.stop()
        rm.log_manager.shutdown()


def test_a_stall_of_the_broker_itself_is_not_a_lost_controller(tmp_path):
    # The broker's own process did not run (SIGSTOP, a long GC) for two sessions: the answers it
    # could not read meanwhile are not missing. Its first tick after the stall neither records
    # the controller unreachable nor gives up a leadership.
    clock, store, cache, rm, ctrl, sender = setup(tmp_path)
    ctrl.cut = False
    try:
        sender.start()
        for _ in range(3):
            clock.advance(BEAT)
        assert ctrl.beats
        clock.rightNow += 2 * SESSION
        clock.advance(0)
        assert not sender.lease.expired
        assert paths.controller_unreachable(1) not in store.nodes
        assert rm.get_partition("t", 0).is_leader
    finally:
        sender.stop()
        rm.log_manager.shutdown()
