"""``sluice produce``: a console producer (kafka-console-producer): each line of the input is
one message.

A line is the message value, without its line ending (``\\n`` or ``\\r\\n``); with a key
separator, the text before the first separator is the key and the rest the value. Lines are
bytes as read: no decoding, so any encoding goes through unchanged. An empty line is a message
with an empty value.

Records go through :class:`~consumer_client.blocking_producer.BlockingProducer` with the
producer config keys given (``acks``, ``linger.ms``, security keys ...). Reading stops at the
end of the input, or at the first line that has no key separator when one is required (that
line and the rest are not sent: a message must not go out with a wrong key). Then every
record already sent is waited for.

Exit status (:func:`run` returns it): 0 when every line was acknowledged; 1 when a line had no
separator or a record failed (each distinct error is reported once, with how many records it
cost and the first line it hit).

Invariant: at most ``MAX_PENDING`` records are awaited at a time, so a large input is produced
with bounded memory (the producer's own ``buffer.memory`` bounds the bytes).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import BinaryIO, TextIO

#: Records sent but not yet known to be acknowledged; beyond this the oldest is waited for.
MAX_PENDING = 10_000


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes] | None:
    """``(key, value)`` of one input line (line ending already removed); ``None`` when a
    separator is required and the line has none."""
    if separator is None:
        return None, line
    key, found, value = line.partition(separator)
    if not found:
        return None
    return key, value


def lines_of(stream: BinaryIO) -> Iterable[bytes]:
    """The input's lines without their ``\\n`` / ``\\r\\n`` endings."""
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


class _Failures:
    """Distinct send errors, each with its count and the first line number it hit."""

    def __init__(self) -> None:
        self.by_error: dict[str, list[int]] = {}

    def add(self, error: BaseException, line_no: int) -> None:
        key = f"{type(error).__name__}: {error}"
        seen = self.by_error.setdefault(key, [0, line_no])
        seen[0] += 1

    def report(self, err: TextIO) -> None:
        for what, (count, first) in self.by_error.items():
            plural = "s" if count > 1 else ""
            print(f"sluice: {count} record{plural} not produced (first: line {first}): {what}",
                  file=err)

    def __bool__(self) -> bool:
        return bool(self.by_error)


def run(*, topic: str, config: Mapping[str, object], key_separator: str | None,
        stdin: BinaryIO, err: TextIO) -> int:
    """Produce every line of ``stdin`` to ``topic``; see the module docstring."""
    from consumer_client.blocking_producer import BlockingProducer

    separator = key_separator.encode() if key_separator is not None else None
    failures = _Failures()
    pending: deque = deque()
    bad_line: int | None = None

    def settle(entry: tuple[int, object]) -> None:
        line_no, future = entry
        problem = future.exception()  # waits for the record
        if problem is not None:
            failures.add(problem, line_no)

    with BlockingProducer(dict(config)) as producer:
        for line_no, line in enumerate(lines_of(stdin), start=1):
            record = split_line(line, separator)
            if record is None:
                bad_line = line_no
                break
            key, value = record
            try:
                pending.append((line_no, producer.send(topic, value, key=key)))
            except Exception as e:  # refused before it was queued (too large, closed ...)
                failures.add(e, line_no)
            while len(pending) > MAX_PENDING:
                settle(pending.popleft())
        producer.flush()
        while pending:
            settle(pending.popleft())
    if bad_line is not None:
        print(f"sluice: line {bad_line} has no key separator {key_separator!r}; it and the "
              "lines after it were not produced", file=err)
    failures.report(err)
    return 1 if bad_line is not None or failures else 0
