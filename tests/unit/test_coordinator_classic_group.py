"""Kafka's classic group protocol as a state machine: every transition and every error, with
session, rebalance, sync and initial-delay timers on an injected clock."""

from __future__ import annotations

import itertools

import pytest

from broker_core.wire.errors import ErrorCode
from coordinator.classic.group import GroupState
from coordinator.classic.interface import JoinResult, SyncResult
from coordinator.classic.timers import NEW_MEMBER_JOIN_TIMEOUT_S
from tests.support.classic_groups import DELAY_MS, REBALANCE_MS, SESSION_MS, G, Harness

E = ErrorCode


def test_kip394_a_new_member_gets_member_id_required_then_joins_with_it():
    h = Harness()
    first = h.join(v4=True)
    assert [a.error for a in first] == [E.MEMBER_ID_REQUIRED]
    mid = first[0].member_id
    assert mid == "c-1"
    assert h.group().state is GroupState.EMPTY and mid in h.group().pending_members
    second = h.join(mid, v4=True)
    assert second == []  # waits in the initial delay
    assert h.group().state is GroupState.PREPARING_REBALANCE
    h.settle()
    (answer,) = second
    assert answer.error is E.NONE and answer.member_id == mid and answer.generation_id == 1
    assert answer.leader_id == mid and answer.protocol_name == "range"
    assert answer.members == ((mid, None, b"R"),)


def test_kip394_an_unused_member_id_expires_after_the_session_timeout():
    h = Harness()
    mid = h.join(v4=True)[0].member_id
    h.clock.advance(SESSION_MS / 1000 - 0.1)
    assert mid in h.group().pending_members
    h.clock.advance(0.2)
    assert h.group() is None  # nothing left: the group it was made for is forgotten
    assert [a.error for a in h.join(mid, v4=True)] == [E.UNKNOWN_MEMBER_ID]


def test_a_rebalance_waits_for_pending_member_ids():
    h = Harness()
    ids = h.stable_group(1)
    pending = h.join(v4=True)[0].member_id
    rejoin = h.join(ids[0])  # the leader's join starts a rebalance
    assert h.group().state is GroupState.PREPARING_REBALANCE and rejoin == []
    later = h.join(pending, v4=True)
    assert [a.error for a in rejoin] == [E.NONE] and [a.error for a in later] == [E.NONE]
    assert rejoin[0].generation_id == 2 and len(rejoin[0].members) == 2


def test_before_v4_a_new_member_joins_at_once_and_the_initial_delay_gathers_members():
    h = Harness()
    joins = [h.join(client=f"c{i}") for i in range(3)]
    assert all(j == [] for j in joins)
    assert h.group().state is GroupState.PREPARING_REBALANCE
    h.tick(DELAY_MS / 1000 - 0.1)
    assert all(j == [] for j in joins)
    h.tick(0.2)
    assert all(j == [] for j in joins)  # members arrived during the delay: extended once
    h.tick(DELAY_MS / 1000)
    answers = [j[0] for j in joins]
    assert {a.generation_id for a in answers} == {1}
    leader = answers[0].member_id
    assert all(a.leader_id == leader for a in answers)
    assert len(answers[0].members) == 3
    assert answers[1].members == () and answers[2].members == ()
    assert h.group().state is GroupState.COMPLETING_REBALANCE


def test_the_initial_delay_is_bounded_by_the_rebalance_timeout():
    h = Harness()
    first = h.join(client="c0", rebalance_ms=5_000)
    for tick in range(1, 100):  # a member every 2.9 s would extend the delay for ever
        h.clock.advance(0.1)
        if first:
            break
        if tick % 29 == 0:
            h.join(client=f"c{tick}", rebalance_ms=5_000)
    # One extension (3 s + the 2 s left of the rebalance timeout), not one per arrival.
    assert [a.error for a in first] == [E.NONE]
    assert h.clock.seconds() == pytest.approx(5.0, abs=0.11)
    assert len(first[0].members) == 2


def test_zero_initial_delay_forms_the_generation_at_once():
    h = Harness(initial_rebalance_delay_ms=0)
    (answer,) = h.join()
    assert answer.error is E.NONE and answer.generation_id == 1


