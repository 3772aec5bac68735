"""Log storage, sans-IO of Twisted: segments with sparse offset and time indexes, the
leader-epoch file, checkpoints, and recovery after an unclean shutdown. Time comes in as a
``time_ms()`` callable; the broker runs :meth:`Log.flush` on an IO thread."""

from broker_core.log.checkpoints import CheckpointError
from broker_core.log.config import LogConfig
from broker_core.log.errors import (
    CorruptLogError,
    LogClosed,
    OffsetOutOfRange,
    RecordTooLarge,
    UnexpectedAppendOffset,
)
from broker_core.log.leader_epoch import EpochEntry, LeaderEpochFile
from broker_core.log.log import AppendResult, Log, ReadResult
from broker_core.log.manager import LogDirOffline, LogManager
from broker_core.log.recovery import RecoveryReport

__all__ = [
    "AppendResult",
    "CheckpointError",
    "CorruptLogError",
    "EpochEntry",
    "LeaderEpochFile",
    "Log",
    "LogClosed",
    "LogConfig",
    "LogDirOffline",
    "LogManager",
    "OffsetOutOfRange",
    "ReadResult",
    "RecordTooLarge",
    "RecoveryReport",
    "UnexpectedAppendOffset",
]
