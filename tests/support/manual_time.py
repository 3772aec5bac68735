"""Injected wall-clock time for code that takes a ``time_ms`` callable (the log, the log manager).

``task.Clock`` plays this part for reactor timers; logs only need "now in milliseconds".
"""

from __future__ import annotations


class ManualTime:
    """A callable returning milliseconds since the epoch; tests move ``now`` by hand."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now
