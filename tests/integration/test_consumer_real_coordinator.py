"""The consumer against the real coordinator inside the brokers (coordinator/): two members of
one group split a topic, a member that leaves hands its partitions (and positions) over."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from consumer_client.consumer import Consumer, ConsumerConfig, State
from tests.support.cluster import eventually, running_brokers
from tests.support.consumer_harness import fill, ready_topic, take


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 2,
                               group_initial_rebalance_delay_ms="200",
                               rebalance_backoff_ms="200",
                               offsets_commit_interval_ms="200")


def member(brokers, cid):
    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    c = Consumer(ConsumerConfig.create(
        bootstrap_servers=bootstrap, group_id="g", consumer_id=cid, topics={"t": 1},
        session_timeout_ms=6000, fetch_max_wait_ms=100, auto_offset_reset="smallest",
        retry_backoff_ms=50, shutdown_timeout_ms=8000), reactor=reactor)
    c.start()
    return c


@pytest_twisted.ensureDeferred
async def test_two_members_split_the_topic_and_hand_over_on_leave(brokers):
    await ready_topic(brokers, partitions=4)
    for p in range(4):
        await fill(brokers, "t", p, 10)
    a = member(brokers, "a")
    b = member(brokers, "b")
    try:
        await eventually(lambda: a.state is State.FETCHING and b.state is State.FETCHING
                         and len(a.member.assignment) + len(b.member.assignment) == 4
                         and not set(a.member.assignment) & set(b.member.assignment),
                         timeout=30, what="both members fetching a split of the topic")
        n_a = len(a.member.assignment) * 10
        got_a = await take(a, n_a)
        assert len(got_a) == n_a
        # a leaves: its positions are handed over, b gets everything and resumes after them
        await a.close()
        await eventually(lambda: len(b.member.assignment) == 4, timeout=30,
                         what="b owns all partitions")
        rest = await take(b, 40 - n_a, timeout=30)
        assert {(m.partition, m.offset) for m in got_a} | {(m.partition, m.offset)
                                                            for m in rest} == {
            (p, o) for p in range(4) for o in range(10)}
    finally:
        await b.close()
        if not a.closed:
            await a.close()
