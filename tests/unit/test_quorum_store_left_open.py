"""A quorum-mode store's session that its stop could not close (no quorum leader: the voters
stopped together) is recorded, and the next start of the store closes it itself, so a restarted
broker finds its ``/brokers/ids/[id]`` free at once instead of a whole session timeout later.
On a real one-voter quorum (``tests/support/local_quorum.py``) and a ``task.Clock``."""

from __future__ import annotations

import pytest
from twisted.internet import defer, task

from broker_core.metadata import ConnectionLost
from broker_core.raft.metadata_commands import CloseSession, ExpireSession, decode
from broker_core.raft.metadata_store import QuorumMetadataStore
from tests.support.local_quorum import LocalQuorum, run

#: Long enough that no session expires during a test: a session that goes went by a close.
TIMEOUT = 60.0


@pytest.fixture
def clock():
    return task.Clock()


@pytest.fixture
def quorum(clock):
    q = LocalQuorum(clock)
    yield q
    q.stop()


def started(clock, quorum, record) -> QuorumMetadataStore:
    store = QuorumMetadataStore(quorum, reactor=clock, session_timeout=TIMEOUT,
                                left_open_record=record)
    run(clock, store.start())
    return store


def stopped_without_a_leader(clock, quorum, record) -> int:
    """A store registers an ephemeral node, then stops while the quorum has no leader (as the
    last broker of a cluster stopping together finds it); returns its session id."""
    store = started(clock, quorum, record)
    run(clock, store.create("/brokers/ids/1", b"", ephemeral=True, makepath=True))
    sid = store.session_id
    quorum.resign()  # no leader until the node stands again, 1.5 s or more later
    run(clock, store.stop())
    return sid


def test_a_stop_that_cannot_close_its_session_records_it_and_the_next_start_closes_it(
        clock, quorum, tmp_path):
    record = tmp_path / "quorum" / "metadata-session-left-open"
    old = stopped_without_a_leader(clock, quorum, record)
    stopped_at = clock.seconds()
    assert old in quorum.tree.sessions  # still open: the close found no leader
    assert record.read_text() == f"{old}\n"

    restarted = started(clock, quorum, record)  # waits for the next election
    assert old not in quorum.tree.sessions and restarted.session_id in quorum.tree.sessions
    assert quorum.tree.exists("/brokers/ids/1") is None  # the registration can be made now
    assert clock.seconds() - stopped_at < TIMEOUT / 10  # closed, not expired
    assert not record.exists()
    run(clock, restarted.create("/brokers/ids/1", b"", ephemeral=True))


def test_a_stop_that_closes_its_session_records_nothing(clock, quorum, tmp_path):
    record = tmp_path / "left-open"
    store = started(clock, quorum, record)
    sid = store.session_id
    run(clock, store.stop())
    assert sid not in quorum.tree.sessions and not record.exists()


def test_a_recorded_session_that_ended_meanwhile_is_forgotten(clock, quorum, tmp_path):
    record = tmp_path / "left-open"
    old = stopped_without_a_leader(clock, quorum, record)
    other = started(clock, quorum, None)
    run(clock, other._submit(ExpireSession(old)))  # as the leader would after its timeout
    assert old not in quorum.tree.sessions
    sessions_before = set(quorum.tree.sessions)
    restarted = started(clock, quorum, record)
    assert set(quorum.tree.sessions) == sessions_before | {restarted.session_id}
    assert not record.exists()


@pytest.mark.parametrize("content", [b"", b"x\n", b"-3\n", b"0\n", b"\xff7\n", b"9" * 5000])
def test_a_damaged_record_is_removed_and_closes_nothing(clock, quorum, tmp_path, content):
    other = started(clock, quorum, None)
    record = tmp_path / "left-open"
    record.write_bytes(content)
    restarted = started(clock, quorum, record)
    assert set(quorum.tree.sessions) == {other.session_id, restarted.session_id}
    assert not record.exists()



class _ClosesLost:
    """The real quorum, except that a close_session never gets through (its leader is gone
    each time): a start that cannot close the recorded session."""

    def __init__(self, quorum: LocalQuorum) -> None:
        self._quorum = quorum

    def __getattr__(self, name: str):
        return getattr(self._quorum, name)

    def submit(self, command: bytes):
        if isinstance(decode(command).command, CloseSession):
            return defer.fail(ConnectionLost("no leader"))
        return self._quorum.submit(command)


def test_a_start_that_cannot_close_the_recorded_session_keeps_the_record(
        clock, quorum, tmp_path):
    record = tmp_path / "left-open"
    old = stopped_without_a_leader(clock, quorum, record)
    store = QuorumMetadataStore(_ClosesLost(quorum), reactor=clock, session_timeout=TIMEOUT,
                                left_open_record=record)
    run(clock, store.start())  # the start itself succeeds
    assert store.session_id in quorum.tree.sessions and old in quorum.tree.sessions
    assert record.read_text() == f"{old}\n"  # the next start tries again
