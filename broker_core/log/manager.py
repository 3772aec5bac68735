"""All partition logs of a broker's log directories (``log.dirs``, one or several), their
checkpoint files and clean-shutdown markers, and which directories are offline.

A broker that stops cleanly flushes every log, writes the checkpoints and leaves a
``.clean-shutdown`` marker in each directory; :meth:`LogManager.load` reads and removes the
markers. Without it, every log of that directory is recovered from its checkpointed recovery
point (see :meth:`Log.open`).

Several directories (Kafka's JBOD, KIP-112): each directory has its own checkpoint files and
marker; a new partition goes to the online directory holding the fewest partitions (Kafka's
placement). An I/O error in a directory takes the whole directory offline for the life of the
process (:meth:`LogManager.fail_dir`, the states in :mod:`broker_core.log.dir_state`): its logs
are dropped from the manager with their descriptors closed and nothing written, and no file in
it is touched again: not by a checkpoint, a flush, a deletion or the shutdown (which leaves no
clean-shutdown marker there, so the next start recovers it). A partition whose log was in an
offline directory is never re-created elsewhere by this process (its data is on that disk),
nor is any partition not found at start while a directory could not even be loaded (what it
held is unknown): :class:`LogDirOffline`.

Open files: every log's active segment keeps its ``.log`` open; the rolled segments of all logs
share one LRU of open descriptors (``max_open_segments``, the broker's
``log.open.segments.max``), and index files are only opened to be written. So a broker holds
about one descriptor per partition plus ``max_open_segments``.

Threading: ``load``, ``get*``, ``delete`` and ``shutdown`` run on the reactor thread;
:meth:`LogManager.checkpoint` may run on an IO thread (it only reads offsets and writes files,
under its own lock so two checkpoints never interleave).
"""

from __future__ import annotations

import errno
import shutil
import threading
from collections.abc import Callable, Sequence
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
from broker_core.log.dir_state import LogDirStates
from broker_core.log.log import Log
from broker_core.log.open_segments import DEFAULT_MAX_OPEN_SEGMENTS, OpenSegments
from broker_core.log.partition_dir import (
    DELETE_SUFFIX,
    check_topic_name,
    parse_dir_name,
    partition_dir_name,
)
from broker_core.log.recovery import RecoveryReport
from broker_core.wire.topic_partition import TopicPartition

CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINTS = "recovery-point-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"
#: Directories of log.dirs that are not partitions: "quorum" holds the metadata quorum of a
#: broker in quorum mode (``quorum.data.dir``'s default; it has a log of its own).
RESERVED_DIRS = frozenset({"quorum"})



class LogDirOffline(OSError):
    """The partition's log is (or may be) in an offline log directory: it is not served, and
    not re-created in another directory, until the broker restarts."""

    def __init__(self, topic: str, partition: int, why: str) -> None:
        super().__init__(errno.EIO, f"{topic}-{partition}: {why}")


