"""Protocol selection of a classic group: which protocol names every member supports, and the
one the group uses for a generation (Kafka's ``supportsProtocols`` and ``selectProtocol``).

Invariant: ``counts[name]`` is the number of the group's members listing ``name``; the group
tells this object of every member added, removed or rejoining with other protocols.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from coordinator.classic.member import ClassicMember, Protocols


class ProtocolSupport:
    """How many members support each protocol name; see the module docstring."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, member: ClassicMember) -> None:
        self.counts.update(set(member.protocol_names()))

    def remove(self, member: ClassicMember) -> None:
        self.counts.subtract(set(member.protocol_names()))
        self.counts = +self.counts  # drop zero counts

    def replace(self, member: ClassicMember, protocols: Protocols) -> None:
        """``member`` now lists ``protocols``."""
        self.counts.subtract(set(member.protocol_names()))
        member.protocols = protocols
        self.counts.update(set(member.protocol_names()))
        self.counts = +self.counts  # drop zero counts

    def all_support_one_of(self, names: Sequence[str], member_count: int) -> bool:
        return any(self.counts[n] == member_count for n in set(names))

    def candidates(self, member_count: int) -> set[str]:
        return {n for n, c in self.counts.items() if c == member_count}

    def select(self, members: Mapping[str, ClassicMember], leader_id: str | None) -> str:
        """The protocol most members prefer among those all support (ties: the first in the
        leader's preference order, so the choice is deterministic)."""
        candidates = self.candidates(len(members))
        votes = Counter(m.vote(candidates) for m in members.values())
        best = max(votes.values())
        leader = members.get(leader_id or "")
        order = leader.protocol_names() if leader is not None else sorted(votes)
        return next(n for n in order if votes.get(n) == best)