def test_sync_hands_the_leaders_assignment_to_every_member():
    h = Harness()
    joins = [h.join(client=f"c{i}") for i in range(3)]
    h.settle()
    ids = [j[0].member_id for j in joins]
    follower = h.sync(ids[1], 1)
    assert follower == []  # waits for the leader
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    leader = h.sync(ids[0], 1, [(ids[0], b"A0"), (ids[1], b"A1")],
                    protocol_type="consumer", protocol_name="range")
    assert leader == [SyncResult(E.NONE, "consumer", "range", b"A0")]
    assert follower == [SyncResult(E.NONE, "consumer", "range", b"A1")]
    assert h.group().state is GroupState.STABLE
    # The one the leader left out gets an empty assignment when it syncs.
    assert h.sync(ids[2], 1) == [SyncResult(E.NONE, "consumer", "range", b"")]


@pytest.mark.parametrize("case", ["no group", "unknown member", "old generation",
                                  "protocol type", "protocol name"])
def test_sync_errors(case):
    h = Harness()
    ids = h.stable_group(2)
    args = {"no group": dict(member_id=ids[0], generation=1, group="other"),
            "unknown member": dict(member_id="nobody", generation=1),
            "old generation": dict(member_id=ids[0], generation=0),
            "protocol type": dict(member_id=ids[0], generation=1, protocol_type="connect"),
            "protocol name": dict(member_id=ids[0], generation=1, protocol_name="roundrobin")}
    want = {"no group": E.UNKNOWN_MEMBER_ID, "unknown member": E.UNKNOWN_MEMBER_ID,
            "old generation": E.ILLEGAL_GENERATION, "protocol type":
            E.INCONSISTENT_GROUP_PROTOCOL, "protocol name": E.INCONSISTENT_GROUP_PROTOCOL}
    kw = args[case]
    assert h.sync(kw.pop("member_id"), kw.pop("generation"), **kw) == [SyncResult(want[case])]
    assert h.group().state is GroupState.STABLE


def test_sync_during_a_rebalance_says_rebalance_in_progress():
    h = Harness()
    ids = h.stable_group(2)
    h.join(client="new")
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.sync(ids[1], 1) == [SyncResult(E.REBALANCE_IN_PROGRESS)]


def test_heartbeat_answers_per_state_and_error():
    h = Harness()
    ids = h.stable_group(2)
    assert h.groups.heartbeat(G, ids[0], 1) is E.NONE
    assert h.groups.heartbeat(G, ids[0], 0) is E.ILLEGAL_GENERATION
    assert h.groups.heartbeat(G, "nobody", 1) is E.UNKNOWN_MEMBER_ID
    assert h.groups.heartbeat("other", ids[0], 1) is E.UNKNOWN_MEMBER_ID
    h.join(client="new")
    assert h.groups.heartbeat(G, ids[1], 1) is E.REBALANCE_IN_PROGRESS


def test_heartbeat_during_completing_rebalance_is_accepted():
    h = Harness()
    (j,) = [h.join()]
    h.settle()
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert h.groups.heartbeat(G, j[0].member_id, 1) is E.NONE


def test_a_member_without_heartbeats_expires_and_the_rest_rebalance():
    h = Harness()
    a, b, c = h.stable_group(3)
    start = h.clock.seconds()
    while c in h.group().members:  # a and b keep heartbeating; c stays silent
        assert h.groups.heartbeat(G, a, 1) is E.NONE
        assert h.groups.heartbeat(G, b, 1) is E.NONE
        h.clock.advance(SESSION_MS / 1000 / 3)
    assert h.clock.seconds() - start == pytest.approx(SESSION_MS / 1000, abs=SESSION_MS / 3000)
    assert set(h.group().members) == {a, b}
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.groups.heartbeat(G, b, 1) is E.REBALANCE_IN_PROGRESS
    ja, jb = h.join(a), h.join(b)
    assert ja[0].generation_id == 2 and jb[0].generation_id == 2
    assert {m for m, _, _ in ja[0].members} == {a, b}


def test_heartbeats_keep_a_member_alive_for_many_session_timeouts():
    h = Harness()
    ids = h.stable_group(2)
    for _ in range(30):
        h.clock.advance(SESSION_MS / 1000 / 2)
        assert all(h.groups.heartbeat(G, m, 1) is E.NONE for m in ids)
    assert h.group().state is GroupState.STABLE and h.group().generation_id == 1


