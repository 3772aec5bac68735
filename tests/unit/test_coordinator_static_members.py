"""Static membership (KIP-345) in the classic group state machine: a static member's instance
that joins again takes its member over without a rebalance, the old member id is fenced, and
the member leaves only on its session timeout or a LeaveGroup naming its instance id. Timers
on an injected clock (tests/support/classic_groups.py)."""

from __future__ import annotations

from broker_core.wire.errors import ErrorCode
from coordinator.classic.group import GroupState
from tests.support.classic_groups import SESSION_MS, G, Harness

E = ErrorCode


def test_a_static_member_joining_again_gets_its_assignment_back_without_a_rebalance():
    h = Harness()
    a, b, c = h.stable_group(3, instances=("ia", "ib", "ic"))
    leader = h.group().leader_id
    follower = next(m for m in (a, b, c) if m != leader)
    instance = h.group().members[follower].group_instance_id
    (again,) = h.join(client="restarted", instance=instance)
    new_id = again.member_id
    assert again.error is E.NONE and new_id not in (a, b, c)
    assert again.generation_id == 1 and again.leader_id == leader and again.members == ()
    g = h.group()
    assert g.state is GroupState.STABLE and g.generation_id == 1
    assert g.static_members[instance] == new_id and follower not in g.members
    (synced,) = h.sync(new_id, 1, instance=instance)
    assert synced.error is E.NONE and synced.assignment == follower.encode()
    # The old member id is fenced everywhere; the others go on undisturbed.
    assert h.groups.heartbeat(G, follower, 1, instance) is E.FENCED_INSTANCE_ID
    assert [r.error for r in h.sync(follower, 1, instance=instance)] == [E.FENCED_INSTANCE_ID]
    assert h.groups.check_commit(G, follower, 1, instance) is E.FENCED_INSTANCE_ID
    assert [r.error for r in h.join(follower, instance=instance)] == [E.FENCED_INSTANCE_ID]
    for mid in g.members:
        assert h.groups.heartbeat(G, mid, 1, g.members[mid].group_instance_id) is E.NONE
    assert h.group().state is GroupState.STABLE


def test_the_static_leader_joining_again_is_told_the_old_leader_id_so_it_does_not_assign():
    h = Harness()
    h.stable_group(2, instances=("ia", "ib"))
    old_leader = h.group().leader_id
    instance = h.group().members[old_leader].group_instance_id
    (again,) = h.join(instance=instance)
    assert again.error is E.NONE and again.leader_id == old_leader != again.member_id
    assert again.members == ()
    assert h.group().leader_id == again.member_id and h.group().state is GroupState.STABLE
    (synced,) = h.sync(again.member_id, 1, instance=instance)
    assert synced.assignment == old_leader.encode()


def test_a_static_member_that_does_not_come_back_leaves_at_its_session_timeout():
    h = Harness()
    a, b = h.stable_group(2, instances=("ia",))
    h.tick(SESSION_MS / 1000 - 1)
    assert h.groups.heartbeat(G, b, 1) is E.NONE
    h.tick(1.2)
    g = h.group()
    assert a not in g.members and "ia" not in g.static_members
    assert g.state is GroupState.PREPARING_REBALANCE
    # Its instance id is free again: a new instance joins as a new member.
    (joined,) = h.join(b)
    assert joined.error is E.NONE and joined.generation_id == 2


def test_leave_group_by_instance_id_removes_the_static_member():
    h = Harness()
    a, b = h.stable_group(2, instances=("ia",))
    assert h.groups.leave(G, [("", "nobody")]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])
    assert h.groups.leave(G, [("someone-else", "ia")]) == (E.NONE, [E.FENCED_INSTANCE_ID])
    assert h.group().state is GroupState.STABLE
    assert h.groups.leave(G, [("", "ia")]) == (E.NONE, [E.NONE])
    assert a not in h.group().members and not h.group().static_members
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_a_static_member_joins_without_member_id_required():
    h = Harness()
    (first,) = [*h.join(v4=True, instance="ia")] or [None]  # waits in the initial delay
    assert first is None
    h.settle()
    g = h.group()
    assert g.state is GroupState.COMPLETING_REBALANCE and g.static_members.keys() == {"ia"}
    assert not g.pending_members


def test_the_leader_sees_every_members_instance_id():
    h = Harness()
    joins = [h.join(client="a", instance="ia"), h.join(client="b")]
    h.settle()
    leader = next(j[0] for j in joins if j[0].member_id == j[0].leader_id)
    assert sorted((i or "") for _, i, _ in leader.members) == ["", "ia"]


def test_requests_naming_an_instance_id_must_come_from_its_current_member():
    h = Harness()
    a, b = h.stable_group(2, instances=("ia",))
    assert h.groups.heartbeat(G, b, 1, "ia") is E.FENCED_INSTANCE_ID
    assert h.groups.heartbeat(G, a, 1, "unknown") is E.UNKNOWN_MEMBER_ID
    assert [r.error for r in h.join(b, instance="ia")] == [E.FENCED_INSTANCE_ID]
    assert h.groups.check_commit(G, b, 1, "ia") is E.FENCED_INSTANCE_ID
    assert h.group().state is GroupState.STABLE and h.group().generation_id == 1


def test_joining_again_while_completing_rebalance_fences_the_old_sync_and_rebalances():
    h = Harness()
    a, b = h.stable_group(2, instances=("ia", "ib"))
    leader = h.group().leader_id
    follower = b if leader == a else a
    instance = h.group().members[follower].group_instance_id
    first, second = h.join(leader, instance=h.group().members[leader].group_instance_id), \
        h.join(follower, instance=instance)
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert first[0].generation_id == second[0].generation_id == 2
    waiting = h.sync(follower, 2, instance=instance)
    assert waiting == []
    again = h.join(instance=instance)
    assert [r.error for r in waiting] == [E.FENCED_INSTANCE_ID]
    assert h.group().state is GroupState.PREPARING_REBALANCE and again == []
    rejoined = h.join(h.group().leader_id, instance=h.group().members[leader].group_instance_id)
    assert [r.error for r in again] == [E.NONE] and [r.error for r in rejoined] == [E.NONE]
    assert again[0].generation_id == 3


def test_joining_again_while_preparing_rebalance_fences_the_old_join():
    h = Harness()
    a, b = h.stable_group(2, instances=("ia", "ib"))
    leader = h.group().leader_id
    follower = b if leader == a else a
    instance = h.group().members[follower].group_instance_id
    leader_join = h.join(leader, instance=h.group().members[leader].group_instance_id)
    old_join = h.join(follower + "x", instance=instance)
    assert [r.error for r in old_join] == [E.FENCED_INSTANCE_ID]  # not the instance's member
    assert h.group().state is GroupState.PREPARING_REBALANCE and leader_join == []
    again = h.join(instance=instance)
    # Every member has joined now: the generation forms with the new member id.
    assert [r.error for r in again] == [E.NONE] and again[0].generation_id == 2
    assert again[0].member_id in h.group().members and follower not in h.group().members
    assert [r.error for r in leader_join] == [E.NONE]


def test_joining_again_with_protocols_that_change_the_choice_rebalances():
    h = Harness()
    (a,) = h.stable_group(1, instances=("ia",))
    again = h.join(instance="ia", protocols=(("roundrobin", b""), ("range", b"R")))
    # It alone votes: the choice moves to roundrobin, so a new generation is formed.
    assert [r.error for r in again] == [E.NONE]
    assert again[0].generation_id == 2 and again[0].protocol_name == "roundrobin"
    assert h.group().state is GroupState.COMPLETING_REBALANCE
