"""Log storage (sans-IO of Twisted): segments, sparse offset index, leader-epoch file,
checkpoints, recovery after unclean shutdown."""

from broker_core.log.log import (
    AppendResult,
    Log,
    LogConfig,
    OffsetOutOfRange,
    ReadResult,
    RecordTooLarge,
    RecoveryReport,
)
from broker_core.log.manager import LogManager

__all__ = ["AppendResult", "Log", "LogConfig", "LogManager", "OffsetOutOfRange", "ReadResult",
           "RecordTooLarge", "RecoveryReport"]
