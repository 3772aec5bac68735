"""Session liveness on the quorum leader (``broker_core.raft.metadata_sessions``): heartbeats
move deadlines, expiry is reported once, and a new leader gives a session it has no view of a
full timeout from when it took over, and one in its view the deadline the old leader would
have given it but never less than the grace from the takeover. Plus the whole path on a real
one-voter quorum: a session whose heartbeats stop is expired through the log and its
ephemerals go."""

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


def test_a_new_leader_keeps_the_deadlines_of_its_view_but_never_less_than_the_grace():
    """A follower's view (the leader's table as ages, at 10 s): session 1 was last heard
    500 ms before, 2 just then, 3 is not in it (opened after). Taking over at 12 s: 1 and 2
    keep the deadlines the old leader gave them (heard + 6 s), not 18 s; 3 gets a full
    timeout."""
    t = SessionTracker()
    t.remember({1: 500, 2: 0}, now=10_000)
    t.lead({1: 6000, 2: 6000, 3: 6000}, now=12_000)
    assert t.expired(15_499) == []
    assert t.expired(15_500) == [1]
    assert t.expired(15_999) == []
    assert t.expired(16_000) == [2]
    assert t.expired(17_999) == []
    assert t.expired(18_000) == [3]


def test_a_stale_view_never_leaves_less_than_the_grace():
    """The view is 8 s old at the takeover (this node was cut off from the old leader): the
    old deadlines have passed, and each session still gets half its timeout from the
    takeover, enough for a live client to find the new leader."""
    t = SessionTracker()
    t.remember({1: 0, 2: 1000}, now=10_000)
    t.lead({1: 6000, 2: 4000}, now=18_000)
    assert t.expired(19_999) == []
    assert t.expired(20_000) == [2]  # 18 s + 4 s / 2
    assert t.expired(20_999) == []
    assert t.expired(21_000) == [1]  # 18 s + 6 s / 2
    # A heartbeat in the grace restores a full timeout.
    t2 = SessionTracker()
    t2.remember({1: 0}, now=0)
    t2.lead({1: 6000}, now=10_000)
    assert t2.heartbeat(1, now=12_000)
    assert t2.expired(17_999) == []
    assert t2.expired(18_000) == [1]


def test_a_leader_that_steps_down_keeps_its_table_as_its_view():
    t = SessionTracker()
    t.lead({1: 6000, 2: 6000}, now=0)
    assert t.heartbeat(1, now=3000)
    assert t.expired(6000) == [2]  # being expired: not in the view
    t.stop_leading()
    assert t.ages(7000) == {}  # a follower publishes no table
    t.lead({1: 6000, 2: 6000}, now=7000)
    assert t.expired(9_999) == []
    assert t.expired(10_000) == [1]  # max(3 s + 6 s, 7 s + 3 s)
    assert t.expired(12_999) == []
    assert t.expired(13_000) == [2]  # not in the view: a full timeout from the takeover


def test_the_leaders_table_is_ages_and_a_leader_ignores_views():
    t = SessionTracker()
    t.lead({1: 6000, 2: 6000}, now=1000)
    assert t.heartbeat(2, now=4000)
    table = t.ages(5000)
    assert table == {1: 4000, 2: 1000}
    t.remember({1: 0, 2: 0}, now=5000)  # while leading: its own table is fresher
    assert t.expired(7000) == [1]
    assert t.expired(10_000) == [2]
    follower = SessionTracker()
    follower.remember(table, now=50_000)  # another clock: only the ages matter
    follower.lead({1: 6000, 2: 6000}, now=50_500)
    assert follower.expired(53_499) == []
    assert follower.expired(53_500) == [1]  # max(46 s + 6 s, 50.5 s + 3 s)
    assert follower.expired(54_999) == []
    assert follower.expired(55_000) == [2]  # 49 s + 6 s


def test_a_session_opened_since_the_last_table_is_in_the_view_from_its_opening():
    """Applying an ``open_session`` entry on a follower is proof of life at that moment: a
    session opened after the last heartbeat answer (a cluster that just formed, a broker that
    just registered) is in the view from then, not left to a full timeout from the takeover.
    A heard time the view already has is kept, and a leader ignores it (it tracks opens)."""
    t = SessionTracker()
    t.remember({1: 0}, now=1000)
    t.saw_opened(1, now=4000)  # already known: kept
    t.saw_opened(2, now=1500)
    t.lead({1: 6000, 2: 6000}, now=2000)
    assert t.expired(6_999) == []
    assert t.expired(7_000) == [1]
    assert t.expired(7_499) == []
    assert t.expired(7_500) == [2]
    t.saw_opened(3, now=8000)  # leading: ignored
    t.stop_leading()
    assert t.ages(9000) == {}
    t.lead({3: 6000}, now=9000)
    assert t.next_deadline() == 15_000  # not in the view: a full timeout


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
    heartbeat meanwhile is not expired at its old deadline: the new leader (here the same
    node, whose table became its view) gives it the grace, half its timeout, from the win, and
    expires it then if it stays silent."""
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
    clock.advance(0.45)
    assert clock.seconds() > old_deadline  # past the deadline the old term set
    assert sid in quorum.tree.sessions
    clock.advance(0.1)
    assert clock.seconds() >= won + 0.5
    assert sid not in quorum.tree.sessions  # silent for the whole grace after the win
    quorum.stop()
