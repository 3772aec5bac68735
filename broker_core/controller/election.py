"""Leader election rules as pure functions (Kafka's ``PartitionLeaderElectionAlgorithms``), and
the controller's judgement of a leader's ISR change request (AlterIsr).

They take the assignment (AR, preferred replica first), the ISR and the live brokers and return a
decision; the controller writes it to ZooKeeper and sends it to the brokers. Table-tested without
ZooKeeper or a reactor.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Election:
    """Outcome of an election: the new leader (-1: offline), the new ISR, whether a replica
    outside the ISR was chosen (an *unclean* election: committed messages may be lost), and
    whether a leader that keeps its place must still start a new leader epoch (it
    re-registered, so it may have lost its in-memory state; ``new_generation``)."""

    leader: int
    isr: tuple[int, ...]
    unclean: bool = False
    new_generation: bool = False


def next_leader_epoch(leader: int, leader_epoch: int, election: Election) -> int:
    """The leader epoch to write for ``election`` over a partition now led by ``leader`` at
    ``leader_epoch``.

    Invariant: the epoch goes up by exactly one whenever leadership changes hands, the partition
    goes (or stays) offline, or the same leader starts a new generation (a returning
    leader); an ISR-only change keeps it, so the leader's epoch in the log does not move.
    """
    if election.leader != leader or election.leader == NO_LEADER or election.new_generation:
        return leader_epoch + 1
    return leader_epoch


def init_leader(assignment: Sequence[int], live: Collection[int]) -> Election:
    """``init_leaders``: the first live replica of AR leads, every live replica of AR
    is in the ISR. With no live replica the partition starts offline with the whole AR as ISR, so
    whichever replica returns first can lead without data loss (there is no data yet)."""
    live_ar = tuple(b for b in assignment if b in live)
    if not live_ar:
        return Election(NO_LEADER, tuple(assignment))
    return Election(live_ar[0], live_ar)


def offline_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    *,
    unclean_allowed: bool,
) -> Election:
    """A broker failure's new leader, with Kafka's safety default.

    A live ISR member is preferred, in assignment order (the preferred replica first). With no
    live ISR member: if ``unclean_allowed``, the first live AR member leads alone (the old rule,
    with data loss); otherwise the partition goes offline (leader -1) and keeps its last ISR, so a
    returning ISR member can take over cleanly.
    """
    live_isr = [b for b in assignment if b in isr and b in live]
    live_isr += [b for b in isr if b in live and b not in live_isr]
    if live_isr:
        return Election(live_isr[0], tuple(live_isr))
    if unclean_allowed:
        for b in assignment:
            if b in live:
                return Election(b, (b,), unclean=True)
    return Election(NO_LEADER, tuple(isr))


def shrink_isr(isr: Sequence[int], dead: Collection[int]) -> tuple[int, ...]:
    """The ISR without dead brokers (the leader stays; every ISR member
    that is alive)."""
    return tuple(b for b in isr if b not in dead)


class PartitionView(Protocol):
    """What the ISR-change judgement reads of the controller's state of a partition (a
    ``PartitionDecision`` fits)."""

    @property
    def leader(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def isr(self) -> tuple[int, ...]: ...

    @property
    def replicas(self) -> tuple[int, ...]: ...

    @property
    def zk_version(self) -> int: ...


@dataclass(frozen=True, slots=True)
class IsrVerdict:
    """The controller's answer to one partition of an AlterIsr request: ``error`` (an
    :class:`~broker_core.wire.errors.ErrorCode` name) refuses it; otherwise ``write`` says whether
    ZooKeeper must change (False: the partition already has that ISR, e.g. a retried request whose
    first answer was lost, and the current state is the answer)."""

    error: str | None = None
    write: bool = False


def judge_isr_change(
    requester: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: Sequence[int],
    current: PartitionView | None,
    live: Collection[int],
) -> IsrVerdict:
    """AlterIsr / KIP-497: may broker ``requester`` replace the partition's ISR with ``new_isr``?

    Checked in Kafka's order, so the most telling error wins: the partition must exist, the
    requester must be its current leader, at the controller's leader epoch (else
    FENCED_LEADER_EPOCH: it missed a LeaderAndIsr). A request for the ISR the partition already
    has succeeds without a write (idempotent, before the version check, as Kafka does). Otherwise
    ``partition_epoch`` must be the znode version the controller holds (INVALID_UPDATE_VERSION: a
    change happened that the leader has not heard of yet), and the new ISR must be a set of
    replicas that includes the leader (INVALID_REQUEST) and adds only live brokers
    (INELIGIBLE_REPLICA: a dead broker cannot be in sync). Dropping a dead member is allowed.
    """
    if current is None:
        return IsrVerdict("UNKNOWN_TOPIC_OR_PARTITION")
    if requester != current.leader:
        return IsrVerdict("NOT_LEADER_OR_FOLLOWER")
    if leader_epoch != current.leader_epoch:
        return IsrVerdict("FENCED_LEADER_EPOCH")
    wanted = set(new_isr)
    if len(wanted) == len(new_isr) and wanted == set(current.isr):
        return IsrVerdict(None, write=False)
    if partition_epoch != current.zk_version:
        return IsrVerdict("INVALID_UPDATE_VERSION")
    if (len(wanted) != len(new_isr) or current.leader not in wanted
            or not wanted <= set(current.replicas)):
        return IsrVerdict("INVALID_REQUEST")
    if any(b not in live for b in wanted - set(current.isr)):
        return IsrVerdict("INELIGIBLE_REPLICA")
    return IsrVerdict(None, write=True)


# -- reassignment, preferred election, controlled shutdown (Kafka's election
# -- strategies Reassign, PreferredReplica and ControlledShutdown) ------------------------------


def reassignment_replicas(
    original: Sequence[int], target: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """While a partition moves from OAR ``original`` to RAR ``target`` its AR is
    OAR ∪ RAR. Returns ``(AR, adding, removing)``.

    Invariant: AR lists OAR first, in its order, then the replicas being added (RAR - OAR), in
    RAR's order; so AR - adding is OAR in its original order (a cancellation, or a controller
    that takes over, restores the preferred replica too). ``adding`` = RAR - OAR and
    ``removing`` = OAR - RAR. The order of RAR itself is applied when the move completes.
    """
    adding = tuple(b for b in target if b not in original)
    removing = tuple(b for b in original if b not in target)
    return tuple(original) + adding, adding, removing


def reassignment_complete(target: Sequence[int], isr: Sequence[int]) -> bool:
    """May the partition switch AR to ``target`` now? Once every RAR member is in the ISR
    (all new replicas have caught up). An empty target never completes."""
    return bool(target) and all(b in isr for b in target)


def reassignment_leader(
    target: Sequence[int], isr: Sequence[int], leader: int, live: Collection[int]
) -> Election | None:
    """Leader and ISR once AR becomes ``target`` (Kafka's ``ReassignPartitionLeaderElection``).

    The ISR keeps only members of ``target``, in ISR order. The leader stays if it is in
    ``target`` and alive (no new epoch is needed); otherwise the first live member of
    ``target`` ∩ ISR in ``target`` order leads. ``None``: no such member, the move must wait.
    """
    new_isr = tuple(b for b in isr if b in target)
    if leader in target and leader in live and leader in new_isr:
        return Election(leader, new_isr)
    for b in target:
        if b in new_isr and b in live:
            return Election(b, new_isr)
    return None


def preferred_leader(
    assignment: Sequence[int], isr: Sequence[int], leader: int, live: Collection[int]
) -> Election | None:
    """Kafka's ``PreferredReplicaPartitionLeaderElection``: the first replica of AR leads if it is
    alive and in the ISR; the ISR is unchanged. ``None`` when it already leads or cannot lead
    (not alive, or out of sync: making it leader could lose committed messages)."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred == leader or preferred not in live or preferred not in isr:
        return None
    return Election(preferred, tuple(isr))


def unclean_leader_on_request(
    assignment: Sequence[int], isr: Sequence[int], leader: int, live: Collection[int]
) -> Election | None:
    """ElectLeaders' UNCLEAN type (KIP-460): a leader for a partition that has none, chosen as
    the controller chooses after a failure with ``unclean.leader.election.enable=true`` (the
    topic's setting is not consulted: the request is the one-time permission).

    ``None`` when the partition's leader is alive (no election is needed) or no replica is
    alive (nobody can lead). Otherwise a live ISR member leads if there is one (a clean
    election); failing that the first live replica of AR leads alone (``unclean``: messages
    committed by the old ISR may be lost).
    """
    if leader != NO_LEADER and leader in live:
        return None
    if not any(b in live for b in assignment):
        return None
    return offline_leader(assignment, isr, live, unclean_allowed=True)


def controlled_shutdown_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    leader: int,
    shutting_down: int,
    live: Collection[int],
) -> Election | None:
    """Kafka's ``ControlledShutdownPartitionLeaderElection`` plus the follower case: the broker
    ``shutting_down`` gives up what it holds of this partition before it stops.

    - it leads: the first live ISR member other than it, in AR order, leads, and the ISR drops
      it; with no such member ``None`` (the partition stays, reported as not moved);
    - it is a follower in the ISR: same leader, ISR without it, unless that would leave the
      ISR empty;
    - otherwise ``None`` (nothing to change).
    """
    rest = tuple(b for b in isr if b != shutting_down)
    if leader == shutting_down:
        for b in assignment:
            if b != shutting_down and b in rest and b in live:
                return Election(b, rest)
        return None
    if shutting_down in isr and rest:
        return Election(leader, rest)
    return None
