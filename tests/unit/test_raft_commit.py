"""Raft's commit rule: majority replication of an entry of the leader's own epoch."""

from __future__ import annotations

import pytest

from broker_core.raft.commit import majority_size, next_high_watermark, replicated_on_majority


@pytest.mark.parametrize("voters, majority", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_majority_size(voters, majority):
    assert majority_size(voters) == majority


@pytest.mark.parametrize("ends, expected", [
    ([7], 7),
    ([7, 3], 3),  # two voters: both must hold it
    ([9, 3, 5], 5),
    ([9, 0, 0], 0),  # only the leader has anything
    ([10, 8, 8, 2, 1], 8),
])
def test_replicated_on_majority(ends, expected):
    assert replicated_on_majority(ends) == expected


def test_entries_of_older_epochs_alone_never_commit():
    # Raft paper figure 8: the leader's epoch starts at offset 5 (its LeaderChange entry);
    # offsets below it are replicated on a majority but may still be overwritten.
    assert next_high_watermark(current=2, voter_end_offsets=[6, 5, 5], epoch_start_offset=5) == 2
    # Once the leader's own first entry is on a majority, everything below commits with it.
    assert next_high_watermark(current=2, voter_end_offsets=[6, 6, 5], epoch_start_offset=5) == 6


def test_the_high_watermark_never_decreases():
    assert next_high_watermark(current=8, voter_end_offsets=[9, 7, 7], epoch_start_offset=3) == 8
