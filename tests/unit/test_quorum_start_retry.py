"""A broker's start-up steps through the metadata quorum's leader changes
(``broker_core/raft/start_retry.py``, the broker's ``try_register``), on real in-process Raft
voters (``tests/support/local_quorum.py``) and a ``task.Clock``: the registration and the
session's opening ride out the loss of the quorum leader, a write whose answer was lost is
retried without a second create, the backoffs are the project's, an error a retry cannot help
ends the start at once, and a stop ends the retrying at once."""

from __future__ import annotations

import pytest
from twisted.internet import defer, task

from broker_core.broker import StartupError, try_register
from broker_core.metadata import ConnectionLost, NotAuthorized, SessionExpired, StoreStopping
from broker_core.raft.admin import retry_backoff
from broker_core.raft.metadata_commands import MalformedCommand
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.raft.quorum_client import NetworkQuorumClient
from broker_core.raft.start_retry import QuorumStartRetries, StartAbandoned
from tests.support.local_quorum import LocalQuorumCluster, run

PATH = "/brokers/ids/2"


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def cluster(clock):
    c = LocalQuorumCluster(clock, size=3)
    yield c
    c.stop()


def _settled_leader(clock, cluster):
    run(clock, _until(clock, lambda: cluster.leader() is not None))
    return cluster.leader()


async def _until(clock, condition) -> None:
    while not condition():
        await task.deferLater(clock, 0.01, lambda: None)


def _follower_store(clock, cluster) -> tuple[QuorumMetadataStore, int]:
    leader = _settled_leader(clock, cluster)
    member = next(m for m in cluster.members if m is not leader)
    store = QuorumMetadataStore(member, reactor=clock, session_timeout=3.0)
    run(clock, store.start())
    return store, member.node.node_id


def test_a_registration_rides_out_the_loss_of_the_quorum_leader(clock, cluster):
    store, _ = _follower_store(clock, cluster)
    old = cluster.leader()
    old_epoch = old.node.epoch
    cluster.isolate(old.node.node_id)  # the leader is gone for the follower and the third voter
    retries = QuorumStartRetries(clock, "broker 2")
    assert run(clock, retries.run(f"registering {PATH}",
                                  lambda: try_register(store, PATH, b"me"))) is True
    assert retries.retries >= 1  # the first attempt found no leader
    new = cluster.leader()
    assert new is not None and new is not old and new.node.epoch > old_epoch
    data, stat = store.client.tree.get(PATH)
    assert data == b"me" and stat.ephemeral_owner == store.session_id
    cluster.heal()
    run(clock, store.stop())


def test_a_registration_whose_answer_was_lost_is_not_created_twice(clock, cluster):
    """The create applied and its answer was lost (ConnectionLost after the fact): the retry
    finds the node, sees it is its own session's, and counts it as registered."""
    store, _ = _follower_store(clock, cluster)
    creates: list[str] = []
    real_create = store.create

    def create(path, value=b"", **kw):
        creates.append(path)
        d = real_create(path, value, **kw)
        if len(creates) == 1:
            def lose_answer(_):
                raise ConnectionLost("no answer from quorum leader (applied meanwhile)")
            d.addCallback(lose_answer)
        return d

    store.create = create
    retries = QuorumStartRetries(clock, "broker 2")
    assert run(clock, retries.run("registering", lambda: try_register(store, PATH, b"me")))
    assert retries.retries == 1 and creates == [PATH, PATH]  # the second met NodeExists
    assert store.client.tree.get(PATH)[1].ephemeral_owner == store.session_id
    run(clock, store.stop())


def test_a_registration_held_by_another_session_is_not_taken(clock, cluster):
    store, _ = _follower_store(clock, cluster)
    other = QuorumMetadataStore(cluster.members[0], reactor=clock, session_timeout=3.0)
    run(clock, other.start())
    run(clock, other.create(PATH, b"old", ephemeral=True, makepath=True))
    assert run(clock, try_register(store, PATH, b"me")) is False
    assert store.client.tree.get(PATH)[0] == b"old"
    run(clock, other.stop())
    run(clock, store.stop())


