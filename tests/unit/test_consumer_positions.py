"""Positions and streams (consumer_client/consumer_streams.py) and the fetchers
(consumer_client/consumer_fetcher.py) on task.Clock against a scripted cluster: delivered
offsets, bounded queues, dropping data of a revoked assignment, leader moves, resets."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet import defer, task

from broker_core.wire.errors import ErrorCode
from broker_core.wire.records import Record, build_batch
from consumer_client.consumer_config import ConsumerConfig
from consumer_client.consumer_fetcher import FetcherManager
from consumer_client.consumer_streams import (
    AllStreams,
    Chunk,
    MessageStream,
    PartitionState,
    StreamClosed,
    iter_chunk,
)


def chunk(ps: PartitionState, start: int, n: int) -> Chunk:
    data = build_batch([Record(None, b"%d" % (start + i), [], 0) for i in range(n)],
                       base_offset=start)
    return Chunk(ps, data, start, start + n)


def make_stream(max_chunks=2):
    woken = []
    return MessageStream(("t", "c-0"), max_chunks, lambda: woken.append(1)), woken


def test_positions_move_only_with_delivery():
    s, _ = make_stream()
    ps = PartitionState("t", 0, s, 10)
    s.put(chunk(ps, 10, 3))
    assert ps.consumed == 10 and ps.queued == 1
    assert [m.offset for m in s.poll_messages(2)] == [10, 11]
    assert ps.consumed == 12
    assert [m.offset for m in s.poll_messages()] == [12]
    assert ps.consumed == 13 and ps.queued == 0


def test_full_stream_signals_space_when_drained():
    s, woken = make_stream(max_chunks=2)
    ps = PartitionState("t", 0, s, 0)
    s.put(chunk(ps, 0, 1))
    assert not s.full
    s.put(chunk(ps, 1, 1))
    assert s.full
    s.poll_messages(1)
    assert woken == [1] and not s.full


def test_clear_and_release_drop_undelivered_data():
    s, _ = make_stream(max_chunks=5)
    ps = PartitionState("t", 0, s, 0)
    s.put(chunk(ps, 0, 3))
    s.put(chunk(ps, 3, 3))
    s.poll_messages(1)
    s.clear()
    assert len(s) == 0 and ps.queued == 0 and s.poll_messages() == []
    assert ps.consumed == 1
    # a chunk already handed to a (blocking) reader stops at the release
    c = chunk(ps, 1, 3)
    it = iter_chunk(c)
    assert next(it).offset == 1 and ps.consumed == 2
    ps.active = False
    assert list(it) == []
    assert ps.consumed == 2
    s.put(chunk(ps, 4, 1))  # data for a released partition is not queued
    assert len(s) == 0


@pytest.mark.parametrize("sync", [True, False])
def test_consume_counts_a_message_when_its_callback_is_done(sync):
    s, _ = make_stream()
    ps = PartitionState("t", 0, s, 0)
    pending: list[defer.Deferred] = []

    def cb(m):
        if sync:
            return None
        d = defer.Deferred()
        pending.append(d)
        return d

    done = defer.Deferred.fromCoroutine(s.consume(cb))
    s.put(chunk(ps, 0, 3))
    if sync:
        assert ps.consumed == 3
    else:
        assert ps.consumed == 0 and len(pending) == 1
        pending.pop().callback(None)
        assert ps.consumed == 1
        pending.pop().callback(None)
        pending.pop().callback(None)
        assert ps.consumed == 3
    s.close()
    assert done.called


def test_waiters_and_close():
    s, _ = make_stream()
    ps = PartitionState("t", 0, s, 0)
    d = defer.Deferred.fromCoroutine(s.get())
    assert not d.called
    s.put(chunk(ps, 0, 2))
    assert d.result.offset == 0
    got = defer.Deferred.fromCoroutine(s.get())
    assert got.result.offset == 1
    w = defer.Deferred.fromCoroutine(s.get())
    s.close()
    failures = []
    w.addErrback(failures.append)
    assert failures[0].check(StreamClosed)


def test_all_streams_round_robin():
    a, _ = make_stream(5)
    b = MessageStream(("u", "c-0"), 5, lambda: None)
    all_ = AllStreams([a, b])
    pa, pb = PartitionState("t", 0, a, 0), PartitionState("u", 0, b, 0)
    for i in range(2):
        a.put(chunk(pa, i, 1))
        b.put(chunk(pb, i, 1))
    assert [(m.topic, m.offset) for m in all_.poll_messages()] == [
        ("t", 0), ("u", 0), ("t", 1), ("u", 1)]
    waiting = defer.Deferred.fromCoroutine(all_.get())
    b.put(chunk(pb, 2, 1))
    assert waiting.result.topic == "u"


# -- fetchers on a scripted cluster ---------------------------------------------------------------

class ScriptedCluster:
    """Stands in for ClusterClient: leaders from a dict, each request answered by the test."""

    def __init__(self, leaders):
        self.leaders = leaders
        self.view = SimpleNamespace(topic_errors={})
        self.requests: list[tuple[int, int, object, defer.Deferred]] = []
        self.refreshes = 0

    async def refresh(self, topics=None):
        self.refreshes += 1

    def leader_for(self, topic, partition):
        return self.leaders.get((topic, partition), -1)

    def request(self, node, api, body, timeout_s=None):
        d = defer.Deferred()
        self.requests.append((node, api, body, d))
        return d

    def disconnect(self, node):
        pass


def fetch_response(parts):
    """parts: (topic, partition, error, records)."""
    topics = {}
    for t, p, err, rec in parts:
        topics.setdefault(t, []).append(SimpleNamespace(
            partition_index=p, error_code=int(err), high_watermark=0, records=rec))
    return SimpleNamespace(responses=[SimpleNamespace(topic=t, partitions=ps)
                                      for t, ps in topics.items()])


def setup(leaders, **cfg):
    clock = task.Clock()
    config = ConsumerConfig.create(bootstrap_servers="h:1", group_id="g", topics={"t": 1},
                                   consumer_id="c", **cfg)
    cluster = ScriptedCluster(leaders)
    failed = []
    mgr = FetcherManager(cluster, config, clock, lambda ps, why: failed.append(why))
    return clock, cluster, mgr, failed


def test_one_request_per_leader_and_backpressure():
    clock, cluster, mgr, _ = setup({("t", 0): 1, ("t", 1): 1, ("t", 2): 2},
                                   queued_max_message_chunks=1)
    s = MessageStream(("t", "c-0"), 1, mgr.wake)
    parts = [PartitionState("t", p, s, 0) for p in range(3)]
    mgr.start(parts)
    clock.advance(0)
    assert sorted((n, len(b["topics"][0]["partitions"])) for n, _, b, _ in cluster.requests) \
        == [(1, 2), (2, 1)]
    node, _, body, d = cluster.requests.pop(0)
    d.callback(fetch_response([("t", 0, 0, build_batch([Record(None, b"x", [], 0)])),
                               ("t", 1, 0, None)]))
    assert parts[0].fetch_offset == 1 and len(s) == 1 and s.full
    # the stream is full: the next request from this leader waits for room
    assert [n for n, *_ in cluster.requests] == [2]
    s.poll_messages()
    assert [n for n, *_ in cluster.requests] == [2, 1]


def test_not_leader_moves_the_partition_after_a_refresh():
    clock, cluster, mgr, _ = setup({("t", 0): 1})
    s = MessageStream(("t", "c-0"), 4, mgr.wake)
    ps = PartitionState("t", 0, s, 5)
    mgr.start([ps])
    clock.advance(0)
    _, _, _, d = cluster.requests.pop()
    cluster.leaders[("t", 0)] = 2
    d.callback(fetch_response([("t", 0, ErrorCode.NOT_LEADER_OR_FOLLOWER, None)]))
    clock.advance(0)
    assert cluster.refreshes == 1  # the view knew the first leader: only the move refreshes
    node, _, body, _ = cluster.requests.pop()
    assert node == 2 and body["topics"][0]["partitions"][0]["fetch_offset"] == 5
    assert mgr.placed == {("t", 0): 2}


def test_a_new_assignment_is_placed_from_the_view_when_it_knows_every_leader():
    # A rebalance of a running group: the shared view already names the leaders, so the
    # 1,000 members of a group do not each ask for the metadata of the whole topic.
    clock, cluster, mgr, _ = setup({("t", 0): 1, ("t", 1): 2})
    s = MessageStream(("t", "c-0"), 4, mgr.wake)
    mgr.start([PartitionState("t", 0, s, 0)])
    clock.advance(0)
    assert cluster.refreshes == 0 and [n for n, *_ in cluster.requests] == [1]
    mgr.stop()
    mgr.start([PartitionState("t", 0, s, 0), PartitionState("t", 1, s, 0)])
    clock.advance(0)
    assert cluster.refreshes == 0 and mgr.placed == {("t", 0): 1, ("t", 1): 2}


def test_a_partition_the_view_has_no_leader_for_refreshes_first():
    clock, cluster, mgr, _ = setup({("t", 0): 1})
    s = MessageStream(("t", "c-0"), 4, mgr.wake)
    ps = [PartitionState("t", 0, s, 0), PartitionState("t", 1, s, 0)]  # t-1: added since

    async def refresh(topics=None):
        cluster.refreshes += 1
        cluster.leaders[("t", 1)] = 3

    cluster.refresh = refresh
    mgr.start(ps)
    clock.advance(0)
    assert cluster.refreshes == 1 and mgr.placed == {("t", 0): 1, ("t", 1): 3}


def test_after_a_failure_the_next_placement_refreshes_even_if_the_view_names_a_leader():
    # A ListOffsets refused by a stale leader: placing again from the same view would ask the
    # same broker until the partition gives up; the failure puts the view in doubt.
    clock, cluster, mgr, failed = setup({("t", 0): 1}, retry_backoff_ms=100)

    async def refresh(topics=None):  # the leader moved to broker 2
        cluster.refreshes += 1
        cluster.leaders[("t", 0)] = 2

    cluster.refresh = refresh
    s = MessageStream(("t", "c-0"), 4, mgr.wake)
    mgr.start([PartitionState("t", 0, s, -1)])
    clock.advance(0)
    assert cluster.refreshes == 0
    node, api, _, d = cluster.requests.pop()
    assert (node, api) == (1, 2)
    d.callback(SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[
        SimpleNamespace(partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        offset=-1)])]))
    clock.advance(0.1)
    assert cluster.refreshes == 1
    node, api, _, d = cluster.requests.pop()
    assert (node, api) == (2, 2) and not failed


def test_out_of_range_resets_with_list_offsets():
    clock, cluster, mgr, _ = setup({("t", 0): 1}, auto_offset_reset="earliest")
    s = MessageStream(("t", "c-0"), 4, mgr.wake)
    ps = PartitionState("t", 0, s, 500)
    mgr.start([ps])
    clock.advance(0)
    _, _, _, d = cluster.requests.pop()
    d.callback(fetch_response([("t", 0, ErrorCode.OFFSET_OUT_OF_RANGE, None)]))
    clock.advance(0)
    node, api, body, d = cluster.requests.pop()
    assert api == 2 and body["topics"][0]["partitions"][0]["timestamp"] == -2
    d.callback(SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=[
        SimpleNamespace(partition_index=0, error_code=0, offset=42)])]))
    assert ps.fetch_offset == 42 and ps.consumed == 42
    assert cluster.requests[-1][2]["topics"][0]["partitions"][0]["fetch_offset"] == 42


def test_a_partition_that_keeps_failing_is_reported():
    clock, cluster, mgr, failed = setup({}, fetch_max_partition_failures=3,
                                        retry_backoff_ms=100)
    s = MessageStream(("t", "c-0"), 4, mgr.wake)
    mgr.start([PartitionState("t", 0, s, 0)])
    clock.pump([0, 0.1, 0.2, 0.4, 0.8])
    assert failed and "no leader" in failed[0]


def test_responses_after_stop_are_dropped():
    clock, cluster, mgr, _ = setup({("t", 0): 1})
    s = MessageStream(("t", "c-0"), 4, mgr.wake)
    ps = PartitionState("t", 0, s, 0)
    mgr.start([ps])
    clock.advance(0)
    _, _, _, d = cluster.requests.pop()
    mgr.stop()
    ps.active = False
    d.callback(fetch_response([("t", 0, 0, build_batch([Record(None, b"x", [], 0)]))]))
    assert len(s) == 0 and ps.fetch_offset == 0 and not cluster.requests
