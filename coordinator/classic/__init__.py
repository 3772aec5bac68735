"""Kafka's classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as
a sans-IO state machine on the coordinator's purgatories.

A *classic group* is one a standard Kafka client manages itself: members join, the coordinator
picks a leader and a protocol, the leader computes the assignment and hands it back in its
SyncGroup, and the coordinator passes each member its share. The coordinator only keeps
membership, generations and liveness; it never looks inside the protocol metadata or the
assignments (opaque bytes).

One module per job, with :class:`~coordinator.classic.groups.ClassicGroups` the facade:

- :mod:`~coordinator.classic.interface`: the configuration in, the answers out;
- :mod:`~coordinator.classic.member` and :mod:`~coordinator.classic.group`: a member, and a
  group's membership and generation (with its invariants);
- :mod:`~coordinator.classic.protocols`: which protocols all members support, and the choice;
- :mod:`~coordinator.classic.join`: JoinGroup; :mod:`~coordinator.classic.static`: static
  membership (KIP-345);
- :mod:`~coordinator.classic.rebalance`: the phases, Empty -> PreparingRebalance ->
  CompletingRebalance -> Stable, and removals;
- :mod:`~coordinator.classic.timers`: the session, join-phase and sync timers;
- :mod:`~coordinator.classic.groups`: SyncGroup, Heartbeat, LeaveGroup, offset-commit checks,
  DescribeGroups, and removing groups.

Invariants kept across them: every join or sync callback is called exactly once (with a result
or an error); at most ``max_group_size`` members and pending members per group. A member
waiting in a JoinGroup or SyncGroup counts as alive (Kafka's ``hasSatisfiedHeartbeat``),
except a *new* member, which gets ``NEW_MEMBER_JOIN_TIMEOUT_S`` to complete its first join. A
member id handed out with MEMBER_ID_REQUIRED (KIP-394) is *pending* until it joins with it, and
expires after the session timeout it asked for.

Everything runs on the reactor thread; callbacks are called synchronously.
"""
