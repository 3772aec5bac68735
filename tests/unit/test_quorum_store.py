"""``QuorumMetadataStore`` on a real one-voter quorum (``tests/support/local_quorum.py``), on a
``task.Clock``: start and its timeout, the session states (SUSPENDED while no leader, LOST on
expiry and a new session after it), ephemerals going with the session, and the watch details
the contract tests leave out (first call on the next turn, no coalescing, writes from a
callback)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from twisted.internet import defer, task
from zope.interface.verify import verifyObject

from broker_core.interfaces import IMetadataStore
from broker_core.metadata import (
    ConnectionLost,
    Create,
    NoNode,
    SessionExpired,
    SessionState,
    SetData,
    TransactionFailed,
)
from broker_core.raft.metadata_store import MAX_MULTI_OPS, IQuorumClient, QuorumMetadataStore
from tests.support.local_quorum import FAST, LocalQuorum, run


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def quorum(clock):
    q = LocalQuorum(clock)
    yield q
    q.stop()


def started(clock, quorum, **kw) -> QuorumMetadataStore:
    store = QuorumMetadataStore(quorum, reactor=clock, session_timeout=kw.pop("timeout", 3.0),
                                **kw)
    run(clock, store.start())
    return store


def test_the_store_and_the_quorum_provide_their_interfaces(clock, quorum):
    store = QuorumMetadataStore(quorum, reactor=clock)
    assert verifyObject(IMetadataStore, store)
    assert verifyObject(IQuorumClient, quorum)


def test_start_waits_for_the_first_election_and_opens_a_session(clock, quorum):
    assert not quorum.leading  # the node has not stood yet
    store = started(clock, quorum)
    assert store.state is SessionState.CONNECTED
    assert store.session_id in quorum.tree.sessions
    assert quorum.tree.sessions[store.session_id] == 3000


def test_an_unreachable_quorum_fails_start_naming_the_voters(clock):
    quorum = LocalQuorum(clock)
    quorum.stop()  # its node never runs: no leader will ever take the session
    store = QuorumMetadataStore(quorum, reactor=clock, connect_timeout=2.0)
    with pytest.raises(ConnectionLost, match=r"voters 1 \(in-process\)\) within 2s"):
        run(clock, store.start())
    assert clock.seconds() == pytest.approx(2.0, abs=0.1)
    assert not quorum._listeners and not clock.getDelayedCalls()  # nothing left running


def test_no_leader_suspends_the_session_and_a_new_leader_reconnects_it(clock):
    quorum = LocalQuorum(clock, config=replace(FAST, election_timeout_ms=1500))
    store = started(clock, quorum, timeout=6.0)
    states: list[SessionState] = []
    store.add_state_listener(states.append)
    run(clock, store.create("/mine", b"", ephemeral=True))
    sid = store.session_id
    quorum.resign()  # no leader until the node wins the next election, 1.5 to 3 s later
    with pytest.raises(ConnectionLost, match="no leader"):
        run(clock, store.set("/mine", b"x"))
    while SessionState.SUSPENDED not in states:
        clock.advance(0.1)
    assert not quorum.leading
    while not quorum.leading:
        clock.advance(0.01)
    # The store heartbeated the new leader as soon as it was known, not at its next heartbeat
    # (up to 2 s later, while its controller and coordinators stayed paused).
    assert states == [SessionState.SUSPENDED, SessionState.CONNECTED]
    assert store.session_id == sid and quorum.tree.exists("/mine").ephemeral_owner == sid
    run(clock, store.set("/mine", b"x"))  # writable again


def test_an_expired_session_is_lost_then_replaced_and_its_ephemerals_are_gone(clock, quorum):
    observer = started(clock, quorum)
    hung_clock = task.Clock()  # the other store's reactor stops, as a paused process's would
    hung_clock.advance(clock.seconds())
    hung = QuorumMetadataStore(quorum, reactor=hung_clock, session_timeout=3.0)
    d = defer.Deferred.fromCoroutine(hung.start())
    assert d.called  # the quorum leads already: the session opened at once
    states: list[SessionState] = []
    hung.add_state_listener(states.append)
    run(clock, hung.create("/brokers/ids/2", b"", ephemeral=True, makepath=True))
    old_sid = hung.session_id
    old_czxid = quorum.tree.exists("/brokers/ids/2").czxid

    seen: list = []
    observer.watch_children("/brokers/ids", seen.append)
    for _ in range(40):  # 4 s of the quorum's time, none of the hung store's
        clock.advance(0.1)
    assert seen[-1] == []  # the leader expired the session: its ephemeral went
    # The store learnt of the expiry from the applied log, then opened a new session.
    assert states == [SessionState.LOST, SessionState.CONNECTED]
    assert hung.session_id not in (None, old_sid) and old_sid not in quorum.tree.sessions
    run(clock, hung.create("/brokers/ids/2", b"", ephemeral=True))
    assert quorum.tree.exists("/brokers/ids/2").czxid > old_czxid  # a new broker epoch
    hung_clock.advance(1.0)  # its heartbeats resume, on the new session
    assert hung.state is SessionState.CONNECTED


def test_heartbeats_keep_a_session_alive(clock, quorum):
    store = started(clock, quorum, timeout=1.0)
    run(clock, store.create("/e", b"", ephemeral=True))
    for _ in range(100):
        clock.advance(0.1)
    assert quorum.tree.exists("/e") is not None and store.state is SessionState.CONNECTED


def test_stop_closes_the_session_and_its_ephemerals_go(clock, quorum):
    other = started(clock, quorum)
    store = started(clock, quorum)
    run(clock, store.create("/e", b"", ephemeral=True))
    seen: list = []
    store.watch_data("/e", lambda data, stat: seen.append(data))
    clock.advance(0)
    run(clock, store.stop())
    assert run(clock, other.exists("/e")) is None
    assert store.session_id is None and len(quorum.tree.sessions) == 1
    assert seen == [b""]  # cancelled: the deletion was not reported to it
    assert all(getattr(c.func, "__self__", None) is not store for c in clock.getDelayedCalls())


def test_watch_calls_come_on_the_next_turn_and_every_change_is_reported(clock, quorum):
    store = started(clock, quorum)
    seen: list = []
    watch = store.watch_data("/n", lambda data, stat: seen.append(
        (data, stat.version if stat else None)))
    assert seen == []  # not from inside watch_data
    clock.advance(0)
    assert seen == [(None, None)]
    run(clock, store.create("/n", b"0"))
    run(clock, store.set("/n", b"1"))
    run(clock, store.set("/n", b"2"))
    assert seen == [(None, None), (b"0", 0), (b"1", 1), (b"2", 2)]
    run(clock, store.multi([SetData("/n", b"3"), SetData("/n", b"4")]))  # one entry: one call
    assert seen[-1] == (b"4", 4) and len(seen) == 5
    watch.cancel()


def test_a_watch_callback_may_write(clock, quorum):
    store = started(clock, quorum)
    done: list = []

    def copy(data, stat):
        if data is not None:
            store.create("/copy", data).addBoth(done.append)

    store.watch_data("/src", copy)
    clock.advance(0)
    run(clock, store.create("/src", b"v"))
    assert done == ["/copy"] and run(clock, store.get("/copy"))[0] == b"v"


def test_reads_see_a_write_as_soon_as_it_returns(clock, quorum):
    store = started(clock, quorum)
    run(clock, store.ensure_path("/a/b/c"))
    assert store.get_children("/a/b").result == ["c"]
    run(clock, store.ensure_path("/a/b/c"))  # already there: fine
    with pytest.raises(NoNode):
        run(clock, store.create("/x/y", b""))
    assert run(clock, store.create("/x/y", b"1", makepath=True)) == "/x/y"


def test_requests_are_checked_before_they_reach_the_log(clock, quorum):
    store = started(clock, quorum)
    end = quorum.raft_log.end_offset()
    with pytest.raises(ValueError, match="exceeds the limit"):
        run(clock, store.multi([Create(f"/n{i}") for i in range(MAX_MULTI_OPS + 1)]))
    with pytest.raises(ValueError, match="must not end with /"):
        store.get("/a/")
    with pytest.raises(TypeError):
        run(clock, store.multi(["not an op"]))
    assert quorum.raft_log.end_offset() == end
    store.session_id = None
    with pytest.raises(SessionExpired):
        run(clock, store.create("/e", b"", ephemeral=True))


def test_a_failed_multi_reports_every_operation(clock, quorum):
    store = started(clock, quorum)
    with pytest.raises(TransactionFailed) as info:
        run(clock, store.multi([Create("/a"), Create("/a")]))
    assert info.value.failed_index == 1
    assert run(clock, store.exists("/a")) is None


def test_a_new_leader_known_during_a_hung_heartbeat_is_heartbeated_at_once(clock, quorum):
    store = started(clock, quorum, timeout=6.0)
    hung: defer.Deferred = defer.Deferred()
    sent: list[float] = []
    answer = quorum.heartbeat

    def heartbeat(session_id: int) -> defer.Deferred:
        sent.append(clock.seconds())
        return hung if len(sent) == 1 else answer(session_id)

    quorum.heartbeat = heartbeat  # type: ignore[method-assign]
    clock.advance(2.0)  # the store's next heartbeat (a third of 6 s) goes, and hangs
    assert len(sent) == 1
    clock.advance(0.5)
    for tell in list(quorum._leader_listeners):  # the node learns of a new leader meanwhile
        tell()
    assert hung.called  # the heartbeat to the old leader is abandoned, not waited out
    assert store.state is SessionState.CONNECTED  # and abandoning it is no verdict
    clock.advance(0)
    assert sent[1:] == [clock.seconds()]  # at once, not when the hung one times out
    assert store.state is SessionState.CONNECTED
    clock.advance(1.9)
    assert len(sent) == 2  # one heartbeat at a time: the next a third of the timeout later
    clock.advance(0.1)
    assert len(sent) == 3


def test_the_local_quorum_tells_its_leader_listeners_as_the_network_client_does(clock, quorum):
    # The network client tells its listeners when the node leads or learns of another leader,
    # never when a leader steps down to nobody, and logs a listener's failure: the in-process
    # double must do the same, or the store tests above would test a different store.
    told: list[bool] = []

    def broken() -> None:
        raise RuntimeError("a listener's bug")

    quorum.add_leader_listener(broken)
    quorum.add_leader_listener(lambda: told.append(quorum.leading))
    run(clock, quorum.wait_for_leader())
    assert told == [True]  # the first election, despite the broken listener before it
    quorum.resign()
    assert not quorum.leading and told == [True]  # stepping down to nobody is not news
    run(clock, quorum.wait_for_leader())
    assert told == [True, True]
