"""Snapshot files (broker_core/raft/snapshots.py) with real files under ``tmp_path``: the
encoding round-trips; a torn, corrupt, mis-named or unknown-version file is refused with a
reason; the disk store writes atomically, keeps the newest two, falls back to the previous
snapshot when the newest is damaged (and says so), and removes a crashed save's temp file."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from broker_core.raft.entries import VoterAssignment
from broker_core.raft.snapshots import (
    DiskSnapshotStore,
    InMemorySnapshotStore,
    ISnapshotStore,
    Snapshot,
    SnapshotError,
    SnapshotId,
    decode_snapshot,
    encode_snapshot,
)


def snap(end: int, epoch: int = 3, state: bytes = b"state", target=None) -> Snapshot:
    return Snapshot(SnapshotId(end, epoch), VoterAssignment("c1", (1, 2, 3), target), 0, state)


@given(end=st.integers(1, 2**62), epoch=st.integers(0, 2**31 - 1),
       voters_offset=st.integers(-1, 2**62), state=st.binary(max_size=300),
       current=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5, unique=True),
       target=st.none() | st.lists(st.integers(0, 2**31 - 1), max_size=5, unique=True),
       cluster=st.text(max_size=30))
def test_encoding_round_trips(end, epoch, voters_offset, state, current, target, cluster):
    snapshot = Snapshot(SnapshotId(end, epoch),
                        VoterAssignment(cluster, tuple(current),
                                        None if target is None else tuple(target)),
                        voters_offset, state)
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot


def test_a_flipped_byte_a_torn_file_and_another_version_are_refused():
    data = encode_snapshot(snap(10))
    flipped = bytearray(data)
    flipped[30] ^= 0x01
    with pytest.raises(SnapshotError, match="checksum"):
        decode_snapshot(bytes(flipped), "f")
    for cut in (len(data) - 1, len(data) // 2, 5):
        with pytest.raises(SnapshotError):
            decode_snapshot(data[:cut], "f")
    with pytest.raises(SnapshotError, match="magic"):
        decode_snapshot(b"x" * 40, "f")
    # A future version with a valid checksum is refused by version, not misread.
    body = bytearray(data[:-4])
    struct.pack_into(">h", body, 8, 1)
    with pytest.raises(SnapshotError, match="version 1"):
        decode_snapshot(bytes(body) + struct.pack(">I", crc32c.crc32c(bytes(body))), "f")


@pytest.mark.parametrize("store_kind", ["disk", "memory"])
def test_the_store_keeps_the_newest_two_and_returns_the_newest(tmp_path, store_kind):
    store = DiskSnapshotStore(tmp_path) if store_kind == "disk" else InMemorySnapshotStore()
    assert verifyObject(ISnapshotStore, store)
    assert store.latest() is None
    for end in (5, 9, 12):
        store.save(snap(end, state=b"s%d" % end))
    assert store.ids() == [SnapshotId(9, 3), SnapshotId(12, 3)]
    assert store.latest() == snap(12, state=b"s12")
    size = store.size(SnapshotId(12, 3))
    data = b"".join(store.read_chunk(SnapshotId(12, 3), pos, 7) for pos in range(0, size, 7))
    assert decode_snapshot(data) == snap(12, state=b"s12")
    assert store.size(SnapshotId(5, 3)) is None


def test_a_damaged_newest_file_falls_back_to_the_previous_one_and_is_reported(tmp_path):
    store = DiskSnapshotStore(tmp_path)
    store.save(snap(5, state=b"old"))
    store.save(snap(9, state=b"new"))
    newest = tmp_path / SnapshotId(9, 3).file_name()
    newest.write_bytes(newest.read_bytes()[:-10])  # torn
    reopened = DiskSnapshotStore(tmp_path)
    assert reopened.latest() == snap(5, state=b"old")
    assert len(reopened.problems) == 1 and str(newest) in reopened.problems[0]


def test_a_file_whose_name_does_not_match_its_contents_is_not_used(tmp_path):
    store = DiskSnapshotStore(tmp_path)
    store.save(snap(5))
    (tmp_path / SnapshotId(5, 3).file_name()).rename(tmp_path / SnapshotId(7, 3).file_name())
    reopened = DiskSnapshotStore(tmp_path)
    assert reopened.latest() is None
    assert "not the one its name says" in reopened.problems[0]


def test_a_crashed_saves_temp_file_is_removed_and_never_read(tmp_path):
    store = DiskSnapshotStore(tmp_path)
    store.save(snap(5))
    tmp = tmp_path / (SnapshotId(9, 3).file_name() + ".tmp")
    tmp.write_bytes(encode_snapshot(snap(9))[:20])
    reopened = DiskSnapshotStore(tmp_path)
    assert not tmp.exists()
    assert reopened.latest() == snap(5)
    assert reopened.problems == []
