"""What the load driver says about each broker as a coordinator: the coordinator shards it
holds (from its metrics, right for the single coordinator and the sharded one) and how long
its CPU stayed saturated."""

from __future__ import annotations

from typing import Any

from sluice_tools.loadtest import metrics as prom

#: A broker's CPU above this (% of one core) for longer than HOT_STRETCH_LIMIT_S after the ramp
#: is saturated: its pings and rebalances wait behind each other.
HOT_CPU_PERCENT = 90.0
HOT_STRETCH_LIMIT_S = 10.0
#: Coordinator shards a broker holds: the sharded coordinator's gauge, else the single
#: coordinator's 0/1 gauge (a broker that is the coordinator holds its one "shard").
SHARD_GAUGES = ("sluice_coordinator_shards_active", "sluice_active_coordinator")


def shards_of(samples: prom.Samples) -> tuple[float | None, list[str]]:
    """``(shards active, their ids)`` of one broker's scrape: the count from the first of
    :data:`SHARD_GAUGES` it has; the ids where its coordinator metrics carry a ``shard`` label
    (else none)."""
    count = next((v for v in (prom.value(samples, g) for g in SHARD_GAUGES) if v is not None),
                 None)
    return count, prom.label_values(samples, "sluice_coordinator_members", "shard")


def shards_label(broker: dict[str, Any]) -> str:
    """What a broker coordinates, for a summary line or a plot: its shards by id where its
    metrics name them, else how many it holds."""
    if broker.get("shards"):
        return "shards " + ",".join(str(s) for s in broker["shards"])
    n = broker.get("shards_active")
    if n is None:
        return "no coordinator metrics"
    return "1 shard" if n == 1 else f"{n:.0f} shards"


def longest_hot_stretch(points: list[tuple[float, float | None]], after: float,
                        threshold: float = HOT_CPU_PERCENT) -> float:
    """The longest time a broker's CPU stayed above ``threshold`` after ``after`` (seconds),
    from its ``(t, cpu percent)`` timeline in time order. Each CPU figure is the mean over the
    window since the point before it, so a stretch of hot windows runs from the start of its
    first window (clipped to ``after``) to the end of its last; a window without a figure (a
    missed scrape) ends a stretch, as nothing says it was hot."""
    longest = 0.0
    start: float | None = None
    prev_t: float | None = None
    for t, cpu in points:
        if prev_t is not None and t > after and cpu is not None and cpu > threshold:
            if start is None:
                start = max(prev_t, after)
            longest = max(longest, t - start)
        else:
            start = None
        prev_t = t
    return round(longest, 3)
