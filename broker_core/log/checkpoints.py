"""Checkpoint files, in Kafka's text format, always replaced atomically.

Format::

    0                     <- version
    2                     <- number of entries
    topic-a 0 1234        <- one entry per line
    topic-a 1 99

Written to ``<name>.tmp``, fsynced, renamed over the old file and the directory fsynced, so a crash
leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

VERSION = 0


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def format_lines(lines: Iterable[str]) -> str:
    lines = list(lines)
    return "\n".join([str(VERSION), str(len(lines)), *lines]) + "\n"


def parse_lines(text: str, what: str) -> list[str]:
    """The entry lines of a checkpoint; raises ValueError on a wrong version or count."""
    rows = text.splitlines()
    if len(rows) < 2:
        raise ValueError(f"{what}: truncated checkpoint")
    if rows[0].strip() != str(VERSION):
        raise ValueError(f"{what}: unsupported checkpoint version {rows[0]!r}")
    count = int(rows[1])
    entries = [r for r in rows[2:] if r.strip()]
    if len(entries) != count:
        raise ValueError(f"{what}: expected {count} entries, found {len(entries)}")
    return entries


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    write_atomically(path, format_lines(f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """Offsets by partition; a missing file is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    out = {}
    for line in parse_lines(text, str(path)):
        topic, part, offset = line.rsplit(" ", 2)
        out[(topic, int(part))] = int(offset)
    return out
