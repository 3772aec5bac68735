"""``meta.properties``: which broker and which cluster a log directory belongs to.

Kafka writes this file into every log directory and refuses to start on one that belongs to
another broker or another cluster; Sluice does the same, with the same format::

    #Written by the broker; do not edit.
    version=0
    broker.id=1
    cluster.id=p9BbrGXaR0uBs1i8WD4vUA

Why: a log directory holds partitions whose offsets, leader epochs and high watermarks only
mean something in the cluster that wrote them. Started against another cluster (a ZooKeeper
ensemble that was wiped, a new metadata quorum, another team's brokers) the broker would
serve those partitions as if they were the new cluster's, and a topic created later under
the same name would find somebody else's records at its offsets. A second broker id on the
same directory is the same mistake inside one cluster.

Invariants: the file is written atomically (:func:`write_atomically`), only by
:func:`check_and_claim`, and only after both ids were checked; a directory whose file names
another broker or cluster is never written to here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker_core.log.checkpoints import write_atomically

FILE_NAME = "meta.properties"
VERSION = 0


class MetaPropertiesError(Exception):
    """The log directory belongs elsewhere, or its ``meta.properties`` cannot be read; the
    message names the file, what it says and what to do."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    broker_id: int
    cluster_id: str | None  # None: written by a broker that did not know its cluster yet

    def to_text(self) -> str:
        lines = ["#Written by the broker; do not edit.", f"version={VERSION}",
                 f"broker.id={self.broker_id}"]
        if self.cluster_id is not None:
            lines.append(f"cluster.id={self.cluster_id}")
        return "\n".join(lines) + "\n"


def parse(text: str, where: str) -> MetaProperties:
    """Parse the file's text (Java properties: ``key=value`` lines, ``#`` comments)."""
    values: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise MetaPropertiesError(f"{where}:{n}: expected key=value, got {raw!r}")
        values[key.strip()] = value.strip()
    version = values.get("version")
    if version != str(VERSION):
        raise MetaPropertiesError(f"{where}: unsupported version {version!r} "
                                  f"(this broker writes version {VERSION})")
    broker_id = values.get("broker.id", "")
    digits = broker_id.removeprefix("-")
    if not (digits.isdigit() and digits.isascii()):
        raise MetaPropertiesError(f"{where}: broker.id {broker_id!r} is not an integer")
    return MetaProperties(int(broker_id), values.get("cluster.id") or None)


def read(log_dir: Path) -> MetaProperties | None:
    """The directory's ``meta.properties``, or ``None`` when it has none (a new directory, or
    one written before brokers kept the file)."""
    path = Path(log_dir) / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise MetaPropertiesError(f"{path}: cannot be read: {e}") from None
    return parse(text, str(path))


def check_and_claim(log_dir: Path, broker_id: int, cluster_id: str | None) -> MetaProperties:
    """Check that ``log_dir`` is this broker's in this cluster, then record it as such.

    ``cluster_id`` ``None`` checks the broker id only (the cluster is not known yet; call
    again once it is). Raises :class:`MetaPropertiesError` on a mismatch; returns what the file
    says now."""
    path = Path(log_dir) / FILE_NAME
    found = read(log_dir)
    if found is not None and found.broker_id != broker_id:
        raise MetaPropertiesError(
            f"{path} says this log directory belongs to broker {found.broker_id}, but this is "
            f"broker {broker_id}: give each broker its own log.dirs (or set broker.id="
            f"{found.broker_id})")
    if found is not None and cluster_id is not None and found.cluster_id is not None \
            and found.cluster_id != cluster_id:
        raise MetaPropertiesError(
            f"{path} says this log directory belongs to cluster {found.cluster_id}, but the "
            f"broker is joining cluster {cluster_id}; its partitions would be served as this "
            "cluster's. Point log.dirs at a new directory (or move this one away) to join "
            "this cluster, or connect the broker to the cluster that owns it")
    wanted = MetaProperties(broker_id, cluster_id if cluster_id is not None
                            else (found.cluster_id if found is not None else None))
    if found != wanted:
        write_atomically(path, wanted.to_text())
    return wanted
