"""Group commit of offsets (coordinator.committer): commit requests that arrive while a write is
in flight go out together in the next fenced multi, answered only once it is durable.

The coordinator runs on task.Clock with the in-memory store; :class:`HeldStore` holds every multi
until the test completes (or fails) it by hand, so a test sees exactly which requests share a
write and when each is answered."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet import defer, task

from broker_core import metadata_paths as paths
from broker_core.metadata import Check, ConnectionLost, Create, SetData, TransactionFailed
from coordinator import rebalance
from coordinator.committer import MULTI_BATCH, MULTI_BYTES
from coordinator.service import CoordinatorConfig, CoordinatorService
from tests.support.memory_store import MemoryStore


class HeldStore:
    """The in-memory store, except that while :attr:`hold` is set each multi waits in
    :attr:`held` until :meth:`complete` applies it (or :meth:`fail` fails it)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.hold = False
        self.held: list[tuple[list[Any], defer.Deferred]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def multi(self, ops: Any) -> defer.Deferred:
        if not self.hold:
            return self.inner.multi(ops)
        d: defer.Deferred = defer.Deferred()
        self.held.append((list(ops), d))
        return d

    def complete(self) -> list[Any]:
        """Apply the oldest held multi; returns its operations."""
        ops, d = self.held.pop(0)
        self.inner.multi(ops).chainDeferred(d)
        return ops

    def fail(self, error: Exception) -> list[Any]:
        ops, d = self.held.pop(0)
        d.errback(error)
        return ops


def make() -> tuple[HeldStore, CoordinatorService]:
    store = HeldStore()
    store.ensure_path(paths.CONSUMERS)
    store.ensure_path(paths.TOPICS)
    svc = CoordinatorService(1, store, clock=task.Clock(), config=CoordinatorConfig(),
                             brokers=lambda: [])
    svc.start()  # elected at once: the store is synchronous
    assert svc.active
    store.hold = True
    return store, svc


def commit(svc: CoordinatorService, gid: str, offsets: dict[tuple[str, int], int],
           metadata: str = "") -> list[Any]:
    """A request's commit as OffsetCommit makes it: set the offsets, then wait for the write.
    Returns a one-element list that receives the answer (None: durable, else the error)."""
    g = svc.registries.group(gid)
    for tp, v in offsets.items():
        g.set_offset(tp, v, (-1, metadata))
    out: list[Any] = []
    d = svc.committer.commit_soon(g, offsets)
    d.addCallbacks(out.append, lambda f: out.append(f.value))
    return out


def stored(store: HeldStore, gid: str, tp: tuple[str, int]) -> int:
    return paths.CommittedOffset.from_bytes(store.inner.nodes[paths.consumer_offset(gid, *tp)][0]
                                            ).offset


def written(ops: list[Any]) -> list[str]:
    return [op.path for op in ops if not isinstance(op, Check)]


def test_commits_that_arrive_during_a_write_share_the_next_multi_and_wait_for_it():
    store, svc = make()
    first = commit(svc, "a", {("t", 0): 1})
    assert len(store.held) == 1  # the first goes at once, alone
    queued = [commit(svc, "a", {("t", 1): 2}), commit(svc, "b", {("t", 0): 3}),
              commit(svc, "c", {("t", 0): 4, ("t", 1): 5})]
    assert len(store.held) == 1 and not first and not any(queued)  # nothing durable yet
    store.complete()
    assert first == [None] and not any(queued)
    (ops, _), = store.held  # one multi for all three, behind the epoch check
    assert isinstance(ops[0], Check) and ops[0].path == paths.coordinator_shard_epoch(0)
    assert written(ops) == [paths.consumer_offset("a", "t", 1), paths.consumer_offset("b", "t", 0),
                            paths.consumer_offset("c", "t", 0), paths.consumer_offset("c", "t", 1)]
    assert not any(queued)
    store.complete()
    assert queued == [[None]] * 3 and not store.held
    assert [stored(store, g, tp) for g, tp in [("a", ("t", 1)), ("b", ("t", 0)),
                                               ("c", ("t", 1))]] == [2, 3, 5]
    assert not any(g.dirty for g in svc.registries.groups.values())


def test_the_last_commit_of_a_partition_wins_and_an_earlier_one_never_overwrites_it():
    store, svc = make()
    tp = ("t", 0)
    first = commit(svc, "a", {tp: 10})
    # While 10 is in flight: 20, then a seek back to 15 (a Kafka client may commit backwards).
    later = [commit(svc, "a", {tp: 20}), commit(svc, "a", {tp: 15})]
    store.complete()
    assert first == [None] and stored(store, "a", tp) == 10
    assert svc.registries.groups["a"].dirty == {tp}  # 10 was written, 15 is held
    ops = store.complete()
    assert len(written(ops)) == 1 and isinstance(ops[1], SetData)  # one value: the last
    assert later == [[None], [None]] and stored(store, "a", tp) == 15
    assert not svc.registries.groups["a"].dirty and not store.held


def test_a_commit_whose_value_an_earlier_write_made_durable_is_answered_after_that_write():
    store, svc = make()
    tp = ("t", 0)
    g = svc.registries.group("a")
    g.set_offset(tp, 7)
    periodic = defer.ensureDeferred(svc._commit([g]))  # the periodic round writes 7
    assert len(store.held) == 1
    again = commit(svc, "a", {tp: 7})  # the same value, while the round's write is in flight
    assert not again
    store.complete()
    assert periodic.called and again == [None] and not store.held  # nothing left to write


def test_a_seek_back_queued_behind_a_failed_write_is_written_not_undone_by_the_re_read():
    # The failed multi makes the committer re-read the partition (100 stored); the queued
    # seek back to 50 must still be written, and answered only then, not taken as done.
    store, svc = make()
    tp = ("t", 0)
    store.hold = False
    assert commit(svc, "a", {tp: 100}) == [None]
    store.hold = True
    first = commit(svc, "a", {tp: 120})
    back = commit(svc, "a", {tp: 50})
    store.fail(ConnectionLost("lost"))
    assert isinstance(first[0], ConnectionLost)
    assert not back and svc.registries.groups["a"].offsets[tp] == 50
    store.complete()
    assert back == [None] and stored(store, "a", tp) == 50
    assert not svc.registries.groups["a"].dirty


def test_batches_are_bounded_by_operations_and_by_bytes():
    store, svc = make()
    commit(svc, "first", {("t", 0): 1})
    many = [commit(svc, f"g{i}", {("t", p): p for p in range(100)}) for i in range(6)]
    store.complete()
    sizes = []
    while store.held:
        sizes.append(len(written(store.complete())))
    assert sizes == [500, 100] and all(m == [None] for m in many)
    assert MULTI_BATCH == 500

    # Bytes: offsets with 4 KiB of metadata each, far fewer than MULTI_BATCH per multi.
    commit(svc, "first", {("t", 0): 2})
    big = "m" * 4096
    heavy = [commit(svc, f"h{i}", {("t", p): p for p in range(50)}, metadata=big)
             for i in range(4)]
    store.complete()
    multis = []
    while store.held:
        ops = store.complete()
        multis.append(ops)
        assert sum(len(op.path) + len(op.value) for op in ops[1:]) <= MULTI_BYTES
    assert [len(written(ops)) for ops in multis] == [100, 100] and all(h == [None] for h in heavy)


def test_a_request_larger_than_one_multi_goes_alone_in_as_many_as_it_needs():
    store, svc = make()
    big = commit(svc, "big", {("t", p): p for p in range(1200)})
    small = commit(svc, "small", {("t", 0): 1})
    assert [len(written(store.complete())) for _ in range(2)] == [500, 500]
    assert not big and not small
    assert len(written(store.complete())) == 200
    assert big == [None] and not small  # the small one waited for the whole request
    store.complete()
    assert small == [None] and not store.held


def test_a_store_error_fails_exactly_the_requests_of_that_write():
    store, svc = make()
    first = commit(svc, "a", {("t", 0): 1})
    queued = [commit(svc, "b", {("t", 0): 2}), commit(svc, "c", {("t", 0): 3})]
    store.fail(ConnectionLost())
    assert isinstance(first[0], ConnectionLost) and not any(queued)
    assert svc.registries.groups["a"].dirty == {("t", 0)}  # still to write
    store.complete()
    assert queued == [[None], [None]]
    # The failed request's offset goes out with the next write (here the periodic round).
    defer.ensureDeferred(svc._commit(list(svc.registries.groups.values())))
    store.complete()
    assert stored(store, "a", ("t", 0)) == 1


def test_a_multi_that_fails_on_one_partition_fails_only_the_requests_naming_it():
    store, svc = make()
    commit(svc, "first", {("t", 0): 1})
    innocent = commit(svc, "a", {("t", 0): 5})
    guilty = commit(svc, "b", {("t", 0): 6})
    after = commit(svc, "c", {("t", 0): 7})
    # Another writer created b's znode: the coordinator's Create of it fails the multi.
    store.inner.ensure_path(paths.consumer_offsets_topic("b", "t"))
    store.inner.create(paths.consumer_offset("b", "t", 0), b"3")
    store.complete()
    ops = store.complete()  # a, b, c together; b's Create fails, all roll back
    assert written(ops) == [paths.consumer_offset(g, "t", 0) for g in "abc"]
    assert isinstance(guilty[0], TransactionFailed)
    assert not innocent and not after  # not failed: retried in the next multi
    ops = store.complete()
    assert written(ops) == [paths.consumer_offset(g, "t", 0) for g in "ac"]
    assert innocent == [None] and after == [None] and not store.held
    # b's registry learned the znode exists (a reload of the failed partition only): the
    # client's retry is a SetData and succeeds.
    assert svc.registries.groups["b"].committed == {("t", 0): 3}
    retry = commit(svc, "b", {("t", 0): 6})
    ops = store.complete()
    assert isinstance(ops[1], SetData) and retry == [None] and stored(store, "b", ("t", 0)) == 6


def test_losing_the_fence_fails_the_write_and_everything_queued_with_not_coordinator():
    store, svc = make()
    first = commit(svc, "a", {("t", 0): 1})
    queued = [commit(svc, "b", {("t", 0): 2}), commit(svc, "c", {("t", 0): 3})]
    # A newer coordinator bumped the epoch: this one's check fails.
    data, version = store.inner.nodes[paths.coordinator_shard_epoch(0)]
    store.inner.nodes[paths.coordinator_shard_epoch(0)] = (data, version + 1)
    store.complete()
    assert isinstance(first[0], rebalance.NotCoordinator)
    assert not svc.can_act()
    # The queued ones are refused without a write (fenced() refuses once it resigned).
    assert [type(q[0]) for q in queued] == [rebalance.NotCoordinator] * 2
    # What is held now is the next election (it stands again at once), no offsets.
    assert not any(written(ops) and "/offsets/" in written(ops)[0] for ops, _ in store.held)
    assert paths.consumer_offset("b", "t", 0) not in store.inner.nodes


def test_a_commit_offsets_request_is_answered_not_coordinator_when_its_write_is_fenced_off():
    store, svc = make()
    g = svc.registries.group("a")
    g.set_offset(("t", 0), 1)
    out: list[Any] = []
    defer.ensureDeferred(svc._commit_accepted(g, {("t", 0)})).addCallback(out.append)
    data, version = store.inner.nodes[paths.coordinator_shard_epoch(0)]
    store.inner.nodes[paths.coordinator_shard_epoch(0)] = (data, version + 1)
    ops = store.complete()
    assert isinstance(ops[1], Create)
    assert out[0]["error_code"] == 16  # NOT_COORDINATOR


def offset_commit_body(gid: str, offset: int) -> SimpleNamespace:
    return SimpleNamespace(
        group_id=gid, member_id="", generation_id_or_member_epoch=-1, group_instance_id=None,
        topics=[SimpleNamespace(name="t", partitions=[SimpleNamespace(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata=None)])])


def test_kafka_offset_commits_of_many_groups_share_a_multi_and_are_answered_after_it():
    store, svc = make()
    answers: list[Any] = []
    for i in range(4):
        d = defer.ensureDeferred(svc.kafka.offset_commit(
            8, offset_commit_body(f"k{i}", 10 + i), topic_allowed=lambda _: True,
            partition_exists=lambda *_: True))
        d.addCallback(answers.append)
    assert len(store.held) == 1 and not answers  # k0 in flight, k1..k3 queued
    store.complete()
    assert len(answers) == 1
    ops = store.complete()
    assert written(ops) == [paths.consumer_offset(f"k{i}", "t", 0) for i in (1, 2, 3)]
    assert len(answers) == 4 and not store.held
    assert {a["topics"][0]["partitions"][0]["error_code"] for a in answers} == {0}
    assert [stored(store, f"k{i}", ("t", 0)) for i in range(4)] == [10, 11, 12, 13]
