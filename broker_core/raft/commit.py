"""Raft's commit rule as a pure function."""

from __future__ import annotations

from collections.abc import Iterable


def majority_size(voter_count: int) -> int:
    """How many voters make a majority."""
    return voter_count // 2 + 1


def replicated_on_majority(voter_end_offsets: Iterable[int]) -> int:
    """The largest offset ``o`` such that a majority of voters hold every entry below ``o``.

    ``voter_end_offsets`` has one value per voter: how far that voter is known to hold the
    leader's log (0 when unknown)."""
    ends = sorted(voter_end_offsets, reverse=True)
    if not ends:
        raise ValueError("no voters")
    return ends[majority_size(len(ends)) - 1]


def next_high_watermark(current: int, voter_end_offsets: Iterable[int],
                        epoch_start_offset: int) -> int:
    """The leader's high watermark after counting ``voter_end_offsets``.

    Raft's commit rule: the high watermark only moves to an offset replicated on a majority
    *and* above ``epoch_start_offset`` (the offset of the leader's first entry in its own
    epoch). Counting replicas of older epochs' entries alone is unsafe (Raft paper, figure 8):
    such an entry can still be overwritten by a leader that never had it. Never decreases.
    """
    candidate = replicated_on_majority(voter_end_offsets)
    if candidate > epoch_start_offset and candidate > current:
        return candidate
    return current
