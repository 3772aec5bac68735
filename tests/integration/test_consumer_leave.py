"""A consumer that leaves fast, against the real coordinator inside in-process brokers: close()
hands the final positions over with UnregisterConsumer and is done in one round trip, the group
is rebalanced at once, the coordinator counts a leave (not an expiration); a forged leave is
refused and changes nothing; Ctrl-C of a BlockingConsumer program and of ``sluice consume`` ends
with the member gone properly and no traceback.

The session timeout is 30 s, so the coordinator pings every 10 s: the old close (answer the next
Ping, then wait for the one after it) could not finish before the 5 s deadlines below, which are
races on the reactor (the close's Deferred against a ``callLater``), not wall-time assertions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, threads

from broker_core import metadata_paths as paths
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from consumer_client.blocking_consumer import BlockingConsumer
from consumer_client.consumer import Consumer, ConsumerConfig, State
from tests.support.cluster import (
    ROOT,
    call,
    coordinates,
    eventually,
    running_brokers,
    shard_service,
)
from tests.support.consumer_harness import fill, ready_topic, take

SESSION_MS = 30000
DEADLINE_S = 5.0


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    # A commit interval far beyond the test: committed offsets can only come from the leave.
    yield from running_brokers(zk_hosts, tmp_path, 2,
                               group_initial_rebalance_delay_ms="200",
                               rebalance_backoff_ms="200",
                               offsets_commit_interval_ms="600000")


def bootstrap(brokers):
    return ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)


def settings(brokers, cid, **overrides):
    values = {"bootstrap_servers": bootstrap(brokers), "group_id": "g", "consumer_id": cid,
              "topics": {"t": 1}, "session_timeout_ms": SESSION_MS, "fetch_max_wait_ms": 100,
              "auto_offset_reset": "smallest", "retry_backoff_ms": 50,
              "shutdown_timeout_ms": SESSION_MS}
    values.update(overrides)
    return values


def member(brokers, cid):
    c = Consumer(ConsumerConfig.create(**settings(brokers, cid)), reactor=reactor)
    c.start()
    return c


def coordinator_of(brokers):
    """The service coordinating group "g" (its shard's, on the broker elected for it)."""
    return next(shard_service(b) for b in brokers if coordinates(b))


def left(brokers):
    return sum(b.metrics.coordinator_left_members_total._value.get() for b in brokers)


def expired(brokers):
    return sum(b.metrics.coordinator_expired_members_total.labels(reason=r)._value.get()
               for b in brokers for r in ("ping", "disconnect"))


async def committed(brokers, partition):
    data, _ = await coordinator_of(brokers).store.get(paths.consumer_offset("g", "t", partition))
    return paths.parse_offset_value(data)


async def fired_before_deadline(d: defer.Deferred) -> str:
    """Which comes first on the reactor: ``d`` or a ``callLater(DEADLINE_S)``."""
    first: defer.Deferred = defer.Deferred()

    def settle(what):
        if not first.called:
            first.callback(what)

    d.addBoth(lambda r: (settle("closed"), r)[1])
    call_ = reactor.callLater(DEADLINE_S, settle, "deadline")
    outcome = await first
    if call_.active():
        call_.cancel()
    return outcome


def group_stable(brokers) -> bool:
    """The coordinator has finished its rebalance of "g" (members are told to fetch before the
    coordinator bumps the generation and writes the owners, so FETCHING alone is too early)."""
    service = next((shard_service(b) for b in brokers if coordinates(b)), None)
    g = service.registries.groups.get("g") if service is not None else None
    return g is not None and g.state == "stable"


async def split_between(brokers, a, b, partitions):
    await eventually(lambda: a.state is State.FETCHING and b.state is State.FETCHING
                     and len(a.member.assignment) + len(b.member.assignment) == partitions
                     and not set(a.member.assignment) & set(b.member.assignment)
                     and group_stable(brokers),
                     timeout=30, what="both members fetching a split of the topic, the group stable")


@pytest_twisted.ensureDeferred
async def test_a_closing_member_leaves_at_once_with_its_offsets_and_the_group_rebalances(brokers):
    await ready_topic(brokers, partitions=4)
    for p in range(4):
        await fill(brokers, "t", p, 10)
    a, b = member(brokers, "a"), member(brokers, "b")
    try:
        await split_between(brokers, a, b, 4)
        mine = sorted(a.member.assignment)
        got_a = await take(a, len(mine) * 10)
        expired_before = expired(brokers)
        assert await fired_before_deadline(a.close()) == "closed"
        assert a.closed and a.last_error is None
        # The coordinator saw a leave, not a failure, and wrote a's final positions.
        assert left(brokers) == 1 and expired(brokers) == expired_before
        for _, p in mine:
            assert await committed(brokers, p) == 10
        await eventually(lambda: len(b.member.assignment) == 4, timeout=DEADLINE_S,
                         what="b owns every partition")
        rest = await take(b, 40 - len(got_a), timeout=30)
        # b starts where a stopped: nothing twice, nothing lost
        seen = [(m.partition, m.offset) for m in got_a] + [(m.partition, m.offset) for m in rest]
        assert sorted(seen) == [(p, o) for p in range(4) for o in range(10)]
    finally:
        await b.close()
        if not a.closed:
            await a.close()


@pytest_twisted.ensureDeferred
async def test_a_blocking_consumer_closing_leaves_at_once_with_its_offsets(brokers):
    await ready_topic(brokers, partitions=2)
    for p in range(2):
        await fill(brokers, "t", p, 10)
    a = await threads.deferToThread(lambda: BlockingConsumer(**settings(brokers, "a")))
    b = member(brokers, "b")
    try:
        await split_between(brokers, a.consumer, b, 2)
        (tp,) = a.consumer.member.assignment

        def read_ten():
            return [a.poll(10.0) for _ in range(10)]

        got = await threads.deferToThread(read_ten)
        assert [m.offset for m in got] == list(range(10))
        assert await fired_before_deadline(threads.deferToThread(a.close)) == "closed"
        assert left(brokers) == 1
        assert await committed(brokers, tp[1]) == 10
        await eventually(lambda: len(b.member.assignment) == 2, timeout=DEADLINE_S,
                         what="b owns both partitions")
    finally:
        await b.close()
        await threads.deferToThread(a.close)


@pytest_twisted.ensureDeferred
async def test_a_forged_leave_is_refused_and_changes_nothing(brokers):
    await ready_topic(brokers, partitions=2)
    a, b = member(brokers, "a"), member(brokers, "b")
    try:
        await split_between(brokers, a, b, 2)
        coordinator = coordinator_of(brokers)
        broker = next(x for x in brokers if shard_service(x) is coordinator)
        g = coordinator.registries.groups["g"]
        generation = g.generation
        (tp_a,) = a.member.assignment
        # From another connection: a's id with b's session id, and a's id with a guess.
        for sid in (b._session_id, a._session_id ^ 1, 0):
            resp = await call(broker, ApiKey.UNREGISTER_CONSUMER, 0, {
                "group_id": "g", "consumer_id": "a", "session_id": sid,
                "offsets": [{"topic": "t", "partition": tp_a[1], "offset": 5}]})
            assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID, resp
            assert "leave itself" in resp.error_message
        assert sorted(g.members) == ["a", "b"] and g.generation == generation
        assert g.offsets.get(tp_a, -1) == -1 and left(brokers) == 0
        assert not await coordinator.store.exists(paths.consumer_offset("g", *tp_a))
        assert a.state is State.FETCHING and b.state is State.FETCHING
    finally:
        await a.close()
        await b.close()


BLOCKING_APP = textwrap.dedent("""
    import sys

    from consumer_client.blocking_consumer import BlockingConsumer

    with BlockingConsumer(bootstrap_servers=sys.argv[1], group_id="g", consumer_id="app",
                          topics={"t": 1}, session_timeout_ms=30000,
                          auto_offset_reset="smallest", fetch_max_wait_ms=100) as consumer:
        n = 0
        for message in consumer:
            n += 1
            if n == 20:
                print("ready", flush=True)
    print("interrupted" if consumer.interrupted else "ended", n, flush=True)
""")


async def interrupt(tmp_path, argv, ready):
    """Run ``argv``, wait until ``ready()``, send SIGINT; returns (exit code, stdout, stderr)."""
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(argv, stdout=o, stderr=e, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        await eventually(lambda: proc.poll() is not None or ready(out), timeout=60,
                         what="the program ready")
        assert proc.poll() is None, err.read_text()
        proc.send_signal(signal.SIGINT)
        await eventually(lambda: proc.poll() is not None, timeout=30, what="the program ended")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out.read_text(), err.read_text()


@pytest_twisted.ensureDeferred
async def test_ctrl_c_ends_a_blocking_consumer_program_cleanly(brokers, tmp_path):
    await ready_topic(brokers, partitions=2)
    for p in range(2):
        await fill(brokers, "t", p, 10)
    script = tmp_path / "app.py"
    script.write_text(BLOCKING_APP)
    code, out, err = await interrupt(tmp_path, [sys.executable, str(script), bootstrap(brokers)],
                                     lambda f: "ready" in f.read_text())
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert code == 0, err
    assert out.split() == ["ready", "interrupted", "20"]
    assert left(brokers) == 1
    for p in range(2):
        assert await committed(brokers, p) == 10


@pytest_twisted.ensureDeferred
async def test_ctrl_c_ends_sluice_consume_with_130_after_leaving(brokers, tmp_path):
    await ready_topic(brokers, partitions=2)
    for p in range(2):
        await fill(brokers, "t", p, 10)
    argv = [sys.executable, "-c", "import sys; from sluice_tools.cli import main; "
            "sys.exit(main())", "consume", "--bootstrap-server",
            bootstrap(brokers).split(",")[0], "--topic", "t", "--group", "g",
            "--from-beginning", "--session-timeout-ms", str(SESSION_MS)]
    code, out, err = await interrupt(tmp_path, argv,
                                     lambda f: len(f.read_text().splitlines()) >= 20)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert code == 130, err
    assert "consumed 20 messages" in err
    assert left(brokers) == 1 and expired(brokers) == 0
    for p in range(2):
        assert await committed(brokers, p) == 10
