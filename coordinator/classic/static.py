"""Static membership (KIP-345): a member that joins with a ``group.instance.id`` is *static*.
The group's ``static_members`` maps each instance id to the one member id that holds it now
(:meth:`ClassicGroup.replace_static <coordinator.classic.group.ClassicGroup.replace_static>`,
:meth:`~coordinator.classic.group.ClassicGroup.validate_member`). A JoinGroup with that
instance id and no member id (the client restarted) takes the member over under a new member
id (:func:`rejoin_static`): the old member id is fenced (its waiting join or sync, and every
later request with it, gets FENCED_INSTANCE_ID), and in a Stable group whose protocol choice
does not change the member gets its old assignment back without a rebalance. A static member
leaves only on its session timeout or a LeaveGroup naming its instance id (clients do not send
one on close).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.logger import Logger

from broker_core.wire.errors import ErrorCode
from coordinator.classic.group import ClassicGroup, GroupState, update_member
from coordinator.classic.interface import JoinCallback, JoinResult, SyncResult
from coordinator.classic.member import ClassicMember
from coordinator.classic.rebalance import Rebalancer
from coordinator.classic.timers import GroupTimers

log = Logger(namespace="sluice.coordinator.classic")


def rejoin_static(group: ClassicGroup, joining: ClassicMember, respond: JoinCallback, *,
                  new_member_id: Callable[[str], str], timers: GroupTimers,
                  rebalancer: Rebalancer) -> None:
    """Kafka's ``updateStaticMemberAndRebalance``: a static member's instance joins again
    without a member id (it restarted). It takes over the member under a new id; the old
    id's waiting requests are fenced. A Stable group whose protocol choice stays the same
    does not rebalance: the member syncs and gets its old assignment back."""
    instance_id = joining.group_instance_id
    assert instance_id is not None
    old = group.members[group.static_members[instance_id]]
    old_id, old_leader = old.member_id, group.leader_id or ""
    log.info("classic group {g}: static member {i} joined again; member {old} is fenced",
             g=group.group_id, i=instance_id, old=old_id)
    fenced_join, old.awaiting_join = old.awaiting_join, None
    fenced_sync, old.awaiting_sync = old.awaiting_sync, None
    if fenced_join is not None:
        fenced_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
    if fenced_sync is not None:
        fenced_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
    member = group.replace_static(instance_id, new_member_id(joining.client_id))
    timers.expect_heartbeat(group, member)
    update_member(group, member, joining, respond)
    if group.is_(GroupState.STABLE):
        if group.select_protocol() == group.protocol_name:
            # The old leader id is answered, so the member (even the leader) does not
            # compute an assignment a Stable group would not hand out.
            respond, member.awaiting_join = member.awaiting_join, None
            assert respond is not None
            respond(JoinResult(ErrorCode.NONE, member.member_id, group.generation_id,
                               group.protocol_type, group.protocol_name, old_leader))
        else:
            rebalancer.prepare(group, f"static member {instance_id} joined again "
                                      "with other protocols")
    elif group.is_(GroupState.COMPLETING_REBALANCE):
        rebalancer.prepare(group, f"static member {instance_id} joined again")
