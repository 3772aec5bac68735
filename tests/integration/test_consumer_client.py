"""The thin consumer against real brokers and a test-driven coordinator
(tests/support/fake_coordinator.py): registration, Ping offsets, StopFetcher / StartFetcher,
auto.offset.reset, leader changes, silence, out-of-range resets, commit, shutdown, backpressure."""

from __future__ import annotations

import json

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task

from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.consumer import (
    CommitFailed,
    Consumer,
    ConsumerConfig,
    RegistrationRejected,
    State,
    StreamClosed,
)
from tests.support.cluster import (
    create_topic,
    eventually,
    leader_of,
    restart,
    running_brokers,
)
from tests.support.consumer_harness import fill, offsets_of, ready_topic, take
from tests.support.fake_coordinator import FakeCoordinator


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 2)


@pytest.fixture
def coordinator(brokers):
    live = list(brokers)
    fake = FakeCoordinator(lambda: live)
    fake.live = live  # tests that restart a broker put the new incarnation here
    pytest_twisted.blockon(defer.Deferred.fromCoroutine(fake.start()))
    yield fake
    pytest_twisted.blockon(defer.Deferred.fromCoroutine(fake.stop()))


def make_consumer(coordinator, consumer_id="c1", listener=None, clock=None, **overrides):
    values = {"bootstrap_servers": coordinator.address, "group_id": "g",
              "consumer_id": consumer_id, "topics": {"t": 1}, "session_timeout_ms": 6000,
              "fetch_max_wait_ms": 100, "auto_offset_reset": "smallest",
              "retry_backoff_ms": 50, "reconnect_backoff_max_ms": 200}
    values.update(overrides)
    c = Consumer(ConsumerConfig.create(**values), reactor=reactor, listener=listener,
                 clock=clock)
    c.start()
    return c










@pytest_twisted.ensureDeferred
async def test_register_start_consume_ping_stop(brokers, coordinator):
    await ready_topic(brokers)
    await fill(brokers, "t", 0, 30)
    await fill(brokers, "t", 1, 20)
    events = []

    class Listener:
        def assigned(self, parts):
            events.append(("assigned", parts))

        def revoked(self, parts):
            events.append(("revoked", parts))

    c = make_consumer(coordinator, listener=Listener())
    try:
        m = await coordinator.member("c1")
        reg = m.registration
        assert json.loads(reg.topic_count) == {"version": 1, "pattern": "static",
                                               "subscription": {"t": 1}}
        assert (reg.group_id, reg.auto_commit, reg.session_timeout_ms) == ("g", True, 6000)
        assert reg.auto_offset_reset == "smallest"
        await c.wait_for(State.WAITING)
        ping = await coordinator.ping("c1")
        assert ping.offsets == []
        # partition 0 from offset 5, partition 1 from "no committed offset" (smallest -> 0)
        await coordinator.start_fetcher("c1", 3, {"c1-0": [("t", 0, 5), ("t", 1, -1)]})
        assert c.state is State.FETCHING and c.member.generation == 3
        msgs = await take(c, 45)
        by_part = {p: [m.offset for m in msgs if m.partition == p] for p in (0, 1)}
        assert by_part[0] == list(range(5, 30))
        assert by_part[1] == list(range(20))
        assert msgs[0].value == b"t-0-5" or msgs[0].value == b"t-1-0"
        ping = await coordinator.ping("c1")
        assert offsets_of(ping) == {("t", 0): 30, ("t", 1): 20}
        # new data keeps flowing
        await fill(brokers, "t", 0, 5, start=30)
        more = await take(c, 5)
        assert [m.offset for m in more] == [30, 31, 32, 33, 34]
        stop = await coordinator.stop_fetcher("c1")
        assert offsets_of(stop) == {("t", 0): 35, ("t", 1): 20}
        assert c.state is State.STOPPED and c.member.assignment == {}
        assert events == [("assigned", [("t", 0), ("t", 1)]),
                          ("revoked", [("t", 0), ("t", 1)])]
        # stopped: nothing is fetched any more
        await fill(brokers, "t", 0, 5, start=35)
        await task.deferLater(reactor, 0.5, lambda: None)
        assert c.messages.poll_messages() == []
        # a new generation with only partition 1
        await coordinator.start_fetcher("c1", 4, {"c1-0": [("t", 1, 18)]})
        got = await take(c, 2)
        assert [(m.partition, m.offset) for m in got] == [(1, 18), (1, 19)]
        assert c.member.assignment == {("t", 1): 20}
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_largest_reset_starts_at_the_log_end(brokers, coordinator):
    await ready_topic(brokers, partitions=1)
    await fill(brokers, "t", 0, 10)
    c = make_consumer(coordinator, auto_offset_reset="largest")
    try:
        await coordinator.member("c1")
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, -1)]})
        await eventually(lambda: c.member.assignment.get(("t", 0)) == 10, what="reset to 10")
        await fill(brokers, "t", 0, 3, start=10)
        got = await take(c, 3)
        assert [m.offset for m in got] == [10, 11, 12]
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_no_auto_commit_answers_null_offsets_and_closes_at_once(brokers, coordinator):
    await ready_topic(brokers, partitions=1)
    c = make_consumer(coordinator, auto_commit_enable=False)
    m = await coordinator.member("c1")
    await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
    assert (await coordinator.ping("c1")).offsets is None
    assert (await coordinator.stop_fetcher("c1")).offsets is None
    assert m.registration.auto_commit is False
    await c.close()
    assert c.state is State.CLOSED
    await eventually(lambda: m.lost, what="channel closed")


