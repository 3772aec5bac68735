"""The load driver's PNG: five panels over the run's time line.

1. members registered and owning partitions (from the workers' events) and members the
   coordinators expired and that left (their counters summed, from 0 at the run's start), with
   kills/pauses marked;
2. every rebalance as a point (end time, duration as the members saw it);
3. ping round trip p50/p99 per scrape interval (every broker's histogram summed), and how many
   pings the interval had;
4. CPU (% of one core) per broker, each labelled by the coordinator shards it holds, with the
   90% line and the end of the ramp;
5. resident memory per broker (solid) and the members it coordinates (dashed).

Every panel spans the whole run from 0 s, and values are drawn as points joined by lines: a
scrape interval without pings has no round trip, and a lone value between two such intervals
would be invisible as a line alone (so early in a run, when few consumers ping, the panel looked
empty).

matplotlib comes with the ``bench`` and ``test`` extras; without it the driver skips the plot and
says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice_tools.loadtest.brokers import HOT_CPU_PERCENT, shards_label


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def render(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: render straight to a file
    import matplotlib.pyplot as plt

    timeline = result["timeline"]
    t = [p["t"] for p in timeline]
    fig, axes = plt.subplots(5, 1, figsize=(10, 15), sharex=True)
    cfg = result["config"]
    fig.suptitle(f"sluice loadtest: {cfg['consumers']} consumers, {cfg['groups']} groups, "
                 f"{cfg['partitions']} partitions, session {cfg['session_timeout_ms']} ms")

    ax = axes[0]
    ax.plot(t, [p["registered"] for p in timeline], label="registered")
    ax.plot(t, [p["owning"] for p in timeline], label="owning partitions")
    for action in result.get("actions", []):
        ax.axvline(action["t"], color="red", linestyle="--", linewidth=0.8)
        ax.annotate(action["what"], (action["t"], 0), rotation=90, fontsize=7, color="red")
    if any(p.get("expirations") is not None for p in timeline):
        ax.plot(t, [p.get("expirations") for p in timeline], label="expired (coordinator)",
                color="tab:red", marker=".")
        ax.plot(t, [p.get("leaves") for p in timeline], label="left (coordinator)",
                color="tab:gray", marker=".")
    ax.set_ylabel("consumers")
    ax.set_xlim(0, max(t[-1] if t else 0, 1))
    ax.legend(loc="lower right")

    ax = axes[1]
    rb = result["rebalances"]["events"]
    ax.scatter([r["end_t"] for r in rb], [r["duration_s"] for r in rb], s=8)
    ax.set_ylabel("rebalance (s)")

    ax = axes[2]
    ax.plot(t, [p.get("ping_p50_ms") for p in timeline], label="p50", marker=".")
    ax.plot(t, [p.get("ping_p99_ms") for p in timeline], label="p99", marker=".")
    ax.set_ylabel("ping round trip (ms)")
    ax.legend(loc="upper left")
    ax3 = ax.twinx()
    ax3.bar(t, [p.get("ping_count") or 0 for p in timeline], color="tab:gray", alpha=0.25,
            width=0.8 * _step(t))
    ax3.set_ylabel("pings per interval")

    brokers = _per_broker(timeline)
    labels = {bid: f"broker {bid} ({shards_label(result.get('brokers', {}).get(bid, {}))})"
              for bid in brokers}
    ax = axes[3]
    for bid, points in brokers.items():
        ax.plot([p[0] for p in points], [p[1].get("cpu_percent") for p in points],
                label=labels[bid], marker=".")
    ax.axhline(HOT_CPU_PERCENT, color="red", linestyle=":", linewidth=0.8)
    if cfg.get("ramp_s"):
        ax.axvline(cfg["ramp_s"], color="gray", linestyle="--", linewidth=0.8)
    ax.set_ylabel("CPU (% of one core)")
    if brokers:
        ax.legend(loc="upper left", fontsize=8)

    ax = axes[4]
    ax2 = ax.twinx()
    for i, (bid, points) in enumerate(brokers.items()):
        colour = f"C{i % 10}"
        ts = [p[0] for p in points]
        ax.plot(ts, [(p[1].get("rss_bytes") or 0) / 2**20 for p in points], color=colour,
                label=labels[bid])
        ax2.plot(ts, [p[1].get("members") for p in points], color=colour, linestyle="--")
    ax.set_ylabel("RSS (MiB, solid)")
    ax2.set_ylabel("members coordinated (dashed)")
    if brokers:
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel("seconds since start")

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _per_broker(timeline: list[dict[str, Any]]) -> dict[int, list[tuple[float, dict]]]:
    """Each broker's ``(t, figures)`` points, by broker id (a JSON-loaded result has its ids
    as strings)."""
    out: dict[int, list[tuple[float, dict]]] = {}
    for p in timeline:
        for bid, figures in (p.get("brokers") or {}).items():
            out.setdefault(int(bid), []).append((p["t"], figures))
    return dict(sorted(out.items()))


def _step(t: list[float]) -> float:
    """The typical distance between points (for bar widths)."""
    gaps = sorted(b - a for a, b in zip(t, t[1:], strict=False) if b > a)
    return gaps[len(gaps) // 2] if gaps else 1.0
