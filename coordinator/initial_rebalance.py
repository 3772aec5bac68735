"""When a new group's first rebalance runs (KIP-134, shortened for a lone member).

A group that gets its first member holds its rebalance so that members starting together cost
one rebalance, not one each. It does not wait the whole ``group.initial.rebalance.delay.ms``:
the rebalance runs once no new member has registered for ``group.initial.rebalance.quiet.ms``
(each arrival pushes that deadline), or once the delay has passed since the first member,
whichever comes first. A lone member thus waits one quiet period; a join storm keeps the window
open up to the delay and still costs one rebalance.

Pure: times are plain floats in seconds from the caller's clock.

Invariants:

- the deadline never passes the bound (``first member + delay``);
- an arrival never moves the deadline earlier (arrivals come in clock order);
- a quiet period longer than the delay is clamped to it (the delay is the bound).
"""

from __future__ import annotations


def effective_quiet_s(quiet_ms: int, delay_ms: int) -> float:
    """The quiet period in seconds, clamped to the delay bound: a quiet period as long as the
    delay (or longer) means the full delay, the behaviour before quiet periods existed."""
    return min(max(quiet_ms, 0), max(delay_ms, 0)) / 1000.0


def opening(now: float, quiet_s: float, delay_s: float) -> tuple[float, float]:
    """The first member of an empty group arrived at ``now``: returns ``(bound, deadline)``."""
    bound = now + delay_s
    return bound, min(now + quiet_s, bound)


def arrival(now: float, quiet_s: float, bound: float, deadline: float) -> float:
    """Another member arrived at ``now`` while the group waits: returns the new deadline."""
    return max(deadline, min(now + quiet_s, bound))