@pytest_twisted.ensureDeferred
async def test_shutdown_waits_for_the_ping_after_the_final_offsets(brokers, coordinator):
    await ready_topic(brokers, partitions=1)
    await fill(brokers, "t", 0, 10)
    c = make_consumer(coordinator)
    m = await coordinator.member("c1")
    await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
    await take(c, 4)
    closed = c.close()
    await task.deferLater(reactor, 0.2, lambda: None)
    assert not closed.called and c.state is State.CLOSING
    final = await coordinator.ping("c1")
    assert offsets_of(final) == {("t", 0): 4}
    assert not closed.called and c.state is State.LEAVING
    await coordinator.ping("c1")
    await closed
    assert c.state is State.CLOSED
    await eventually(lambda: m.lost, what="channel closed")


@pytest_twisted.ensureDeferred
async def test_silent_coordinator_makes_the_consumer_register_again(brokers, coordinator):
    await ready_topic(brokers, partitions=1)
    await fill(brokers, "t", 0, 5)
    c = make_consumer(coordinator, session_timeout_ms=800)
    try:
        first = await coordinator.member("c1")
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
        await take(c, 5)
        # no request for a session timeout: stop fetching, close, register again
        await eventually(lambda: len(coordinator.registrations) == 2, what="re-registration")
        assert first.lost
        second = await coordinator.member("c1")
        assert second is not first
        assert c.member.assignment == {}
        await c.wait_for(State.WAITING)
        # and a coordinator that pings keeps it registered
        coordinator.start_pinging(0.2)
        await task.deferLater(reactor, 1.5, lambda: None)
        assert len(coordinator.registrations) == 2 and c.state is State.WAITING
    finally:
        coordinator.stop_pinging()
        await c.close()


@pytest_twisted.ensureDeferred
async def test_a_consumer_paused_past_its_session_hands_out_nothing_fetched_meanwhile(
        brokers, coordinator):
    """A pause (SIGSTOP, a stalled VM) is the consumer's clock jumping past the silence
    deadline with the timer not run yet: the reactor then reads the fetch answer that came in
    meanwhile before it runs overdue timers. The consumer's timers run on an injected clock
    that is moved without running them; the fetch answers come over real sockets."""
    await ready_topic(brokers, partitions=1)
    await fill(brokers, "t", 0, 5)
    clock = task.Clock()
    pump = task.LoopingCall(clock.advance, 0)  # run what is due, never move time
    pump.clock = reactor
    pump.start(0.01)
    c = make_consumer(coordinator, clock=clock)
    delivered: list[tuple[int, State]] = []
    c.consume(lambda m: delivered.append((m.offset, c.state)))
    try:
        await coordinator.member("c1")
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
        await eventually(lambda: len(delivered) == 5, what="the first 5 messages")
        pump.stop()
        clock.rightNow += 7.0  # the pause: past the 6 s session, no timer has run
        await fill(brokers, "t", 0, 3, start=5)  # answers the fetch that is waiting
        await eventually(lambda: len(delivered) > 5 or c.state is not State.FETCHING,
                         what="the fetch answer handled")
        assert [o for o, _ in delivered[5:]] == []
        assert c.state in (State.DISCOVERING, State.REGISTERING), c.state
        assert "no request from the coordinator" in c.last_error
    finally:
        if pump.running:
            pump.stop()
        clock.advance(0)
        d = c.close()
        pump.start(0.01)
        try:
            await d
        finally:
            pump.stop()


