"""The load driver's PNG: four panels over the run's time line.

1. members registered and owning partitions (from the workers' events) and members the
   coordinator expired (its counter), with kills/pauses marked;
2. every rebalance as a point (end time, duration as the members saw it);
3. ping round trip p50/p99 per scrape interval (the coordinator's histogram);
4. coordinator CPU (% of one core) and resident memory.

matplotlib comes with the ``bench`` and ``test`` extras; without it the driver skips the plot and
says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
    fig, axes = plt.subplots(4, 1, figsize=(10, 12), sharex=True)
    cfg = result["config"]
    fig.suptitle(f"sluice loadtest: {cfg['consumers']} consumers, {cfg['groups']} groups, "
                 f"{cfg['partitions']} partitions, session {cfg['session_timeout_ms']} ms")

    ax = axes[0]
    ax.plot(t, [p["registered"] for p in timeline], label="registered")
    ax.plot(t, [p["owning"] for p in timeline], label="owning partitions")
    for action in result.get("actions", []):
        ax.axvline(action["t"], color="red", linestyle="--", linewidth=0.8)
        ax.annotate(action["what"], (action["t"], 0), rotation=90, fontsize=7, color="red")
    if any(p.get("expirations") for p in timeline):
        ax.plot(t, [p.get("expirations") for p in timeline], label="expired (coordinator)",
                color="tab:red")
    ax.set_ylabel("consumers")
    ax.legend(loc="lower right")

    ax = axes[1]
    rb = result["rebalances"]["events"]
    ax.scatter([r["end_t"] for r in rb], [r["duration_s"] for r in rb], s=8)
    ax.set_ylabel("rebalance (s)")

    ax = axes[2]
    ax.plot(t, [p.get("ping_p50_ms") for p in timeline], label="p50")
    ax.plot(t, [p.get("ping_p99_ms") for p in timeline], label="p99")
    ax.set_ylabel("ping round trip (ms)")
    ax.legend(loc="upper right")

    ax = axes[3]
    ax.plot(t, [p.get("cpu_percent") for p in timeline], color="tab:orange", label="CPU %")
    ax.set_ylabel("coordinator CPU (%)")
    ax2 = ax.twinx()
    ax2.plot(t, [(p.get("rss_bytes") or 0) / 2**20 for p in timeline], color="tab:green",
             label="RSS")
    ax2.set_ylabel("coordinator RSS (MiB)")
    ax.set_xlabel("seconds since start")

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
