"""The leader's produce and follower-fetch path in ``ReplicaManager``, on a ``task.Clock`` with
real logs: parked follower fetches are answered by an append, acks=all waits for both
followers' next fetch, and a produce naming several partitions reaches a follower in one
answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet import task

from broker_core.log import LogConfig, LogManager
from broker_core.metadata_cache import MetadataCache
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.replica.produce_path import ProduceResult
from broker_core.wire.records import Record, build_batch, iter_batches
from tests.support.inline_pool import InlinePool

REPLICAS = (1, 2, 3)


def make_leader(tmp_path: Path, partitions: int = 2) -> tuple[task.Clock, ReplicaManager]:
    """Broker 1 leading ``t``-0..n-1 with ISR 1, 2, 3; returns ``(clock, manager)``. The
    caller shuts its purgatories and logs down (the ``leader`` fixture does)."""
    clock = task.Clock()
    logs = LogManager(tmp_path, LogConfig(), time_ms=lambda: int(clock.seconds() * 1000))
    pool = InlinePool()  # the leader-epoch writes run when the clock turns
    rm = ReplicaManager(1, logs, clock=clock, io_pool=pool, reactor=pool,
                        topic_log_config=lambda topic: LogConfig(),
                        metadata_cache=MetadataCache(), min_insync_replicas=lambda topic: 2)
    rm.apply_leader_and_isr(1, [("t", p, LeaderAndIsrState(1, 1, REPLICAS, REPLICAS, 1, 0))
                                for p in range(partitions)], full=False)
    return clock, rm


@pytest.fixture
def leader(tmp_path):
    clock, rm = make_leader(tmp_path)
    yield clock, rm
    rm.log_manager.shutdown()


def follower_fetch(rm: ReplicaManager, replica: int, offsets: dict[int, int]):
    got: list = []
    rm.fetch([("t", p, o, 1 << 20, 1) for p, o in offsets.items()], max_wait_ms=500,
             min_bytes=1, max_bytes=10 << 20, replica_id=replica).addCallback(got.append)
    return got


def batch(value: bytes) -> bytes:
    return build_batch([Record(None, value)])


def test_acks_all_answers_after_both_followers_fetched_again(leader):
    clock, rm = leader
    f2, f3 = follower_fetch(rm, 2, {0: 0, 1: 0}), follower_fetch(rm, 3, {0: 0, 1: 0})
    assert f2 == [] and f3 == []  # parked: nothing to read
    acked: list = []
    rm.append(-1, 30000, [("t", 0, batch(b"a"))]).addCallback(acked.append)
    assert f2 == [] and f3 == []  # woken at the end of the reactor turn, not in the append
    clock.advance(0)
    # The end of the turn answered both parked fetches at once, with the batch.
    assert f2 and f3
    assert [len(r.records) > 0 for _, _, r in f2[0]] == [True, False]
    assert acked == []
    follower_fetch(rm, 2, {0: 1, 1: 0})
    assert acked == []  # HW is the ISR's minimum: broker 3 has not fetched past it
    follower_fetch(rm, 3, {0: 1, 1: 0})
    assert acked and acked[0][("t", 0)].error is None
    assert rm.get_partition("t", 0).high_watermark == 1


def test_a_produce_to_several_partitions_reaches_a_parked_follower_in_one_answer(leader):
    clock, rm = leader
    f2 = follower_fetch(rm, 2, {0: 0, 1: 0})
    rm.append(-1, 30000, [("t", 0, batch(b"a")), ("t", 1, batch(b"b"))])
    clock.advance(0)
    assert f2
    assert [(p, len(r.records) > 0) for _, p, r in f2[0]] == [(0, True), (1, True)]


def test_the_produces_of_one_reactor_turn_reach_a_parked_follower_in_one_answer(leader):
    """Small requests that arrive together (linger.ms=0 under load) are appended before the
    parked fetch answers: one follower round trip for all of them, not one each."""
    clock, rm = leader
    f2 = follower_fetch(rm, 2, {0: 0, 1: 0})
    woken: list = []
    real = rm.fetch_purgatory.check_and_complete_keys
    rm.fetch_purgatory.check_and_complete_keys = lambda keys: woken.append(list(keys)) or real(
        keys)
    for value in (b"a", b"b", b"c"):
        rm.append(-1, 30000, [("t", 0, batch(value))])
    rm.append(-1, 30000, [("t", 1, batch(b"d"))])
    assert f2 == [] and woken == []
    clock.advance(0)
    assert woken == [[("t", 0), ("t", 1)]]  # one wake for the turn's four requests
    by_partition = {p: r.records for _, p, r in f2[0]}
    assert len(list(iter_batches(by_partition[0]))) == 3
    assert len(list(iter_batches(by_partition[1]))) == 1
    clock.advance(0)
    assert len(woken) == 1  # nothing appended since: no second wake


def test_min_insync_replicas_is_asked_once_per_config_change_and_partition_creation(tmp_path):
    """The lookup parses the topic's override: cached, but never past a change of the topic's
    or the broker's configs, nor past the topic's re-creation."""
    clock, rm = make_leader(tmp_path, partitions=1)
    try:
        asked: list[str] = []
        value = [2]
        rm.min_insync_replicas = lambda topic: asked.append(topic) or value[0]
        for _ in range(3):
            rm.append(-1, 30000, [("t", 0, batch(b"a"))])
        assert asked == ["t"]
        # An ISR of two below a new min.insync.replicas of 4: refused once the config says so.
        rm.apply_leader_and_isr(1, [("t", 0, LeaderAndIsrState(1, 2, (1, 2), REPLICAS, 1, 1))],
                                full=False)
        value[0] = 4
        assert rm.min_insync_replicas("t") == 2  # nothing told the manager yet
        rm.update_topic_config("t")  # what a topic or dynamic broker config change calls
        refused = []
        rm.append(-1, 30000, [("t", 0, batch(b"b"))]).addCallback(refused.append)
        assert refused[0][("t", 0)].error == "NOT_ENOUGH_REPLICAS"
        assert asked == ["t", "t"]
        # The topic deleted and created again under its name: its configs are read afresh.
        rm.apply_stop_replica(2, [("t", 0, True)])
        value[0] = 1
        rm.apply_leader_and_isr(3, [("t", 0, LeaderAndIsrState(1, 1, (1,), (1,), 1, 0))],
                                full=False)
        assert rm.min_insync_replicas("t") == 1
        # Re-created while this replica missed the StopReplica (its partition survived): the
        # broker reads the new topic's overrides and forgets what was cached.
        rm.append(-1, 30000, [("t", 0, batch(b"c"))])
        before = len(asked)
        rm.forget_topic_settings("t")
        rm.append(-1, 30000, [("t", 0, batch(b"d"))])
        assert len(asked) == before + 1
    finally:
        rm.log_manager.shutdown()


def test_an_append_that_cannot_move_the_hw_does_not_retry_waiting_produces(leader):
    """With followers in the ISR only their fetches move the HW: each append used to re-try
    every acks=all produce waiting on the partition (quadratic under many small requests)."""
    clock, rm = leader
    acked: list = []
    for i in range(20):
        rm.append(-1, 30000, [("t", 0, batch(b"%d" % i))]).addCallback(acked.append)
    tries = []
    real = rm.produce_purgatory._safe_try
    rm.produce_purgatory._safe_try = lambda op: tries.append(op) or real(op)
    rm.append(-1, 30000, [("t", 0, batch(b"last"))]).addCallback(acked.append)
    assert len(tries) == 2  # the new request's own try, watch, try; none of the 20 waiting
    assert acked == []
    # The followers' fetches move the HW and complete all 21 at once.
    follower_fetch(rm, 2, {0: 21, 1: 0})
    follower_fetch(rm, 3, {0: 21, 1: 0})
    assert len(acked) == 21


def test_a_follower_fetch_moving_many_hws_retries_each_waiting_operation_once(tmp_path):
    """An acks=all produce and a follower's parked fetch each watch every partition of their
    request; a fetch that moves all their HWs used to re-try them once per partition
    (partitions x partitions)."""
    n = 50
    clock, rm = make_leader(tmp_path, partitions=n)
    try:
        acked: list = []
        rm.append(-1, 30000, [("t", p, batch(b"%d" % p)) for p in range(n)]
                  ).addCallback(acked.append)
        clock.advance(0)
        follower_fetch(rm, 2, dict.fromkeys(range(n), 1))  # parks: at the log end
        assert acked == []  # broker 3 has not fetched: no HW moved
        tries: dict[str, list] = {"produce": [], "fetch": []}
        for name in tries:
            purgatory = getattr(rm, f"{name}_purgatory")
            purgatory._safe_try = (lambda real, seen: lambda op: seen.append(op) or real(op))(
                purgatory._safe_try, tries[name])
        follower_fetch(rm, 3, dict.fromkeys(range(n), 1))
        assert [rm.get_partition("t", p).high_watermark for p in range(n)] == [1] * n
        assert len(tries["produce"]) == 1  # the produce, tried once and answered
        assert acked and sorted(acked[0]) == [("t", p) for p in range(n)]
        assert all(r.error is None for r in acked[0].values())
        # Broker 2's parked fetch (the first tried: broker 3's own is parked after the wake),
        # tried once, with nothing new for it.
        parked = tries["fetch"][0]
        assert sum(op is parked for op in tries["fetch"]) == 1 and not parked.completed
    finally:
        rm.produce_purgatory.shutdown()
        rm.fetch_purgatory.shutdown()
        rm.log_manager.shutdown()


def test_an_expired_produce_answers_each_partition_by_its_high_watermark(leader):
    """A try stops at the first partition still waiting; on expiry a partition whose HW
    passed behind it answers success and the waiting one REQUEST_TIMED_OUT."""
    clock, rm = leader
    answered: list = []
    rm.append(-1, 1000, [("t", 0, batch(b"a")), ("t", 1, batch(b"b"))]
              ).addCallback(answered.append)
    clock.advance(0)
    for replica in (2, 3):
        follower_fetch(rm, replica, {0: 0, 1: 1})  # partition 1 replicated, 0 not
    assert rm.get_partition("t", 1).high_watermark == 1 and answered == []
    clock.advance(2)
    assert answered[0] == {("t", 0): ProduceResult(error="REQUEST_TIMED_OUT"),
                           ("t", 1): ProduceResult(base_offset=0, log_start_offset=0)}


def test_with_an_isr_of_one_the_append_itself_completes_acks_all(tmp_path):
    clock, rm = make_leader(tmp_path, partitions=1)
    try:
        rm.apply_leader_and_isr(1, [("t", 0, LeaderAndIsrState(1, 1, (1,), REPLICAS, 1, 1))],
                                full=False)
        rm.min_insync_replicas = lambda topic: 1
        acked: list = []
        rm.append(-1, 30000, [("t", 0, batch(b"a"))]).addCallback(acked.append)
        assert acked and acked[0][("t", 0)].error is None
    finally:
        rm.produce_purgatory.shutdown()
        rm.fetch_purgatory.shutdown()
        rm.log_manager.shutdown()


def test_a_follower_fetch_answers_each_partition_as_a_read_would(leader):
    """The follower's walk decides the common case inline: a partition at our log end answers
    its HW and log start without records; a stale epoch or one we do not lead answers its
    error at once instead of parking the whole fetch."""
    clock, rm = leader
    rm.append(1, 30000, [("t", 0, batch(b"a"))])
    got: list = []
    rm.fetch([("t", 0, 1, 1 << 20, 1), ("t", 1, 0, 1 << 20, -1)], max_wait_ms=0, min_bytes=1,
             max_bytes=10 << 20, replica_id=2).addCallback(got.append)
    (_, _, p0), (_, _, p1) = got[0]
    assert (p0.error, p0.records, p0.log_start_offset) == (None, b"", 0)
    assert p0.high_watermark == rm.get_partition("t", 0).high_watermark
    assert (p1.error, p1.high_watermark, p1.records) == (None, 0, b"")
    fenced: list = []
    rm.fetch([("t", 0, 1, 1 << 20, 0)], max_wait_ms=500, min_bytes=1, max_bytes=10 << 20,
             replica_id=3).addCallback(fenced.append)
    assert fenced[0][0][2].error == "FENCED_LEADER_EPOCH"  # answered, not parked
    rm.apply_leader_and_isr(1, [("t", 1, LeaderAndIsrState(2, 2, REPLICAS, REPLICAS, 1, 1))],
                            full=False)
    moved: list = []
    rm.fetch([("t", 1, 0, 1 << 20, -1)], max_wait_ms=500, min_bytes=1, max_bytes=10 << 20,
             replica_id=3).addCallback(moved.append)
    assert moved[0][0][2].error == "NOT_LEADER_OR_FOLLOWER"


def test_a_batch_with_garbage_records_is_refused_naming_the_record_and_stores_nothing(leader):
    # The log validator on the leader's append path: a CRC-valid batch whose second record is
    # an 11-byte varint is refused with record_errors (ProduceResponse v8+); the other
    # partition of the same request is appended as usual.
    from tests.support import bad_batches as bb

    _, rm = leader
    garbage = bb.batch(bb.record(0) + b"\xff" * 11 + b"\x01", 2)
    got: list = []
    rm.append(1, 30000, [("t", 0, garbage), ("t", 1, batch(b"ok"))]).addCallback(got.append)
    bad, good = got[0][("t", 0)], got[0][("t", 1)]
    assert bad.error == "CORRUPT_MESSAGE"
    assert bad.record_errors == [(1, "record length varint is longer than 5 bytes")]
    assert bad.message.startswith("record 1 of the batch at position 0")
    assert (good.error, good.base_offset, good.record_errors) == (None, 0, [])
    assert rm.get_partition("t", 0).log.log_end_offset == 0
    assert rm.get_partition("t", 1).log.log_end_offset == 1


def test_a_corrupt_batch_in_the_leaders_log_answers_kafka_storage_error(tmp_path):
    """A batch failing its CRC on the leader's disk is never served: consumers and followers get
    KAFKA_STORAGE_ERROR for that partition (an OSError from the log), the other partition its
    data. Only that partition goes offline: its directory keeps serving the other one."""
    from broker_core.wire.records import iter_batches

    clock, rm = make_leader(tmp_path)
    for i in range(5):
        rm.append(1, 30000, [("t", 0, batch(b"v%d" % i)), ("t", 1, batch(b"w%d" % i))])
    log = rm.get_partition("t", 0).log
    path = log.active.log_path
    third = list(iter_batches(path.read_bytes()))[2]
    log._roll()  # a rolled segment: a clean open trusts it without reading its batches
    rm.append(1, 30000, [("t", 0, batch(b"v5"))])
    rm.log_manager.shutdown()  # a clean stop, then damage only a CRC can see
    with open(path, "r+b") as f:
        f.seek(third.position + third.size - 2)
        f.write(b"\xff\xfe")
    clock, rm = make_leader(tmp_path)
    told: list = []  # what the broker passes on to the controller (through its reporter)
    rm.on_log_dir_failure = lambda status, tps: told.append((status.state.name, tps))
    try:
        follower = follower_fetch(rm, 2, {0: 0, 1: 0})
        assert follower, "an error answers at once"
        by_partition = {p: res for _t, p, res in follower[0]}
        assert by_partition[0].error == "KAFKA_STORAGE_ERROR" and not by_partition[0].records
        assert by_partition[1].error is None and by_partition[1].records
        # The partition is offline here now: a consumer's fetch gets the same answer.
        got: list = []
        rm.fetch([("t", 0, 0, 1 << 20, -1)], max_wait_ms=0, min_bytes=1,
                 max_bytes=1 << 20).addCallback(got.append)
        assert got[0][0][2].error == "KAFKA_STORAGE_ERROR" and not got[0][0][2].records
        ok = rm.read("t", 0, 0, 1 << 20, consumer=False)
        assert ok.error == "KAFKA_STORAGE_ERROR"
        lm = rm.log_manager
        assert lm.offline_partitions == {("t", 0): tmp_path} and lm.dir_states.online()
        assert rm.read("t", 1, 0, 1 << 20, consumer=False).records  # still served
        assert told == [("ONLINE", [("t", 0)])]
    finally:
        rm.log_manager.shutdown()
