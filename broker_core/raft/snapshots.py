"""Snapshots of the replicated state machine (KIP-630 style): :class:`Snapshot`, its file
format, and the stores that keep them (:class:`DiskSnapshotStore`, :class:`InMemorySnapshotStore`).

A snapshot is the state machine's state after applying every entry below ``end_offset`` (all
committed), identified like Kafka's by :class:`SnapshotId` ``(end_offset, epoch)``, where
``epoch`` is the epoch of the entry at ``end_offset - 1``. Its header carries the voter
assignment in force at ``end_offset`` (KRaft keeps a VotersRecord in the snapshot for the same
reason): once the log prefix below the snapshot is deleted, the snapshot is the only place that
still knows who votes.

File format (big-endian), one file per snapshot, named ``<end offset, 20 digits>-<epoch, 10
digits>.checkpoint`` as Kafka names its snapshot files::

    magic          8 bytes  b"SLUICESN"
    version        int16    0
    end_offset     int64
    epoch          int32
    voters_offset  int64    offset of the VoterAssignment the voters come from (-1: bootstrap)
    cluster_id     int16 length + UTF-8
    current voters int32 count + int32 ids
    target voters  int32 count (-1: null) + int32 ids
    state          int64 length + bytes (the state machine's own encoding)
    crc            uint32   CRC-32C of every byte before it

Invariants: a file either decodes completely, with a matching CRC, a known version and a name
that matches its id, or it is reported (:class:`SnapshotError`) and never used; files are
written atomically (temp file, fsync, rename, fsync of the directory), so a crash leaves the
old set of snapshots or the new one, plus at most a temp file that the next open removes.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c
from zope.interface import Interface, implementer

from broker_core.log.checkpoints import TMP_SUFFIX, fsync_dir
from broker_core.raft.entries import VoterAssignment

MAGIC = b"SLUICESN"
VERSION = 0
SUFFIX = ".checkpoint"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
#: Snapshots kept on disk: the newest, and one to fall back on if the newest is damaged.
KEEP = 2


class SnapshotError(ValueError):
    """A snapshot that cannot be trusted (torn, corrupt, wrong version or name); says why."""


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """``end_offset``: the first offset the snapshot does not cover; ``epoch``: the epoch of
    the entry at ``end_offset - 1``. Ordered by offset, then epoch."""

    end_offset: int
    epoch: int

    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state machine's ``state`` after every entry below ``snapshot_id.end_offset``, with
    the voter assignment in force there (``voters``, from the entry at ``voters_offset``, -1
    for the bootstrap voters)."""

    snapshot_id: SnapshotId
    voters: VoterAssignment
    voters_offset: int
    state: bytes

    @property
    def end_offset(self) -> int:
        return self.snapshot_id.end_offset

    @property
    def epoch(self) -> int:
        return self.snapshot_id.epoch


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """The file's bytes (see the module docstring)."""
    sid, voters = snapshot.snapshot_id, snapshot.voters
    cluster = voters.cluster_id.encode("utf-8")
    target = voters.target_voters
    parts = [MAGIC, struct.pack(">hqiq", VERSION, sid.end_offset, sid.epoch,
                                snapshot.voters_offset),
             struct.pack(">h", len(cluster)), cluster,
             struct.pack(f">i{len(voters.current_voters)}i", len(voters.current_voters),
                         *voters.current_voters),
             (struct.pack(">i", -1) if target is None
              else struct.pack(f">i{len(target)}i", len(target), *target)),
             struct.pack(">q", len(snapshot.state)), snapshot.state]
    body = b"".join(parts)
    return body + struct.pack(">I", crc32c.crc32c(body))


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SnapshotError(f"{self.what}: truncated snapshot ({len(self.data)} bytes)")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> tuple:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def ints(self, count: int) -> tuple[int, ...]:
        return self.unpack(f">{count}i") if count else ()


def decode_snapshot(data: bytes, what: str = "snapshot") -> Snapshot:
    """The snapshot in ``data``; :class:`SnapshotError` naming ``what`` and the problem for a
    torn, corrupt or unknown one. The CRC is checked first, so nothing of a damaged file is
    believed."""
    data = bytes(data)
    if len(data) < len(MAGIC) + 4 or data[:len(MAGIC)] != MAGIC:
        raise SnapshotError(f"{what}: not a snapshot file (bad magic or too short)")
    (crc,) = struct.unpack(">I", data[-4:])
    if crc32c.crc32c(data[:-4]) != crc:
        raise SnapshotError(f"{what}: checksum mismatch (torn or corrupt file)")
    r = _Reader(data[:-4], what)
    r.take(len(MAGIC))
    version, end_offset, epoch, voters_offset = r.unpack(">hqiq")
    if version != VERSION:
        raise SnapshotError(f"{what}: unsupported snapshot version {version}")
    if end_offset < 1 or epoch < 0:
        raise SnapshotError(f"{what}: bad snapshot id ({end_offset}, {epoch})")
    (n,) = r.unpack(">h")
    try:
        cluster_id = r.take(n).decode("utf-8")
    except UnicodeDecodeError:
        raise SnapshotError(f"{what}: cluster id is not UTF-8") from None
    (n,) = r.unpack(">i")
    current = r.ints(n)
    (n,) = r.unpack(">i")
    target = None if n == -1 else r.ints(n)
    (n,) = r.unpack(">q")
    state = r.take(n)
    if r.pos != len(r.data):
        raise SnapshotError(f"{what}: {len(r.data) - r.pos} unexpected bytes after the state")
    try:
        voters = VoterAssignment(cluster_id, current, target)
    except ValueError as e:
        raise SnapshotError(f"{what}: bad voter assignment ({e})") from None
    return Snapshot(SnapshotId(end_offset, epoch), voters, voters_offset, state)


