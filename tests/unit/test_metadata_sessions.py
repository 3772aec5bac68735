"""Session liveness on the quorum leader (``broker_core.raft.metadata_sessions``): heartbeats
move deadlines, expiry is reported once, and a new leader grants every open session a full
timeout from when it took over. Plus the whole path on a real one-voter quorum: a session whose
heartbeats stop is expired through the log and its ephemerals go."""

from __future__ import annotations

from dataclasses import replace

from twisted.internet import task

from broker_core.raft.metadata_commands import CreateNode, OpenSession, encode
from broker_core.raft.metadata_sessions import SessionTracker
from tests.support.local_quorum import FAST, LocalQuorum


def test_heartbeats_move_the_deadline_and_expiry_is_reported_once():
    t = SessionTracker()
    t.lead({}, now=0)
    t.opened(5, 1000, now=0)
    t.opened(9, 3000, now=0)
    assert t.next_deadline() == 1000
    assert t.expired(999) == []
    assert t.heartbeat(5, now=900)
    assert t.expired(1500) == []
    assert t.next_deadline() == 1900
    assert t.expired(1900) == [5]
    assert t.expired(5000) == [9]  # 5 is not reported again
    assert t.expired(6000) == []
    assert not t.heartbeat(5, now=2000)  # being expired: the client must open a new session
    assert not t.is_live(5)
    t.ended(5)
    assert not t.heartbeat(5, now=2000)


def test_a_late_heartbeat_does_not_shorten_a_deadline():
    t = SessionTracker()
    t.lead({7: 1000}, now=5000)
    assert t.heartbeat(7, now=100)  # a clock older than the grant (cannot go back)
    assert t.next_deadline() == 6000


def test_unknown_sessions_are_refused():
    t = SessionTracker()
    t.lead({}, now=0)
    assert not t.heartbeat(42, now=0)
    assert t.next_deadline() is None


def test_a_new_leader_grants_every_open_session_a_full_timeout():
    old = SessionTracker()
    old.lead({1: 1000, 2: 4000}, now=0)
    assert old.heartbeat(1, now=800)
    # Leadership moves at 10 s: the heartbeat history stays behind with the old leader, and
    # the new one counts each session's timeout from when it took over.
    old.stop_leading()
    assert old.expired(10_000) == [] and not old.heartbeat(1, now=10_000)
    new = SessionTracker()
    new.lead({1: 1000, 2: 4000}, now=10_000)
    assert new.expired(10_999) == []
    assert new.expired(11_000) == [1]
    assert new.heartbeat(2, now=13_000)
    assert new.expired(16_999) == []
    assert new.expired(17_000) == [2]


def test_an_idle_session_expires_through_the_log_on_a_real_quorum():
    clock = task.Clock()
    quorum = LocalQuorum(clock)
    clock.advance(0.2)
    assert quorum.leading
    results: list = []
    quorum.submit(encode(OpenSession(3000), 200)).addCallback(results.append)
    quorum.submit(encode(OpenSession(3000), 200)).addCallback(results.append)
    idle, alive = results
    quorum.submit(encode(CreateNode("/idle", owner=idle)))
    quorum.submit(encode(CreateNode("/alive", owner=alive)))
    for _ in range(8):  # 4 s, heartbeating only one session every 0.5 s
        clock.advance(0.5)
        quorum.heartbeat(alive)
    assert quorum.tree.sessions == {alive: 3000}
    assert quorum.tree.exists("/idle") is None and quorum.tree.exists("/alive") is not None
    failures: list = []
    quorum.heartbeat(idle).addErrback(failures.append)
    assert failures and "not live" in str(failures[0].value)
    quorum.stop()


def test_a_session_survives_a_leader_change_longer_than_its_heartbeat_gap():
    """The leader resigns and wins the next election a while later; a session that could not
    heartbeat meanwhile gets a full timeout from the new leader's win instead of expiring at
    its old deadline, and expires one timeout after the win if it stays silent."""
    clock = task.Clock()
    quorum = LocalQuorum(clock, config=replace(FAST, election_timeout_ms=800))
    while not quorum.leading:
        clock.advance(0.05)
    results: list = []
    quorum.submit(encode(OpenSession(1000), 0)).addCallback(results.append)
    (sid,) = results
    old_deadline = clock.seconds() + 1.0
    quorum.resign()
    epoch = quorum.node.epoch
    failures: list = []
    quorum.heartbeat(sid).addErrback(failures.append)  # no leader: the client is SUSPENDED
    assert failures and "no leader" in str(failures[0].value)
    while not quorum.leading:
        clock.advance(0.01)
    won = clock.seconds()
    assert quorum.node.epoch == epoch + 1
    clock.advance(0.95)
    assert clock.seconds() > old_deadline + 0.5  # long past the deadline the old term set
    assert sid in quorum.tree.sessions
    clock.advance(0.1)
    assert clock.seconds() >= won + 1.0
    assert sid not in quorum.tree.sessions  # silent for a whole timeout after the win
    quorum.stop()
