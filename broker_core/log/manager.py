"""All partition logs of one log directory, its checkpoint files and the clean-shutdown marker.

A broker that stops cleanly flushes every log, writes the checkpoints and leaves a
``.clean-shutdown`` marker; at start the marker is read and removed. Without it, every log is
recovered from its recovery point (see :meth:`broker_core.log.log.Log.open`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker_core.log.checkpoints import read_offsets, write_offsets
from broker_core.log.log import Log, LogConfig, RecoveryReport, parse_dir_name

CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINTS = "recovery-point-offset-checkpoint"
HIGH_WATERMARKS = "replication-offset-checkpoint"
LOG_START_OFFSETS = "log-start-offset-checkpoint"


class LogManager:
    """See the module docstring."""

    def __init__(self, log_dir: Path, default_config: LogConfig, *,
                 time_ms: Callable[[], int]) -> None:
        self.log_dir = Path(log_dir)
        self.default_config = default_config
        self.time_ms = time_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self.clean_shutdown = True
        self.recovery_reports: dict[tuple[str, int], RecoveryReport] = {}
        self.unreadable: list[str] = []

    def load(self) -> dict[tuple[str, int], Log]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN
        has_logs = any(p.is_dir() for p in self.log_dir.iterdir())
        self.clean_shutdown = marker.exists() or not has_logs
        if marker.exists():
            marker.unlink()
        recovery = read_offsets(self.log_dir / RECOVERY_POINTS)
        hws = read_offsets(self.log_dir / HIGH_WATERMARKS)
        starts = read_offsets(self.log_dir / LOG_START_OFFSETS)
        for d in sorted(self.log_dir.iterdir()):
            if not d.is_dir():
                continue
            try:
                tp = parse_dir_name(d.name)
            except ValueError:
                self.unreadable.append(d.name)
                continue
            log = Log.open(d, self.default_config, time_ms=self.time_ms,
                           recovery_point=recovery.get(tp, 0),
                           log_start_offset=starts.get(tp, 0),
                           clean_shutdown=self.clean_shutdown)
            log.high_watermark = hws.get(tp, 0)
            if log.recovery_report is not None:
                self.recovery_reports[tp] = log.recovery_report
            self._logs[tp] = log
        return dict(self._logs)

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        log = self._logs.get((topic, partition))
        if log is None:
            log = Log.open(self.log_dir / f"{topic}-{partition}", config or self.default_config,
                           time_ms=self.time_ms)
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
        logs = dict(self._logs)
        write_offsets(self.log_dir / RECOVERY_POINTS,
                      {tp: log.recovery_point for tp, log in logs.items()})
        write_offsets(self.log_dir / HIGH_WATERMARKS,
                      {tp: log.high_watermark for tp, log in logs.items()})
        write_offsets(self.log_dir / LOG_START_OFFSETS,
                      {tp: log.log_start_offset for tp, log in logs.items()})

    def shutdown(self) -> None:
        for log in self.logs():
            log.flush()
        self.checkpoint()
        for log in self.logs():
            log.close()
        (self.log_dir / CLEAN_SHUTDOWN).write_text("")