class ISnapshotStore(Interface):
    """Where a node keeps its snapshots. Every method is synchronous (the disk store blocks
    on fsync in :meth:`save`), like :class:`~broker_core.raft.log.IRaftLog`'s."""

    def latest():
        """The newest valid :class:`Snapshot`, or ``None``; damaged ones are skipped (and
        reported in ``problems``)."""

    def save(snapshot):
        """Keep ``snapshot`` durably (atomically); older ones beyond the newest two go."""

    def size(snapshot_id):
        """The encoded size of snapshot ``snapshot_id`` in bytes, or ``None`` if not kept."""

    def read_chunk(snapshot_id, position, max_bytes):
        """Up to ``max_bytes`` of the encoded snapshot from ``position`` (FetchSnapshot)."""


@implementer(ISnapshotStore)
class InMemorySnapshotStore:
    """:class:`ISnapshotStore` in a dict of encoded snapshots (simulation and unit tests; it
    goes through the file encoding so that they exercise it)."""

    def __init__(self) -> None:
        self._files: dict[SnapshotId, bytes] = {}
        self.problems: list[str] = []
        self.saves = 0

    def latest(self) -> Snapshot | None:
        for sid in sorted(self._files, reverse=True):
            try:
                return decode_snapshot(self._files[sid], sid.file_name())
            except SnapshotError as e:
                self.problems.append(str(e))
        return None

    def save(self, snapshot: Snapshot) -> None:
        self._files[snapshot.snapshot_id] = encode_snapshot(snapshot)
        self.saves += 1
        for old in sorted(self._files, reverse=True)[KEEP:]:
            del self._files[old]

    def ids(self) -> list[SnapshotId]:
        return sorted(self._files)

    def size(self, snapshot_id: SnapshotId) -> int | None:
        data = self._files.get(snapshot_id)
        return None if data is None else len(data)

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        return self._files[snapshot_id][position:position + max_bytes]


@implementer(ISnapshotStore)
class DiskSnapshotStore:
    """:class:`ISnapshotStore` on files in ``directory`` (the metadata log's partition
    directory, where Kafka keeps its ``.checkpoint`` snapshots). Temp files left by a crash are
    removed when the store is opened. ``problems`` lists every damaged file met, with why."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.problems: list[str] = []
        self._latest: Snapshot | None = None
        for p in self.directory.iterdir():
            if p.name.endswith(SUFFIX + TMP_SUFFIX):
                p.unlink()  # a save that crashed before its rename

    def ids(self) -> list[SnapshotId]:
        found = []
        for p in self.directory.iterdir():
            m = _NAME.match(p.name)
            if m:
                found.append(SnapshotId(int(m.group(1)), int(m.group(2))))
        return sorted(found)

    def _path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / snapshot_id.file_name()

    def latest(self) -> Snapshot | None:
        if self._latest is not None:
            return self._latest
        for sid in reversed(self.ids()):
            path = self._path(sid)
            try:
                snapshot = decode_snapshot(path.read_bytes(), str(path))
            except (SnapshotError, OSError) as e:
                self.problems.append(str(e))
                continue
            if snapshot.snapshot_id != sid:
                self.problems.append(f"{path}: holds snapshot {snapshot.snapshot_id}, not the "
                                     "one its name says")
                continue
            self._latest = snapshot
            return snapshot
        return None

    def save(self, snapshot: Snapshot) -> None:
        """Write ``snapshot`` atomically and durably (BLOCKING: two fsyncs), then delete all
        but the newest :data:`KEEP` snapshots."""
        path = self._path(snapshot.snapshot_id)
        tmp = path.with_name(path.name + TMP_SUFFIX)
        with open(tmp, "wb") as f:
            f.write(encode_snapshot(snapshot))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.directory)
        if self._latest is None or snapshot.snapshot_id > self._latest.snapshot_id:
            self._latest = snapshot
        doomed = [s for s in reversed(self.ids())][KEEP:]
        for sid in doomed:
            self._path(sid).unlink(missing_ok=True)
        if doomed:
            fsync_dir(self.directory)

    def size(self, snapshot_id: SnapshotId) -> int | None:
        try:
            return self._path(snapshot_id).stat().st_size
        except FileNotFoundError:
            return None

    def read_chunk(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        with open(self._path(snapshot_id), "rb") as f:
            f.seek(position)
            return f.read(max_bytes)
