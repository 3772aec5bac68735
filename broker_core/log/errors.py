"""The errors a partition log raises to its callers, each naming the Kafka error code the broker
answers with (``error_code_name``) where there is one. They live apart from
:class:`~broker_core.log.log.Log` so that the modules doing its jobs (reads, appends) raise the
same classes without importing the log."""

from __future__ import annotations

import errno


class OffsetOutOfRange(Exception):
    """A read outside ``[log_start_offset, log_end_offset]`` -> OFFSET_OUT_OF_RANGE."""

    error_code_name = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside the log [{log_start_offset}, "
                         f"{log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLarge(Exception):
    """A batch larger than ``max.message.bytes`` -> MESSAGE_TOO_LARGE."""

    error_code_name = "MESSAGE_TOO_LARGE"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"record batch of {size} bytes exceeds max.message.bytes {limit}")
        self.size = size
        self.limit = limit


class UnexpectedAppendOffset(ValueError):
    """A follower append whose batches do not continue the log at its end offset."""

    def __init__(self, first_offset: int, expected: int) -> None:
        super().__init__(f"follower append has a batch at offset {first_offset}, the log "
                         f"expects offset {expected}")
        self.first_offset = first_offset
        self.expected = expected


class CorruptLogError(OSError):
    """A stored batch failed its checks (framing, CRC, offsets continuing, epochs) when read.

    An OSError (errno EIO: the disk gave back bad bytes), so every reader that handles a
    failing disk handles this too: the replica manager answers KAFKA_STORAGE_ERROR for the
    partition instead of the bytes."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        super().__init__(errno.EIO, f"corrupt log {topic}-{partition} at offset {offset}: "
                                    f"{reason}")
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason


class LogClosed(RuntimeError):
    """The log was closed or deleted; nothing may be appended or read any more."""
