"""Leader election rules as pure functions (Kafka's ``PartitionLeaderElectionAlgorithms``).

They take the assignment (AR, preferred replica first), the ISR and the live brokers and return a
decision; the controller writes it to ZooKeeper and sends it to the brokers. Table-tested without
ZooKeeper or a reactor.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Election:
    """Outcome of an election: the new leader (-1: offline), the new ISR, and whether a replica
    outside the ISR was chosen (an *unclean* election: committed messages may be lost)."""

    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


def init_leader(assignment: Sequence[int], live: Collection[int]) -> Election:
    """Seed 000 B ``init_leaders`` 1.1: the first live replica of AR leads, every live replica of AR
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
    """Seed 000 A step 3.2, with Kafka's safety default.

    A live ISR member is preferred, in assignment order (the preferred replica first). With no
    live ISR member: if ``unclean_allowed``, the first live AR member leads alone (the seed's rule,
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
    """The ISR without dead brokers (the leader stays; seed 000 A: "all brokers in the current ISR
    that are alive")."""
    return tuple(b for b in isr if b not in dead)
