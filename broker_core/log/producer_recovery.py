"""A log's producer state across restarts and truncations: rebuilt from the newest usable
``.snapshot`` file and the batches after it, and snapshotted at a roll and a clean close.

Invariants: the state rebuilt is the state as of the log end handed in (snapshots past it are
deleted: their batches were cut); a snapshot that fails its checks is deleted and counted in the
:class:`~broker_core.log.recovery.RecoveryReport`, never trusted; at most two snapshots are
kept after a write.
"""

from __future__ import annotations

from pathlib import Path

from broker_core.log import producer_snapshot
from broker_core.log.producer_snapshot import SnapshotError, snapshot_offsets
from broker_core.log.producer_state import ProducerStateManager
from broker_core.log.recovery import RecoveryReport
from broker_core.log.segment import Segment


def rebuild_producer_state(directory: Path, segments: list[Segment], max_producers: int,
                           report: RecoveryReport) -> ProducerStateManager:
    """The producer state as of the log end: from the newest snapshot at or below it that
    passes its checks, then the batches after it. Snapshots past the end (their batches were
    cut) and unusable ones are deleted."""
    leo = segments[-1].next_offset
    state = ProducerStateManager(max_producers)
    start = segments[0].base_offset
    for offset in reversed(snapshot_offsets(directory)):
        path = producer_snapshot.snapshot_path(directory, offset)
        if offset > leo:
            path.unlink(missing_ok=True)
            continue
        try:
            entries = producer_snapshot.decode(path.read_bytes(), offset,
                                               state.max_producers)
        except (SnapshotError, OSError) as e:
            report.snapshots_ignored += 1
            report.snapshot_problem = f"{path.name}: {e}"
            path.unlink(missing_ok=True)
            continue
        for entry in entries:
            state.restore(entry)
        start = max(start, offset)
        break
    for seg in segments:
        if seg.next_offset <= start:
            continue
        position = seg.locate(start) if start > seg.base_offset else 0
        for _pos, info in seg.batches(position):
            if info.base_offset >= start:
                state.update(info)
                report.producer_batches_replayed += 1
    return state


def write_snapshot(directory: Path, state: ProducerStateManager, log_end_offset: int) -> None:
    """Snapshot ``state`` at ``log_end_offset``, keeping the two newest snapshots."""
    producer_snapshot.write(directory, state, log_end_offset)
    for offset in snapshot_offsets(directory)[:-2]:
        producer_snapshot.snapshot_path(directory, offset).unlink(missing_ok=True)


def delete_snapshots(directory: Path) -> None:
    """Delete every snapshot (the log starts again at another offset)."""
    for old in snapshot_offsets(directory):
        producer_snapshot.snapshot_path(directory, old).unlink(missing_ok=True)