def test_a_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout():
    h = Harness()
    a, b, c = h.stable_group(3)
    ja = h.join(a)  # the leader rejoins: everyone must
    jb = h.join(b)
    assert ja == [] and jb == []
    # c heartbeats (learning of the rebalance) but never rejoins.
    for _ in range(int(REBALANCE_MS / 1000 / 3) - 1):
        h.clock.advance(3)
        h.groups.heartbeat(G, c, 1)
    assert ja == []
    h.clock.advance(3)
    assert ja[0].error is E.NONE and ja[0].generation_id == 2
    assert c not in h.group().members
    assert h.groups.heartbeat(G, c, 2) is E.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_sync_is_removed_at_the_rebalance_timeout():
    h = Harness()
    joins = [h.join(client=f"c{i}") for i in range(2)]
    h.settle()
    leader, follower = (j[0].member_id for j in joins)
    # The leader stays in the group by heartbeats but never sends SyncGroup.
    waiting = h.sync(follower, 1)
    for _ in range(int(REBALANCE_MS / 1000 / 3)):
        h.clock.advance(3)
        h.groups.heartbeat(G, leader, 1)
    assert leader not in h.group().members
    assert waiting == [SyncResult(E.REBALANCE_IN_PROGRESS)]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.group().leader_id == follower


