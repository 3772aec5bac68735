"""Run the chaotic Raft simulation over a range of seeds and report what failed.

Usage (from the repository root):

    .venv/bin/python scripts/raft_sim_sweep.py --seeds 20000:26000 --chaos-ms 4000

Each seed is one run of ``tests/unit/test_raft_simulation.py``'s ``chaotic_simulation``:
``--chaos-ms`` of faults, then everything heals, and a leader must be elected and a new entry
committed on every node. A failing seed prints one line (the invariant or liveness check that
failed) and replays exactly with ``chaotic_simulation(seed)``. The last line sums up the seeds,
the failures and the faults injected.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.raft_sim import SimDiskLog  # noqa: E402
from tests.unit.test_raft_simulation import chaotic_simulation, run_chaos_then_heal  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="20000:25000",
                        help="first:last (last excluded); default %(default)s")
    parser.add_argument("--chaos-ms", type=float, default=4000.0,
                        help="simulated milliseconds of faults per seed; default %(default)s")
    args = parser.parse_args(argv)
    first, last = (int(x) for x in args.seeds.split(":"))
    failures: list[int] = []
    faults: Counter[str] = Counter()
    started = time.perf_counter()
    for seed in range(first, last):
        sim = chaotic_simulation(seed)
        try:
            run_chaos_then_heal(sim, chaos_ms=args.chaos_ms)
        except AssertionError as e:  # InvariantViolation is one
            failures.append(seed)
            print(f"seed {seed}: {type(e).__name__}: {e}", flush=True)
        faults["power cuts"] += len(sim.power_cuts)
        faults["entries lost to power cuts"] += sum(
            log.lost_entries for log in sim.logs.values() if isinstance(log, SimDiskLog))
        faults["disks lost"] += len(sim.disks_lost)
        faults["one-way cuts"] += sim.fault_counts["one_way"]
        faults["flapping links"] += sim.fault_counts["flap"]
    elapsed = time.perf_counter() - started
    summary = ", ".join(f"{n} {kind}" for kind, n in faults.items())
    print(f"{last - first} seeds ({first}..{last - 1}, {args.chaos_ms:.0f} ms of chaos each) in "
          f"{elapsed:.0f} s: {len(failures)} failed {failures}; injected {summary}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
