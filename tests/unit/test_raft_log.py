"""The in-memory Raft log: append rules, truncation and the leader-epoch question
("where does epoch E end?") that the diverging-epoch check relies on."""

from __future__ import annotations

import pytest
from zope.interface.verify import verifyObject

from broker_core.raft import InMemoryRaftLog, IRaftLog, LogEntry, LogInvariantError


def log_with_epochs(*epochs: int) -> InMemoryRaftLog:
    """A log whose entry at offset i has epoch ``epochs[i]``."""
    return InMemoryRaftLog([LogEntry(i, e, b"x%d" % i) for i, e in enumerate(epochs)])


def test_in_memory_log_provides_the_interface():
    verifyObject(IRaftLog, InMemoryRaftLog())


def test_empty_log_ends_at_zero_with_epoch_zero():
    log = InMemoryRaftLog()
    assert (log.end_offset(), log.last_epoch(), log.epoch_at(-1)) == (0, 0, 0)
    assert log.end_offset_for_epoch(5) == (0, 0)


def test_append_requires_dense_offsets_from_the_end():
    log = log_with_epochs(1, 1)
    with pytest.raises(LogInvariantError, match="offset 3 appended where offset 2"):
        log.append([LogEntry(3, 1, b"gap")])
    with pytest.raises(LogInvariantError):
        log.append([LogEntry(1, 1, b"overlap")])
    assert log.end_offset() == 2


def test_append_refuses_decreasing_or_zero_epochs_and_appends_nothing():
    log = log_with_epochs(1, 3)
    with pytest.raises(LogInvariantError, match="epoch 2 after epoch 3"):
        log.append([LogEntry(2, 3, b"ok"), LogEntry(3, 2, b"older")])
    assert log.end_offset() == 2  # all or nothing
    with pytest.raises(LogInvariantError):
        InMemoryRaftLog([LogEntry(0, 0, b"epoch zero has no leader")])


@pytest.mark.parametrize("epoch, expected", [
    (0, (0, 0)),  # below every epoch: nothing in common
    (1, (1, 3)),  # epoch 1 ends where epoch 3 starts
    (2, (1, 3)),  # unknown epoch: the largest one below it and where that one ends
    (3, (3, 5)),
    (4, (3, 5)),
    (5, (5, 7)),  # the latest epoch ends at the log end
    (9, (5, 7)),
])
def test_end_offset_for_epoch(epoch, expected):
    log = log_with_epochs(1, 1, 1, 3, 3, 5, 5)
    assert log.end_offset_for_epoch(epoch) == expected


def test_truncate_drops_the_tail_and_its_epochs():
    log = log_with_epochs(1, 1, 2, 2, 3)
    log.truncate_to(3)
    assert [e.offset for e in log.entries] == [0, 1, 2]
    assert log.last_epoch() == 2
    assert log.end_offset_for_epoch(3) == (2, 3)
    log.truncate_to(2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    log.truncate_to(10)  # past the end: nothing to do
    assert log.end_offset() == 2


def test_read_returns_at_most_max_entries_from_an_offset():
    log = log_with_epochs(1, 1, 1, 1)
    assert [e.offset for e in log.read(1, 2)] == [1, 2]
    assert log.read(4, 10) == ()