def test_a_new_member_whose_join_never_completes_expires_after_the_new_member_timeout():
    h = Harness()
    (a,) = h.stable_group(1)
    big_ms = 10 * int(NEW_MEMBER_JOIN_TIMEOUT_S * 1000)
    stuck = h.join(client="late", rebalance_ms=big_ms)  # waits: a has not rejoined
    steps = int(NEW_MEMBER_JOIN_TIMEOUT_S // 3)
    for _ in range(steps - 1):
        h.clock.advance(3)
        assert h.groups.heartbeat(G, a, 1) is E.REBALANCE_IN_PROGRESS
    assert stuck == []
    h.clock.advance(3)
    assert [x.error for x in stuck] == [E.UNKNOWN_MEMBER_ID]
    (ja,) = h.join(a)  # now everyone left has joined
    assert ja.generation_id == 2 and [m for m, _, _ in ja.members] == [a]


def test_leave_removes_members_one_or_several_and_unknown_ones_are_named():
    h = Harness()
    a, b, c = h.stable_group(3)
    assert h.groups.leave(G, [(b, None), ("nobody", None)]) == (
        E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID])
    assert b not in h.group().members
    assert h.group().state is GroupState.PREPARING_REBALANCE
    ja, jc = h.join(a), h.join(c)
    assert ja[0].generation_id == 2 and jc[0].generation_id == 2
    h.sync(c, 2)
    h.sync(a, 2, [(a, b"x"), (c, b"y")])
    assert h.groups.leave(G, [(a, None), (c, None)]) == (E.NONE, [E.NONE, E.NONE])
    # Everyone left: the rebalance completes at once into an empty group, generation 3.
    assert h.group().state is GroupState.EMPTY and h.group().generation_id == 3
    assert h.group().leader_id is None and h.group().protocol_name is None
    assert h.groups.leave("other", [("x", None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


def test_leave_of_a_pending_member_id_lets_the_rebalance_finish():
    h = Harness()
    (a,) = h.stable_group(1)
    pending = h.join(v4=True)[0].member_id
    ja = h.join(a)
    assert ja == []
    assert h.groups.leave(G, [(pending, None)]) == (E.NONE, [E.NONE])
    assert ja[0].error is E.NONE and ja[0].generation_id == 2


def test_the_last_member_leaving_during_the_join_phase_empties_the_group():
    h = Harness()
    j = h.join()
    mid = h.group().members and next(iter(h.group().members))
    assert h.groups.leave(G, [(mid, None)]) == (E.NONE, [E.NONE])
    assert j == [JoinResult(E.UNKNOWN_MEMBER_ID, mid)]
    h.settle()
    assert h.group().state is GroupState.EMPTY and h.group().generation_id == 1


def test_the_common_protocol_with_most_votes_is_chosen():
    h = Harness()
    h.join(client="a", protocols=(("range", b""), ("roundrobin", b"")))
    h.join(client="b", protocols=(("roundrobin", b""), ("range", b"")))
    h.join(client="c", protocols=(("sticky", b""), ("roundrobin", b""), ("range", b"")))
    h.settle()
    assert h.group().protocol_name == "roundrobin"


@pytest.mark.parametrize("protocol_type,protocols", [
    ("connect", (("range", b""),)),     # another protocol type
    ("consumer", (("sticky", b""),)),   # no protocol in common
    ("consumer", (("range", b""), ("range", b"x"))),  # a protocol named twice
])
def test_an_inconsistent_join_is_refused_and_changes_nothing(protocol_type, protocols):
    h = Harness()
    ids = h.stable_group(2)
    answer = h.join(protocol_type=protocol_type, protocols=protocols)
    assert [a.error for a in answer] == [E.INCONSISTENT_GROUP_PROTOCOL]
    assert list(h.group().members) == ids and h.group().state is GroupState.STABLE


def test_a_first_join_without_type_or_protocols_is_refused_and_leaves_no_group():
    h = Harness()
    assert [a.error for a in h.join(protocol_type="")] == [E.INCONSISTENT_GROUP_PROTOCOL]
    assert [a.error for a in h.join(protocols=())] == [E.INCONSISTENT_GROUP_PROTOCOL]
    assert h.group() is None


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001])
def test_a_session_timeout_outside_the_range_is_refused(session_ms):
    h = Harness()
    assert [a.error for a in h.join(session_ms=session_ms)] == [E.INVALID_SESSION_TIMEOUT]
    assert h.group() is None


def test_a_join_with_an_unknown_member_id_is_refused():
    h = Harness()
    assert [a.error for a in h.join("ghost")] == [E.UNKNOWN_MEMBER_ID]
    h.stable_group(1)
    assert [a.error for a in h.join("ghost")] == [E.UNKNOWN_MEMBER_ID]


def test_the_group_size_is_bounded_pending_member_ids_included():
    h = Harness(max_group_size=2)
    a = h.join(v4=True)[0].member_id
    h.join(v4=True)
    assert [x.error for x in h.join(v4=True)] == [E.GROUP_MAX_SIZE_REACHED]
    assert [x.error for x in h.join()] == [E.GROUP_MAX_SIZE_REACHED]
    assert h.join(a, v4=True) == []  # a known id still joins


def test_a_followers_unchanged_join_in_stable_returns_the_generation_without_rebalance():
    h = Harness()
    a, b = h.stable_group(2)
    (answer,) = h.join(b)
    assert answer.error is E.NONE and answer.generation_id == 1 and answer.members == ()
    assert h.group().state is GroupState.STABLE


def test_a_followers_changed_metadata_or_the_leaders_join_starts_a_rebalance():
    h = Harness()
    a, b = h.stable_group(2)
    assert h.join(b, protocols=(("range", b"new topics"),)) == []
    assert h.group().state is GroupState.PREPARING_REBALANCE
    (ja,) = h.join(a)
    assert ja.generation_id == 2 and dict((m, md) for m, _, md in ja.members)[b] == \
        b"new topics"


def test_a_repeated_join_in_completing_rebalance_returns_the_same_generation():
    h = Harness()
    joins = [h.join(client=f"c{i}") for i in range(2)]
    h.settle()
    leader = joins[0][0].member_id
    (again,) = h.join(leader)
    assert again == joins[0][0]
    assert h.group().state is GroupState.COMPLETING_REBALANCE


def test_a_second_join_while_waiting_answers_the_first_once():
    h = Harness()
    a, b = h.stable_group(2)
    first = h.join(a)  # b has not rejoined: the rebalance stays open
    second = h.join(a)
    assert first == [JoinResult(E.REBALANCE_IN_PROGRESS, a)]
    h.join(b)
    assert len(second) == 1 and second[0].error is E.NONE and len(first) == 1


def test_a_join_during_completing_rebalance_sends_waiting_syncs_back_to_rejoin():
    h = Harness()
    joins = [h.join(client=f"c{i}") for i in range(2)]
    h.settle()
    follower = joins[1][0].member_id
    waiting = h.sync(follower, 1)
    h.join(client="newcomer")
    assert waiting == [SyncResult(E.REBALANCE_IN_PROGRESS)]
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_the_leader_leaving_passes_leadership_to_a_member_that_rejoins():
    h = Harness()
    a, b, c = h.stable_group(3)
    assert h.group().leader_id == a
    h.groups.leave(G, [(a, None)])
    jb, jc = h.join(b), h.join(c)
    assert jb[0].leader_id == jc[0].leader_id == b and len(jb[0].members) == 2


def test_describe_shows_metadata_and_assignments_only_when_stable():
    h = Harness()
    a, b = h.stable_group(2)
    s = h.groups.summary(h.group())
    assert (s.state, s.protocol_type, s.protocol_name) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in s.members] == \
        [(a, b"R", a.encode()), (b, b"R", b.encode())]
    h.join(a)
    s = h.groups.summary(h.group())
    assert s.state == "PreparingRebalance" and s.protocol_name == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in s.members)


