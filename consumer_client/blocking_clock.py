"""Time for the blocking clients (the Spark data source), injectable so tests need not wait.

A blocking client reads time and waits through one :class:`BlockingClock` it is given; the
default, :data:`SYSTEM_CLOCK`, is the process's monotonic clock and a real sleep. A test clock
whose ``sleep`` advances its ``monotonic`` runs every retry, deadline and timeout path at once.
"""

from __future__ import annotations

import time
from typing import Protocol


class BlockingClock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, blocking the caller."""
        ...


class SystemClock:
    """The real clock: :func:`time.monotonic` and :func:`time.sleep`."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK: BlockingClock = SystemClock()