@pytest_twisted.ensureDeferred
async def test_lost_channel_and_refused_registration_are_retried(brokers, coordinator):
    await ready_topic(brokers, partitions=1)
    coordinator.register_errors = [ErrorCode.NOT_COORDINATOR,
                                   ErrorCode.COORDINATOR_NOT_AVAILABLE]
    c = make_consumer(coordinator)
    try:
        await coordinator.member("c1")
        assert len(coordinator.registrations) == 3
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
        coordinator.drop("c1")
        await eventually(lambda: len(coordinator.registrations) == 4, what="re-registration")
        await c.wait_for(State.WAITING)
        assert c.member.assignment == {}
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_rejected_registration_is_a_clear_error(brokers, coordinator):
    coordinator.register_errors = [ErrorCode.DUPLICATE_CONSUMER_ID]
    c = make_consumer(coordinator)
    with pytest.raises(RegistrationRejected, match="DUPLICATE_CONSUMER_ID"):
        await c.wait_for(State.WAITING)
    assert c.state is State.FAILED
    with pytest.raises(RegistrationRejected):
        await c.get()
    await c.close()
    assert c.state is State.CLOSED


@pytest_twisted.ensureDeferred
async def test_a_returning_member_retries_while_its_old_session_is_held(brokers, coordinator):
    # After a connection breaks without the coordinator noticing, it still holds the member's
    # old session until its pings fail: the id is "taken" by the consumer itself. Retried;
    # only a first registration treats DUPLICATE_CONSUMER_ID as fatal.
    c = make_consumer(coordinator)
    try:
        await coordinator.member("c1")
        coordinator.register_errors = [ErrorCode.DUPLICATE_CONSUMER_ID] * 2
        coordinator.drop("c1")
        await eventually(lambda: len(coordinator.registrations) == 4, what="registered again")
        await c.wait_for(State.WAITING)
        assert c.error is None
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_follows_a_leader_change(brokers, coordinator):
    await create_topic(brokers[0], "t", assignment={0: [1, 2]})
    await eventually(lambda: leader_of(brokers, "t", 0), what="leader")
    await fill(brokers, "t", 0, 10)
    c = make_consumer(coordinator)
    try:
        await coordinator.member("c1")
        coordinator.start_pinging(0.5)
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
        await take(c, 10)
        old = leader_of(brokers, "t", 0)
        await old.stopService()
        await eventually(lambda: leader_of(brokers, "t", 0), what="new leader")
        await fill(brokers, "t", 0, 10, start=10)
        got = await take(c, 10, timeout=30)
        assert [m.offset for m in got] == list(range(10, 20))
        assert c.fetchers.placed == {("t", 0): leader_of(brokers, "t", 0).config.broker_id}
        # the old leader comes back (new port); the consumer keeps going
        fresh = await restart(old)
        brokers[brokers.index(old)] = fresh
        coordinator.live[coordinator.live.index(old)] = fresh
        assert c.state is State.FETCHING
    finally:
        coordinator.stop_pinging()
        await c.close()