def test_offset_commit_checks():
    h = Harness()
    # No group at all: a simple (generation -1) commit is allowed; a member commit is not.
    assert h.groups.check_commit(G, "", -1) is E.NONE
    assert h.groups.check_commit(G, "m", 3) is E.ILLEGAL_GENERATION
    a, b = h.stable_group(2)
    assert h.groups.check_commit(G, a, 1) is E.NONE
    assert h.groups.check_commit(G, a, 0) is E.ILLEGAL_GENERATION
    assert h.groups.check_commit(G, "nobody", 1) is E.UNKNOWN_MEMBER_ID
    assert h.groups.check_commit(G, "", -1) is E.UNKNOWN_MEMBER_ID  # the group has members
    h.join(client="new")
    assert h.groups.check_commit(G, a, 1) is E.NONE  # PreparingRebalance: still commits
    h.join(a)
    h.join(b)
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert h.groups.check_commit(G, a, 1) is E.ILLEGAL_GENERATION
    assert h.groups.check_commit(G, a, 2) is E.REBALANCE_IN_PROGRESS
    h.groups.leave(G, [(m, None) for m in h.group().members])
    h.settle()
    assert h.group().state is GroupState.EMPTY
    assert h.groups.check_commit(G, "", -1) is E.NONE


def test_a_commit_proves_the_member_alive():
    h = Harness()
    a, b = h.stable_group(2)
    for _ in range(6):
        h.clock.advance(SESSION_MS / 1000 / 2)
        assert h.groups.check_commit(G, a, 1) is E.NONE
        assert h.groups.heartbeat(G, b, 1) is E.NONE
    assert h.group().state is GroupState.STABLE


def test_clear_answers_every_waiting_request_and_stops_every_timer():
    h = Harness()
    joins = [h.join(client=f"c{i}") for i in range(2)]
    h.settle()
    waiting = h.sync(joins[1][0].member_id, 1)
    pending_join = h.join(client="late", group="other")  # in its initial delay
    h.groups.clear()
    assert waiting == [SyncResult(E.NOT_COORDINATOR)]
    assert [a.error for a in pending_join] == [E.NOT_COORDINATOR]
    assert h.groups.groups == {}
    h.clock.advance(10 * NEW_MEMBER_JOIN_TIMEOUT_S)  # nothing fires into the cleared state
    assert h.groups.groups == {}
    assert h.groups.heartbeats.delayed == 0 and h.groups.rebalances.delayed == 0


def test_an_empty_group_can_be_removed_but_not_one_with_members():
    h = Harness()
    (a,) = h.stable_group(1)
    assert not h.groups.remove_group(G)
    h.groups.leave(G, [(a, None)])
    assert h.group().state is GroupState.EMPTY
    assert h.groups.remove_group(G) and h.group() is None
    assert [x.error for x in h.join(v4=True)] == [E.MEMBER_ID_REQUIRED]


def test_every_callback_is_answered_exactly_once_under_churn():
    h = Harness()
    calls: dict[int, int] = {}
    seq = itertools.count()

    def counted():
        n = next(seq)
        calls[n] = 0

        def respond(_):
            calls[n] += 1
        return respond

    members: list[str] = []
    for round_ in range(20):
        h.groups.join(G, "", client_id=f"c{round_}", client_host="h",
                      session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                      protocol_type="consumer", protocols=[("range", b"")],
                      require_known_member_id=False, respond=counted())
        g = h.group()
        members = list(g.members) if g else []
        if round_ % 3 == 0 and members:
            h.groups.leave(G, [(members[0], None)])
        if round_ % 4 == 0 and g and g.members:
            m = next(iter(g.members))
            h.groups.sync(G, m, g.generation_id, protocol_type=None, protocol_name=None,
                          assignments=[], respond=counted())
        h.clock.advance(2.0)
    h.clock.advance(NEW_MEMBER_JOIN_TIMEOUT_S * 2)
    h.groups.clear()
    assert set(calls.values()) == {1}
