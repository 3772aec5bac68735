"""All partition logs of one log directory, its checkpoint files and the clean-shutdown marker.

A broker that stops cleanly flushes every log, writes the checkpoints and leaves a
``.clean-shutdown`` marker; :meth:`LogManager.load` reads and removes the marker. Without it,
every log is recovered from its checkpointed recovery point (see :meth:`Log.open`).

Open files: every log's active segment keeps its ``.log`` open; the rolled segments of all logs
share one LRU of open descriptors (``max_open_segments``, the broker's
``log.open.segments.max``), and index files are only opened to be written. So a broker holds
about one descriptor per partition plus ``max_open_segments``.

Threading: ``load``, ``get*``, ``delete`` and ``shutdown`` run on the reactor thread;
:meth:`LogManager.checkpoint` may run on an IO thread (it only reads offsets and writes files,
under its own lock so two checkpoints never interleave).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from broker_core.log.checkpoints import (
    TMP_SUFFIX,
    CheckpointError,
    OffsetsFile,
    fsync_dir,
    read_offsets,
    write_atomically,
)
from broker_core.log.config import LogConfig
from broker_core.log.log import (
    DELETE_SUFFIX,
    Log,
    RecoveryReport,
    check_topic_name,
    parse_dir_name,
    partition_dir_name,
)
from broker_core.log.open_segments import DEFAULT_MAX_OPEN_SEGMENTS, OpenSegments

CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINTS = "recovery-point-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
#: Directories of log.dirs that are not partitions: "quorum" holds the metadata quorum of a
#: broker in quorum mode (``quorum.data.dir``'s default; it has a log of its own).
RESERVED_DIRS = frozenset({"quorum"})

TopicPartition = tuple[str, int]


class LogManager:
    """Owns the :class:`Log` of every partition in one log directory (see the module docstring).

    Invariant: ``logs()`` holds exactly the open logs of this directory, one per partition; the
    checkpoint files name only partitions that had a log when they were written.
    """

    def __init__(self, log_dir: Path, default_config: LogConfig, *,
                 time_ms: Callable[[], int],
                 max_open_segments: int = DEFAULT_MAX_OPEN_SEGMENTS) -> None:
        self.log_dir = Path(log_dir)
        # Rolled segments' .log descriptors, shared by every log (ValueError if < 1).
        self.open_segments = OpenSegments(max_open_segments)
        self.default_config = default_config
        self.time_ms = time_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._checkpoint_lock = threading.Lock()
        # Rewritten only when what they say changed (idle partitions change nothing).
        self._checkpoint_files = [
            (OffsetsFile(self.log_dir / RECOVERY_POINTS), lambda log: log.recovery_point),
            (OffsetsFile(self.log_dir / HIGH_WATERMARKS), lambda log: log.high_watermark),
            (OffsetsFile(self.log_dir / LOG_START_OFFSETS), lambda log: log.log_start_offset),
        ]
        self.clean_shutdown = True
        self.recovery_reports: dict[TopicPartition, RecoveryReport] = {}
        # directory or file name -> why it was skipped (not fatal: the broker logs these)
        self.load_errors: dict[str, str] = {}

    def load(self) -> dict[TopicPartition, Log]:
        """Open every partition directory. A directory whose name does not parse, or whose log
        cannot be opened, is recorded in ``load_errors`` and skipped; an unreadable checkpoint
        is recorded and treated as empty (recovery points 0: full recovery, which is safe)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN
        had_marker = marker.exists()
        for p in list(self.log_dir.iterdir()):
            if p.is_dir() and p.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(p, ignore_errors=True)  # a deletion interrupted by a crash
            elif p.is_file() and p.name.endswith(TMP_SUFFIX):
                p.unlink()
        dirs = sorted(p for p in self.log_dir.iterdir()
                      if p.is_dir() and p.name not in RESERVED_DIRS)
        # A directory with no logs at all (first start) has nothing to recover.
        self.clean_shutdown = had_marker or not dirs
        recovery = self._read_checkpoint(RECOVERY_POINTS)
        hws = self._read_checkpoint(HIGH_WATERMARKS)
        starts = self._read_checkpoint(LOG_START_OFFSETS)
        for d in dirs:
            try:
                tp = parse_dir_name(d.name)
            except ValueError as e:
                self.load_errors[d.name] = str(e)
                continue
            try:
                log = Log.open(d, self.default_config, time_ms=self.time_ms,
                               recovery_point=recovery.get(tp, 0),
                               log_start_offset=starts.get(tp, 0),
                               clean_shutdown=self.clean_shutdown,
                               open_segments=self.open_segments)
            except (OSError, ValueError, RuntimeError) as e:
                self.load_errors[d.name] = f"cannot open log: {type(e).__name__}: {e}"
                continue
            log.high_watermark = hws.get(tp, 0)
            if not self.clean_shutdown or log.recovery_report.changed:
                self.recovery_reports[tp] = log.recovery_report
            self._logs[tp] = log
        if had_marker:
            # Gone (durably) before the first append: a crash from here on is unclean.
            marker.unlink()
            fsync_dir(self.log_dir)
        return dict(self._logs)

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return read_offsets(self.log_dir / name)
        except CheckpointError as e:
            self.load_errors[name] = str(e)
            return {}

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created empty if missing; ``config`` (if given) replaces the
        log's settings. Raises ValueError for an illegal topic name or partition."""
        log = self._logs.get((topic, partition))
        if log is None:
            check_topic_name(topic)
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise ValueError(f"illegal partition {partition!r} for topic {topic!r}")
            log = Log.open(self.log_dir / partition_dir_name(topic, partition),
                           config or self.default_config, time_ms=self.time_ms,
                           open_segments=self.open_segments)
            self._logs[(topic, partition)] = log
        elif config is not None:
            log.update_config(config)
        return log

    def delete(self, topic: str, partition: int) -> None:
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.delete()

    def logs(self) -> list[Log]:
        return list(self._logs.values())

    def checkpoint(self) -> None:
        """Write recovery points, high watermarks and log start offsets, each atomically, each
        only if it changed since this manager last wrote it."""
        with self._checkpoint_lock:
            logs = list(self._logs.items())
            for file, offset in self._checkpoint_files:
                file.write({tp: offset(log) for tp, log in logs})

    def shutdown(self) -> None:
        """Flush every log, checkpoint, close, and leave the clean-shutdown marker. If a flush
        fails the marker is not written (the next start recovers) and the error is raised."""
        error: BaseException | None = None
        for log in self.logs():
            try:
                log.flush()
            except OSError as e:
                error = error or e
        self.checkpoint()
        for log in self.logs():
            log.close()
        if error is not None:
            raise error
        write_atomically(self.log_dir / CLEAN_SHUTDOWN, "")