@pytest_twisted.ensureDeferred
async def test_out_of_range_resets_per_policy(brokers, coordinator):
    await ready_topic(brokers, partitions=1)
    await fill(brokers, "t", 0, 10)
    c = make_consumer(coordinator, auto_offset_reset="smallest")
    try:
        await coordinator.member("c1")
        # a committed offset past the log end (e.g. the topic was recreated)
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 500)]})
        got = await take(c, 10)
        assert [m.offset for m in got] == list(range(10))
        assert offsets_of(await coordinator.ping("c1")) == {("t", 0): 10}
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_unknown_topic_makes_the_consumer_reconnect_to_rebalance(brokers, coordinator):
    c = make_consumer(coordinator, fetch_max_partition_failures=3)
    try:
        await coordinator.member("c1")
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
        await eventually(lambda: len(coordinator.registrations) == 2, what="re-registration")
        assert "UNKNOWN_TOPIC" in (c.last_error or "") or c.state is State.WAITING
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_explicit_commit(brokers, coordinator):
    await ready_topic(brokers, partitions=2)
    await fill(brokers, "t", 0, 7)
    c = make_consumer(coordinator)
    try:
        await coordinator.member("c1")
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0), ("t", 1, 0)]})
        await take(c, 7)
        committed = await c.commit()
        assert committed == {("t", 0): 7, ("t", 1): 0}
        body = coordinator.commits[-1]
        assert (body.group_id, body.consumer_id) == ("g", "c1")
        assert {(o.topic, o.partition): o.offset for o in body.offsets} == committed
        coordinator.commit_error = ErrorCode.ILLEGAL_GENERATION
        with pytest.raises(CommitFailed) as e:
            await c.commit()
        assert e.value.errors == {("t", 0): "ILLEGAL_GENERATION", ("t", 1): "ILLEGAL_GENERATION"}
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_slow_callback_bounds_the_queue_and_counts_only_finished_messages(
        brokers, coordinator):
    await ready_topic(brokers, partitions=1)
    await fill(brokers, "t", 0, 200, batch=20)
    c = make_consumer(coordinator, max_partition_fetch_bytes=1024, fetch_max_bytes=1024,
                      queued_max_message_chunks=2)
    seen = []
    gate: list[defer.Deferred] = []

    def slow(msg):
        seen.append(msg.offset)
        d = defer.Deferred()
        gate.append(d)
        return d

    try:
        await coordinator.member("c1")
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("t", 0, 0)]})
        done = c.consume(slow)
        await eventually(lambda: gate, what="first message")
        await task.deferLater(reactor, 1.0, lambda: None)
        # the callback holds message 0: the stream is full, fetching stopped
        stream = c.stream("t")
        assert len(stream) <= 2
        requests = sum(f.requests for f in c.fetchers.fetchers.values())
        await task.deferLater(reactor, 0.5, lambda: None)
        assert sum(f.requests for f in c.fetchers.fetchers.values()) == requests
        assert offsets_of(await coordinator.ping("c1")) == {("t", 0): 0}
        for _ in range(30):
            await eventually(lambda: gate, what="next message")
            gate.pop(0).callback(None)
        await eventually(lambda: len(seen) >= 31, what="31 messages")
        assert offsets_of(await coordinator.ping("c1")) == {("t", 0): 30}
        assert seen == list(range(len(seen)))
    finally:
        closing = c.close()
        await coordinator.ping("c1")
        await coordinator.ping("c1")
        await closing
        while gate:
            gate.pop(0).callback(None)
        await done


@pytest_twisted.ensureDeferred
async def test_async_iteration_and_streams_per_topic(brokers, coordinator):
    await ready_topic(brokers, "a", partitions=2)
    await ready_topic(brokers, "b", partitions=1)
    await fill(brokers, "a", 0, 3)
    await fill(brokers, "a", 1, 3)
    await fill(brokers, "b", 0, 3)
    c = make_consumer(coordinator, topics={"a": 2, "b": 1})
    try:
        m = await coordinator.member("c1")
        assert json.loads(m.registration.topic_count)["subscription"] == {"a": 2, "b": 1}
        await coordinator.start_fetcher("c1", 1, {"c1-0": [("a", 0, 0), ("b", 0, 0)],
                                                  "c1-1": [("a", 1, 0)]})
        got = []
        async for msg in c.stream("a", 1):
            got.append((msg.topic, msg.partition, msg.offset))
            if len(got) == 3:
                break
        assert got == [("a", 1, 0), ("a", 1, 1), ("a", 1, 2)]
        b = await c.stream("b", 0).get_many()
        assert {(x.topic, x.partition) for x in b} == {("b", 0)}
        assert len(c.streams_of("a")) == 2
    finally:
        await c.close()
    with pytest.raises(StreamClosed):
        await c.get()


@pytest_twisted.ensureDeferred
async def test_commit_before_registration_fails_clearly(coordinator):
    coordinator.answer_cluster_metadata = False
    c = make_consumer(coordinator)
    try:
        await task.deferLater(reactor, 0.3, lambda: None)
        assert c.state is State.DISCOVERING
        assert "COORDINATOR_NOT_AVAILABLE" in c.last_error
        from consumer_client.consumer import NotRegistered
        with pytest.raises(NotRegistered):
            await c.commit()
    finally:
        await c.close()
    assert ApiKey.CLUSTER_METADATA


@pytest_twisted.ensureDeferred
async def test_a_broker_without_register_consumer_v1_gets_v0_and_the_close_is_the_slow_one(
        brokers, coordinator):
    """An older coordinator closes the connection on RegisterConsumer v1 (a version it does
    not serve): the consumer registers at v0 next, and without a session id it closes by
    handing its positions over on the Pings."""
    coordinator.max_register_version = 0
    c = make_consumer(coordinator)
    try:
        await coordinator.member("c1")
        await c.wait_for(State.WAITING)
        assert coordinator.register_versions[:2] == [1, 0]
        assert c._session_id == 0
    finally:
        closing = c.close()
        assert c.state is State.DEPARTING
        await eventually(lambda: c.state is State.CLOSING, what="the slow path")
        await coordinator.ping("c1")
        assert c.state is State.LEAVING
        await coordinator.ping("c1")
        await closing
