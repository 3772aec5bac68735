"""Exponential backoff: how long to wait before a retry, as pure functions of the retry number.

One rule for every retry loop of the broker, the quorum, the client library and the tools:
retry ``n`` (counted from 1) waits ``initial * 2 ** (n - 1)``, capped at ``maximum``, plus an
optional jitter drawn uniformly from ``[0, jitter)`` out of a random source the caller injects
(a seeded ``random.Random`` in tests), added after the cap.

Invariants:

- the wait never decreases from one retry to the next, except by the jitter, and never exceeds
  ``maximum + jitter``;
- no clock and no global random state are read: the caller schedules the wait on its own
  (injected) clock, so a test's ``task.Clock`` decides when the retry happens;
- the doubling is bounded before it is computed, so a retry number in the millions costs the
  same as the first and cannot overflow a float.

This module imports nothing of Sluice's, so any layer may use it: the client library (which may
import only the wire codec, config machinery and its transport) as well as the broker. It is not
in ``broker_core.wire``: a retry's timing is no part of the codec.
"""

from __future__ import annotations

import random

# 2 ** 64 times any positive initial wait worth configuring (a microsecond and up) passes every
# cap, so the doubling stops here without ever changing a capped result.
_MAX_DOUBLINGS = 64


def exponential_backoff(retry: int, initial: float, maximum: float, *, jitter: float = 0.0,
                        rng: random.Random | None = None) -> float:
    """The wait before retry number ``retry`` (1 for the first retry): ``initial`` doubled
    ``retry - 1`` times, at most ``maximum``, plus ``rng.random() * jitter`` when ``jitter`` is
    positive (then ``rng`` is required). Units are the caller's (seconds or milliseconds)."""
    if retry < 1:
        raise ValueError(f"retry numbers start at 1, not {retry}")
    wait = min(maximum, initial * 2.0 ** min(retry - 1, _MAX_DOUBLINGS))
    if jitter > 0:
        if rng is None:
            raise ValueError("a jittered backoff needs a random source")
        wait += rng.random() * jitter
    return wait


class Backoff:
    """The retry count of one retry loop: :meth:`next_wait` before each retry, :meth:`reset`
    after a success. ``retries`` is how many waits have been handed out since the last reset."""

    def __init__(self, initial: float, maximum: float, *, jitter: float = 0.0,
                 rng: random.Random | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self.rng = rng
        self.retries = 0

    def next_wait(self) -> float:
        """The wait before the next retry (``initial`` first, then doubling)."""
        self.retries += 1
        return exponential_backoff(self.retries, self.initial, self.maximum, jitter=self.jitter,
                                   rng=self.rng)

    def reset(self) -> None:
        """Start over: the next wait is ``initial`` again."""
        self.retries = 0