def test_opening_the_session_rides_out_a_quorum_without_a_leader(clock, cluster):
    """Cut off from every voter, the store's own start gives up (its connect timeout); the
    retry opens the session once the node can reach a leader again."""
    leader = _settled_leader(clock, cluster)
    member = next(m for m in cluster.members if m is not leader)
    for m in cluster.members:
        cluster.isolate(m.node.node_id)
    store = QuorumMetadataStore(member, reactor=clock, session_timeout=3.0, connect_timeout=0.5)
    retries = QuorumStartRetries(clock, "broker 2")
    clock.callLater(2.0, cluster.heal)
    run(clock, retries.run("opening the metadata session", store.start))
    assert retries.retries >= 2 and clock.seconds() >= 2.0
    assert store.session_id in member.tree.sessions
    run(clock, store.stop())


def test_retries_back_off_as_the_project_does(clock):
    attempts: list[float] = []

    async def step() -> str:
        attempts.append(clock.seconds())
        if len(attempts) < 7:
            raise ConnectionLost("no leader") if len(attempts) % 2 else SessionExpired("gone")
        return "done"

    assert run(clock, QuorumStartRetries(clock, "broker 1").run("a step", step),
               step=0.001) == "done"
    waits = [b - a for a, b in zip(attempts, attempts[1:], strict=False)]
    assert waits == pytest.approx([retry_backoff(n) / 1000 for n in range(1, 7)], abs=0.002)
    assert max(waits) == pytest.approx(1.0, abs=0.002)  # 100 ms doubling to 1 s


@pytest.mark.parametrize("fatal", [
    StartupError("broker id 2 is registered by another live broker"),
    NotAuthorized("no"),
    MalformedCommand("refused by the leader"),
    # A lost connection, but the store's owner is stopping: no later attempt gets through.
    StoreStopping("the broker is stopping"),
])
def test_an_error_a_retry_cannot_help_ends_the_start_at_once(clock, fatal):
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)
        raise fatal

    retries = QuorumStartRetries(clock, "broker 2")
    with pytest.raises(type(fatal), match=str(fatal)):
        run(clock, retries.run("a step", step))
    assert calls == [1] and retries.retries == 0 and not clock.getDelayedCalls()


def test_a_stop_ends_a_waiting_retry_at_once(clock):
    async def step() -> None:
        raise ConnectionLost("no leader")

    retries = QuorumStartRetries(clock, "broker 2")
    out: list = []
    d = defer.Deferred.fromCoroutine(retries.run("registering /brokers/ids/2", step))
    d.addBoth(out.append)
    clock.advance(0.1)
    clock.advance(0.2)  # three attempts failed, waiting 0.4 s for the fourth
    assert not out and retries.retries == 3
    retries.stop()  # no clock advance: the wait ends now
    assert out and out[0].check(StartAbandoned)
    assert "registering /brokers/ids/2 abandoned" in out[0].getErrorMessage()
    assert not clock.getDelayedCalls()
    with pytest.raises(StartAbandoned):  # and nothing starts again
        run(clock, retries.run("another step", step))
    with pytest.raises(StartAbandoned):
        run(clock, retries.sleep(1.0, "waiting"))


def test_a_stop_during_an_attempt_ends_the_start_when_it_fails(clock):
    pending: defer.Deferred = defer.Deferred()
    retries = QuorumStartRetries(clock, "broker 2")
    out: list = []
    d = defer.Deferred.fromCoroutine(retries.run("a step", lambda: pending))
    d.addBoth(out.append)
    retries.stop()
    pending.errback(ConnectionLost("the node is stopping"))
    assert out and out[0].check(StartAbandoned) and retries.retries == 0


def test_a_quorum_never_reached_ends_the_start_with_the_steps_own_error(clock):
    """Without a leader ever known (wrong voters or cluster secret, no majority running) the
    error is a configuration's, not a leader change's: no retry."""
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)
        raise ConnectionLost("could not reach the metadata quorum (voters 1@h:1) within 3s")

    retries = QuorumStartRetries(clock, "broker 4")
    with pytest.raises(ConnectionLost, match="could not reach the metadata quorum"):
        run(clock, retries.run("opening the metadata session", step, retry_if=lambda: False))
    assert calls == [1] and retries.retries == 0


def test_a_quorum_client_whose_node_is_not_running_is_not_worth_retrying_through(clock):
    """The broker retries a start step only while its quorum client runs: a client without a
    running driver (not started, or stopped on a disk error) or stopped fails every write the
    same way, so the start ends instead of retrying forever."""
    client = NetworkQuorumClient(1, {}, clock)
    assert not client.running  # no driver
    client.driver = type("Driver", (), {"running": True})()
    assert client.running
    client.driver.running = False  # the driver stopped (e.g. its log's disk failed)
    assert not client.running
    client.driver.running = True
    client.stop()
    assert not client.running
