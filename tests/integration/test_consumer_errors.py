"""The consumer's first failures, as a new user meets them: no broker reachable (a real closed
port) and a subscribed topic that does not exist (real brokers with their real coordinator).
Both are warned once per reason, and reach the reader as an exception only after
``default.api.timeout.ms``."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor, task, threads
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from consumer_client.blocking_consumer import BlockingConsumer
from consumer_client.consumer import (
    Consumer,
    ConsumerConfig,
    ConsumerUnavailable,
    State,
    TopicNotFound,
)
from tests.support.cluster import eventually, free_port, known_coordinator, running_brokers
from tests.support.consumer_harness import fill, ready_topic, take


@pytest.fixture
def logged():
    """Every event the consumer logs during the test: (level, text)."""
    events: list[tuple[LogLevel, str]] = []

    def observe(event):
        if event.get("log_namespace", "").startswith("consumer_client.consumer"):
            events.append((event["log_level"], formatEvent(event)))

    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)


def warnings(events, text):
    return [t for level, t in events if level == LogLevel.warn and text in t]


@pytest_twisted.ensureDeferred
async def test_no_broker_reachable_fails_readers_after_the_bound_and_not_before(logged):
    port = free_port()  # bound and closed again: connections are refused
    clock = task.Clock()
    c = Consumer(ConsumerConfig.create(
        bootstrap_servers=f"127.0.0.1:{port}", group_id="g", consumer_id="c1",
        topics={"t": 1}, default_api_timeout_ms=1000, retry_backoff_ms=100,
        reconnect_backoff_max_ms=100), reactor=reactor, clock=clock)
    told = []
    c.on_problem(told.append)
    def attempts():
        return len([t for _, t in logged if "ClusterMetadata from" in t])

    c.start()
    pending = c.get()
    try:
        # Several real refusals, one per retry (the retries wait on the injected clock).
        clock.advance(0)
        for n in range(1, 5):
            await eventually(lambda n=n: attempts() >= n, what=f"refused attempt {n}")
            clock.advance(0.1)
        assert clock.seconds() < 1.0
        assert f"127.0.0.1:{port}" in c.last_error
        # Not before the bound: the reader still waits; health says why.
        assert not pending.called
        h = c.health
        assert not h.ok and h.error is None and f"127.0.0.1:{port}" in h.reason
        # One warning for the same reason, however many retries.
        assert len(warnings(logged, "cannot join group g")) == 1, logged
        assert len(told) == 1 and told[0].error is None

        clock.advance(1.0 - clock.seconds())
        assert pending.called
        with pytest.raises(ConsumerUnavailable) as e:
            await pending
        msg = str(e.value)
        assert f"127.0.0.1:{port}" in msg and "default.api.timeout.ms=1000" in msg, msg
        assert e.value.servers == [f"127.0.0.1:{port}"]
        assert isinstance(c.health.error, ConsumerUnavailable) and told[-1].error is not None
        # While it lasts, a read fails at once rather than hanging.
        with pytest.raises(ConsumerUnavailable):
            await c.get()
        assert c.state is State.DISCOVERING  # still retrying
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_blocking_poll_raises_consumer_unavailable_after_the_bound():
    port = free_port()

    def run():
        consumer = BlockingConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id="g",
                                    topics={"t": 1}, default_api_timeout_ms=1000,
                                    retry_backoff_ms=50)
        try:
            with pytest.raises(ConsumerUnavailable) as e:
                consumer.poll(timeout=60)
            assert f"127.0.0.1:{port}" in str(e.value)
            h = consumer.health
            assert not h.ok and isinstance(h.error, ConsumerUnavailable)
            with pytest.raises(ConsumerUnavailable):
                consumer.poll(timeout=0)
        finally:
            consumer.close()

    await threads.deferToThread(run)


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    yield from running_brokers(zk_hosts, tmp_path, 2, group_initial_rebalance_delay_ms="200",
                               rebalance_backoff_ms="200", offsets_commit_interval_ms="200")


@pytest_twisted.ensureDeferred
async def test_a_missing_topic_is_warned_raised_after_the_bound_and_consumed_once_created(
        brokers, logged):
    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    # The group's coordinator elected first: the only problem here is the missing topic.
    await eventually(lambda: all(known_coordinator(b, "g") >= 0 for b in brokers),
                     what="the coordinator of g's shard elected and known")
    c = Consumer(ConsumerConfig.create(
        bootstrap_servers=bootstrap, group_id="g", consumer_id="m1", topics={"t": 1},
        session_timeout_ms=6000, fetch_max_wait_ms=100, auto_offset_reset="smallest",
        retry_backoff_ms=50, default_api_timeout_ms=1000), reactor=reactor)
    told = []
    c.on_problem(told.append)
    c.start()
    try:
        await eventually(lambda: c.health.missing_topics == ("t",), timeout=30,
                         what="the consumer to find topic t missing")
        assert c.state is State.FETCHING and not c.member.assignment
        assert len(warnings(logged, "subscribed topic(s) t do not exist")) == 1, logged
        with pytest.raises(TopicNotFound) as e:
            await c.get()
        assert "'t'" in str(e.value) and "UNKNOWN_TOPIC_OR_PARTITION" in str(e.value)
        own = c.stream("t").get_chunk()  # the topic's own stream fails too
        assert own.called
        own.addErrback(lambda f: f.trap(TopicNotFound))
        # Created later: the coordinator rebalances, the problem clears, messages flow.
        await ready_topic(brokers, partitions=1)
        await fill(brokers, "t", 0, 5)
        await eventually(lambda: c.health.ok, timeout=30, what="the problem to clear")
        # told: the warning, the error, its end
        assert [(h.missing_topics, type(h.error).__name__) for h in told] == [
            (("t",), "NoneType"), (("t",), "TopicNotFound"), ((), "NoneType")], told
        assert told[-1].ok
        got = await take(c, 5, timeout=30)
        assert [m.offset for m in got] == list(range(5))
    finally:
        await c.close()
