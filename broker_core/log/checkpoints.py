"""Checkpoint files in Kafka's text format, always replaced atomically.

Format::

    0                     <- version
    2                     <- number of entries
    topic-a 0 1234        <- one entry per line
    topic-a 1 99

The log directory's ``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint`` and
``log-start-offset-checkpoint`` use ``topic partition offset`` entries; a partition's
``leader-epoch-checkpoint`` uses ``epoch start_offset`` entries.

Every write goes to ``<name>.tmp``, is fsynced, renamed over the old file, and the directory is
fsynced, so a crash leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

VERSION = 0
TMP_SUFFIX = ".tmp"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be parsed; the message names the file and the problem."""


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions inside ``directory`` durable."""
    _fsync_path(directory)


def write_atomically(path: Path, text: str, *, sync: bool = True) -> None:
    """Replace ``path`` with ``text`` through a temp file and a rename, so a reader (or a crash)
    sees the old content or the new, never a mix. With ``sync`` the data and the rename are
    fsynced before returning; without, they reach the disk with the next :func:`fsync_file`
    of the path (or whenever the OS writes them back)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def fsync_file(path: Path) -> None:
    """fsync a file written by ``write_atomically(sync=False)`` and the rename that placed it."""
    _fsync_path(path)
    fsync_dir(path.parent)


def format_lines(lines: Iterable[str]) -> str:
    entries = list(lines)
    return "\n".join([str(VERSION), str(len(entries)), *entries]) + "\n"


def parse_lines(text: str, what: str) -> list[str]:
    """The entry lines of a checkpoint; raises :class:`CheckpointError` on a wrong version, a bad
    count or a count that does not match the entries."""
    rows = text.splitlines()
    if len(rows) < 2:
        raise CheckpointError(f"{what}: truncated checkpoint ({len(rows)} lines)")
    if rows[0].strip() != str(VERSION):
        raise CheckpointError(f"{what}: unsupported checkpoint version {rows[0]!r}")
    try:
        count = int(rows[1])
    except ValueError:
        raise CheckpointError(f"{what}: bad entry count {rows[1]!r}") from None
    entries = [r for r in rows[2:] if r.strip()]
    if len(entries) != count:
        raise CheckpointError(f"{what}: header says {count} entries, found {len(entries)}")
    return entries


def parse_ints(line: str, n: int, what: str) -> list[int]:
    parts = line.split()
    try:
        if len(parts) != n:
            raise ValueError
        return [int(p) for p in parts]
    except ValueError:
        raise CheckpointError(f"{what}: bad entry {line!r}") from None


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write ``{(topic, partition): offset}`` atomically."""
    write_atomically(path, format_lines(f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """Offsets by partition; a missing file is empty. Raises :class:`CheckpointError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not a text file") from None
    out: dict[tuple[str, int], int] = {}
    for line in parse_lines(text, str(path)):
        parts = line.split()
        if len(parts) != 3:
            raise CheckpointError(f"{path}: bad entry {line!r}")
        partition, offset = parse_ints(" ".join(parts[1:]), 2, str(path))
        out[(parts[0], partition)] = offset
    return out


class OffsetsFile:
    """One offsets checkpoint file, rewritten only when what it would say changed.

    Invariant: ``last_written`` is what the file holds when this object wrote it last (``None``
    before the first write, so the first call always writes). A broker checkpoints every few
    seconds; with 10,000 idle partitions, formatting, writing and fsyncing three unchanged
    files each time cost the IO thread (and, for the formatting, the GIL) for nothing.
    Not thread-safe: the caller serializes writes (the log manager's checkpoint lock).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last_written: dict[tuple[str, int], int] | None = None

    def write(self, offsets: Mapping[tuple[str, int], int]) -> bool:
        """Write ``offsets`` atomically unless the file already says exactly that; True if
        written."""
        snapshot = dict(offsets)
        if snapshot == self.last_written:
            return False
        write_offsets(self.path, snapshot)
        self.last_written = snapshot
        return True
