"""Recovery on open: what :meth:`Log.open <broker_core.log.log.Log.open>` does to the files it
finds before the log serves anything, and the :class:`RecoveryReport` saying what it did.

Steps, in order (the log runs them from ``Log._load``):

1. :func:`remove_leftovers`: temp files and index files without a segment go;
2. :func:`recover_segments`: each segment is loaded (trusting its indexes) or re-validated
   batch by batch; at the first segment cut short, or followed by a hole in the offsets, the
   log ends: every later segment is deleted, so the offsets never have a hole;
3. :func:`repair_epochs`: leader-epoch entries past the new end are dropped, and epoch starts
   the file lacks are filled in from the batches (the whole file when it was rebuilt).

Pure over the segments and the epoch file handed in: no clock (``now_ms`` is given), no
Twisted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from broker_core.log.checkpoints import TMP_SUFFIX
from broker_core.log.leader_epoch import LeaderEpochFile
from broker_core.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, Segment


@dataclass
class RecoveryReport:
    """What :meth:`Log.open <broker_core.log.log.Log.open>` found and repaired, for the broker
    to log and count."""

    clean_shutdown: bool = True
    recovery_point: int = 0
    segments_checked: int = 0
    batches_checked: int = 0
    bytes_truncated: int = 0
    segments_deleted: int = 0
    indexes_rebuilt: int = 0
    epoch_entries_dropped: int = 0
    epoch_entries_added: int = 0
    epoch_file_rebuilt: bool = False
    #: Producer-state snapshots that failed their checks (ignored and deleted), and why.
    snapshots_ignored: int = 0
    snapshot_problem: str = ""
    #: Batches replayed into the producer state (after the snapshot used, if any).
    producer_batches_replayed: int = 0
    #: Where the log now ends when recovery cut it (-1 if it cut nothing), and why.
    truncated_to: int = -1
    reason: str = ""

    _NOT_REPAIRS = ("clean_shutdown", "recovery_point", "segments_checked", "batches_checked",
                    "truncated_to", "reason", "snapshot_problem", "producer_batches_replayed")

    @property
    def changed(self) -> bool:
        """True if opening the log repaired anything."""
        return any(getattr(self, f.name) for f in fields(self)
                   if f.name not in self._NOT_REPAIRS)

    def describe(self) -> str:
        """One line for the broker log: what was checked, what was cut and why."""
        how = ("after a clean shutdown" if self.clean_shutdown
               else f"after an unclean shutdown, from recovery point {self.recovery_point}")
        parts = [f"{how}: checked {self.segments_checked} segment(s), "
                 f"{self.batches_checked} batches"]
        if self.truncated_to >= 0:
            parts.append(f"truncated the log to offset {self.truncated_to} ({self.reason}): "
                         f"{self.bytes_truncated} bytes, {self.segments_deleted} later "
                         "segment(s) deleted")
        elif self.bytes_truncated:
            parts.append(f"truncated {self.bytes_truncated} bytes")
        parts.append(f"dropped {self.epoch_entries_dropped} leader-epoch entries")
        if self.epoch_entries_added:
            parts.append(f"added {self.epoch_entries_added} from the batches")
        if self.epoch_file_rebuilt:
            parts.append("rebuilt the leader-epoch file")
        if self.indexes_rebuilt:
            parts.append(f"rebuilt {self.indexes_rebuilt} index(es)")
        if self.snapshots_ignored:
            parts.append(f"ignored {self.snapshots_ignored} producer-state snapshot(s) "
                         f"({self.snapshot_problem})")
        return "; ".join(parts)


def remove_leftovers(directory: Path) -> list[int]:
    """Delete temp files and index files without a segment; return the segment bases."""
    bases = []
    for p in directory.iterdir():
        if p.name.endswith(TMP_SUFFIX):
            p.unlink()
        elif p.suffix == LOG_SUFFIX and p.stem.isdigit() and p.stem.isascii():
            bases.append(int(p.stem))
    for p in directory.iterdir():
        if p.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and p.stem.isdigit() and \
                p.stem.isascii() and \
                int(p.stem) not in bases:
            p.unlink()
    return sorted(bases)


def recover_segments(segments: list[Segment], *, now_ms: int, index_interval_bytes: int,
                     recovery_point: int, clean_shutdown: bool,
                     report: RecoveryReport) -> tuple[list[tuple[int, int]], bool]:
    """Load or re-validate ``segments`` (not empty, in offset order), as :meth:`Log.open
    <broker_core.log.log.Log.open>` describes; cuts the list in place where the log ends.
    Returns the ``(epoch, start offset)`` pairs seen in the batches re-validated, and whether
    segment files were deleted (the directory needs an fsync)."""
    dir_dirty = False
    epoch_starts: list[tuple[int, int]] = []
    report.recovery_point = recovery_point
    prev_epoch = -1
    for i, seg in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        validate = not clean_shutdown and (following is None or following > recovery_point)
        error = None
        if validate or not seg.load(now_ms, index_interval_bytes, verify_tail=following is None):
            found = seg.recover(now_ms, index_interval_bytes, min_epoch=prev_epoch)
            report.batches_checked += found.batches_checked
            report.bytes_truncated += found.bytes_truncated
            report.segments_checked += 1
            epoch_starts += found.epoch_starts
            if not validate:
                report.indexes_rebuilt += 1  # it did not check out on the trusted path
            if found.bytes_truncated:
                error = found.error
        prev_epoch = max(prev_epoch, seg.last_epoch)
        if error is None and following is not None and following != seg.next_offset:
            error = (f"the next segment starts at offset {following}, not at "
                     f"{seg.next_offset}")
        if error is not None:
            report.truncated_to = seg.next_offset
            report.reason = f"{seg.log_path.name}: {error}"
        if error is not None and following is not None:
            # The log ends inside (or right after) this segment: later segments lie past
            # an invalid batch or a hole in the offsets, and are never served.
            for later in segments[i + 1:]:
                report.bytes_truncated += later.size
                report.segments_deleted += 1
                later.delete()
            del segments[i + 1:]
            dir_dirty = True
            break
    return epoch_starts, dir_dirty


def repair_epochs(epochs: LeaderEpochFile, segments: list[Segment],
                  epoch_starts: list[tuple[int, int]], report: RecoveryReport) -> None:
    """Bring the epoch file in line with the recovered ``segments``: entries past their end
    (or at a cut) dropped, epoch starts it lacks added from ``epoch_starts`` (from every batch
    when the file was rebuilt)."""
    leo = segments[-1].next_offset
    # An entry starting exactly at the log end is an epoch that began with no message yet
    # (a leader elected, then stopped): it is kept unless recovery cut the log there. Only
    # entries past the end (written before batches a crash lost) or at a cut are dropped.
    end = leo if report.truncated_to >= 0 else leo + 1
    report.epoch_entries_dropped = epochs.truncate_from_end(end)
    if report.epoch_file_rebuilt:
        epoch_starts = epoch_starts_from_batches(segments)
    for epoch, start in epoch_starts:
        # Fills in an epoch start the file lacks; the file is written before the batches,
        # so normally this adds nothing.
        if 0 <= epoch and epoch > epochs.latest_epoch and start < leo:
            epochs.assign(epoch, start)
            report.epoch_entries_added += 1


def epoch_starts_from_batches(segments: list[Segment]) -> list[tuple[int, int]]:
    """``(epoch, first offset)`` wherever the batches' leader epoch changes."""
    starts: list[tuple[int, int]] = []
    epoch = None
    for seg in segments:
        for _pos, info in seg.batches():
            if info.partition_leader_epoch != epoch:
                epoch = info.partition_leader_epoch
                starts.append((epoch, info.base_offset))
    return starts