class LogManager:
    """Owns the :class:`Log` of every partition in the broker's log directories (see the module
    docstring). ``log_dirs`` is one directory or a sequence of them (``log.dirs`` in order).

    Invariants: ``logs()`` holds exactly the open logs of the online directories, one per
    partition, and each partition is in exactly one directory; a directory's checkpoint files
    name only partitions that had a log in it when they were written; nothing is written in a
    directory once it is offline.
    """

    def __init__(self, log_dirs: Path | str | Sequence[Path | str], default_config: LogConfig,
                 *, time_ms: Callable[[], int],
                 max_open_segments: int = DEFAULT_MAX_OPEN_SEGMENTS) -> None:
        dirs = ([Path(log_dirs)] if isinstance(log_dirs, (str, Path))
                else [Path(d) for d in log_dirs])
        self.dir_states = LogDirStates(dirs, time_ms=time_ms)
        self.log_dirs = dirs
        #: The first directory (the only one of a single-directory broker).
        self.log_dir = dirs[0]
        # Rolled segments' .log descriptors, shared by every log (ValueError if < 1).
        self.open_segments = OpenSegments(max_open_segments)
        self.default_config = default_config
        self.time_ms = time_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        #: Partitions whose log was in a directory that went offline -> that directory.
        self.offline_partitions: dict[TopicPartition, Path] = {}
        #: Directories that could not be loaded at all (their partitions are unknown).
        self._unloaded_offline: set[Path] = set()
        self._checkpoint_lock = threading.Lock()
        # Rewritten only when what they say changed (idle partitions change nothing).
        self._checkpoint_files = {d: [
            (OffsetsFile(d / RECOVERY_POINTS), lambda log: log.recovery_point),
            (OffsetsFile(d / HIGH_WATERMARKS), lambda log: log.high_watermark),
            (OffsetsFile(d / LOG_START_OFFSETS), lambda log: log.log_start_offset),
        ] for d in dirs}
        self.clean_shutdown = True
        #: Directories that were not shut down cleanly (their logs were recovered).
        self.unclean_dirs: list[Path] = []
        self.recovery_reports: dict[TopicPartition, RecoveryReport] = {}
        # directory or file name -> why it was skipped (not fatal: the broker logs these)
        self.load_errors: dict[str, str] = {}

    def load(self) -> dict[TopicPartition, Log]:
        """Open every partition directory of every online log directory. A partition directory
        whose name does not parse, or whose log cannot be opened, is recorded in
        ``load_errors`` and skipped; an unreadable checkpoint is recorded and treated as empty
        (recovery points 0: full recovery, which is safe). A log directory in which an I/O
        error (an ``OSError``) happens while it is created, listed, or one of its logs opened
        or recovered goes offline from the start; what it held is then unknown."""
        for log_dir in self.dir_states.online():
            try:
                self._load_dir(log_dir)
            except OSError as e:
                self.load_errors[str(log_dir)] = f"log directory offline: {e}"
                self._unloaded_offline.add(log_dir)
                self.fail_dir(log_dir, e)
        self.clean_shutdown = not self.unclean_dirs
        return dict(self._logs)

    def _load_dir(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        marker = log_dir / CLEAN_SHUTDOWN
        had_marker = marker.exists()
        for p in list(log_dir.iterdir()):
            if p.is_dir() and p.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(p, ignore_errors=True)  # a deletion interrupted by a crash
            elif p.is_file() and p.name.endswith(TMP_SUFFIX):
                p.unlink()
        dirs = sorted(p for p in log_dir.iterdir()
                      if p.is_dir() and p.name not in RESERVED_DIRS)
        # A directory with no logs at all (first start) has nothing to recover.
        clean_shutdown = had_marker or not dirs
        if not clean_shutdown:
            self.unclean_dirs.append(log_dir)
        recovery = self._read_checkpoint(log_dir, RECOVERY_POINTS)
        hws = self._read_checkpoint(log_dir, HIGH_WATERMARKS)
        starts = self._read_checkpoint(log_dir, LOG_START_OFFSETS)
        for d in dirs:
            try:
                tp = parse_dir_name(d.name)
            except ValueError as e:
                self.load_errors[d.name] = str(e)
                continue
            if tp in self._logs:
                self.load_errors[str(d)] = (f"{tp[0]}-{tp[1]} is also in "
                                            f"{self._dir_of[tp]}; this copy is not opened")
                continue
            try:
                log = Log.open(d, self.default_config, time_ms=self.time_ms,
                               recovery_point=recovery.get(tp, 0),
                               log_start_offset=starts.get(tp, 0),
                               clean_shutdown=clean_shutdown,
                               open_segments=self.open_segments)
            except OSError:
                raise  # an I/O error: the whole directory goes offline (see load())
            except (ValueError, RuntimeError) as e:
                self.load_errors[d.name] = f"cannot open log: {type(e).__name__}: {e}"
                continue
            log.high_watermark = hws.get(tp, 0)
            if not clean_shutdown or log.recovery_report.changed:
                self.recovery_reports[tp] = log.recovery_report
            self._logs[tp] = log
            self._dir_of[tp] = log_dir
        if had_marker:
            # Gone (durably) before the first append: a crash from here on is unclean.
            marker.unlink()
            fsync_dir(log_dir)

    def _read_checkpoint(self, log_dir: Path, name: str) -> dict[TopicPartition, int]:
        try:
            return read_offsets(log_dir / name)
        except CheckpointError as e:
            self.load_errors[name if len(self.log_dirs) == 1 else str(log_dir / name)] = str(e)
            return {}

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def dir_of(self, topic: str, partition: int) -> Path | None:
        """The log directory holding the partition's log (an offline one included)."""
        tp = (topic, partition)
        return self._dir_of.get(tp) or self.offline_partitions.get(tp)

    def is_offline(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.offline_partitions

    def partition_counts(self) -> dict[Path, int]:
        """Partitions per online directory (the placement rule's input)."""
        counts = {d: 0 for d in self.dir_states.online()}
        for d in self._dir_of.values():
            if d in counts:
                counts[d] += 1
        return counts

    def _place(self, topic: str, partition: int) -> Path:
        """The directory for a new partition: the online one with the fewest partitions, the
        first in ``log.dirs`` order on a tie (Kafka's rule)."""
        counts = self.partition_counts()
        if not counts:
            raise LogDirOffline(topic, partition, "every log directory is offline")
        return min(counts, key=lambda d: (counts[d], self.log_dirs.index(d)))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created empty if missing; ``config`` (if given) replaces the
        log's settings. Raises ValueError for an illegal topic name or partition,
        :class:`LogDirOffline` when the partition's data is (or may be) on an offline
        directory, and OSError when the new log's files cannot be created."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is None:
            check_topic_name(topic)
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise ValueError(f"illegal partition {partition!r} for topic {topic!r}")
            if tp in self.offline_partitions:
                raise LogDirOffline(topic, partition, "its log directory "
                                    f"{self.offline_partitions[tp]} is offline")
            if self._unloaded_offline:
                # A directory we could not even list may hold this partition's data: creating
                # an empty log elsewhere could make an empty replica lead (Kafka refuses too).
                raise LogDirOffline(topic, partition, "log directories "
                                    f"{sorted(str(d) for d in self._unloaded_offline)} could not "
                                    "be loaded and may hold it")
            log_dir = self._place(topic, partition)
            log = Log.open(log_dir / partition_dir_name(topic, partition),
                           config or self.default_config, time_ms=self.time_ms,
                           open_segments=self.open_segments)
            self._logs[tp] = log
            self._dir_of[tp] = log_dir
        elif config is not None:
            log.update_config(config)
        return log

    def delete(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        self._dir_of.pop(tp, None)
        if log is not None:
            log.delete()
        # A partition of an offline directory is forgotten, its files left alone.
        self.offline_partitions.pop(tp, None)

    def logs(self) -> list[Log]:
        return list(self._logs.values())

    # -- failed directories ------------------------------------------------------------------

    def fail_dir(self, log_dir: Path, error: BaseException | str) -> list[TopicPartition] | None:
        """Take ``log_dir`` offline after ``error`` (reactor thread). Returns the partitions
        whose logs were in it, now dropped from the manager (their descriptors closed, nothing
        written), or None when the directory was offline already."""
        # Not under the checkpoint lock: a checkpoint stuck on a hung disk must not stop the
        # reactor. A checkpoint running on an IO thread checks the state before each file, so
        # at most the file it is writing at this instant is finished.
        if not self.dir_states.fail(log_dir, error):
            return None
        gone = sorted(tp for tp, d in self._dir_of.items() if d == log_dir)
        for tp in gone:
            self._abandon(tp)
        return gone

    def _abandon(self, tp: TopicPartition) -> None:
        """Drop ``tp``'s log (descriptors closed, nothing written) and remember it offline."""
        self.offline_partitions[tp] = self._dir_of.pop(tp)
        self._logs.pop(tp).abandon()

    def fail_partition(self, tp: TopicPartition) -> bool:
        """Take one partition's log out of service after its stored bytes failed a check
        (reactor thread): it is dropped from the manager like a failed directory's logs (its
        descriptors closed, nothing written) and stays in ``offline_partitions`` until the
        broker restarts, when recovery cuts the log at the damage. Its directory stays online.
        False if the partition has no open log here."""
        if tp not in self._dir_of:
            return False
        self._abandon(tp)
        return True

    def dir_for_error(self, error: BaseException) -> Path | None:
        """The log directory an ``OSError`` names a file of, if any."""
        names = [getattr(error, "filename", None), getattr(error, "filename2", None)]
        for name in names:
            d = self.dir_states.dir_containing(name)
            if d is not None:
                return d
        return None

    # -- checkpoints and shutdown --------------------------------------------------------------

    def checkpoint(self) -> dict[Path, OSError]:
        """Write recovery points, high watermarks and log start offsets of every online
        directory, each atomically, each only if it changed since this manager last wrote it.
        Returns the directories whose write failed, with the error (the caller takes them
        offline on the reactor thread); the other directories are written all the same."""
        failed: dict[Path, OSError] = {}
        with self._checkpoint_lock:
            by_dir: dict[Path, list[tuple[TopicPartition, Log]]] = {
                d: [] for d in self.dir_states.online()}
            for tp, log in list(self._logs.items()):
                d = self._dir_of.get(tp)
                if d in by_dir:
                    by_dir[d].append((tp, log))
            for d, logs in by_dir.items():
                try:
                    for file, offset in self._checkpoint_files[d]:
                        if not self.dir_states.is_online(d):
                            break  # went offline meanwhile (see fail_dir)
                        file.write({tp: offset(log) for tp, log in logs})
                except OSError as e:
                    failed[d] = e
        return failed

    def shutdown(self) -> None:
        """Flush every log, checkpoint, close, and leave the clean-shutdown marker, directory
        by directory. An offline directory is not touched. If a flush or a checkpoint of a
        directory fails, or it holds a partition taken offline on its own, that directory gets
        no marker (the next start recovers it) and the first error is raised once every
        directory has been handled."""
        error: BaseException | None = None
        failed: set[Path] = set()
        for tp, log in list(self._logs.items()):
            try:
                log.flush()
            except OSError as e:
                error = error or e
                failed.add(self._dir_of[tp])
        for d, e in self.checkpoint().items():
            error = error or e
            failed.add(d)
        for log in self.logs():
            log.close()
        # A directory holding a partition taken offline because its bytes failed a check gets
        # no marker either: its next start recovers it (that partition, absent from the
        # checkpoint just written, from offset 0), cutting the log at the damage instead of
        # trusting it again.
        failed |= set(self.offline_partitions.values())
        for d in self.dir_states.online():
            if d in failed:
                continue
            try:
                write_atomically(d / CLEAN_SHUTDOWN, "")
            except OSError as e:
                error = error or e
        if error is not None:
            raise error
