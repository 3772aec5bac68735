"""One benchmark, two revisions of the code, alternating in one run: are the figures the same?

Runs the benchmark script of ``--bench`` once per revision per round, old then new, for
``--rounds`` rounds (old, new, old, new, ...), so the load of a shared machine falls on both
alike. ``--old-rev`` (default ``a45906f``) is extracted with ``git archive | tar -x`` into a
temp dir, removed afterwards (also on Ctrl-C, SIGTERM or an error); ``--new-rev`` likewise, or
by default the working tree this script is in. Each run is the script *of that tree*, with
``PYTHONPATH=<tree>`` and the tree as its working directory: the bench scripts put their own
tree first on ``sys.path``, and ``tests/support/cluster.py`` starts every broker with
``PYTHONPATH`` = its own tree, so the brokers run that tree's code even where the virtualenv's
editable install points elsewhere (checked before the first round: each tree must import
``broker_core`` and ``tests.support.cluster`` from itself).

Arguments this script does not know go to the bench script, e.g.
``--bench failover -- --partitions 10000``.

Which figures (``FIGURES``, each a regular expression with one group on the bench's output):

- ``replicated-produce`` (``bench/replicated_produce.py``): the kcat ``acks=all`` throughput,
  msg/s (pass ``--skip-latency``; the latency runs print no headline figure);
- ``failover`` (``bench/failover.py``): from its summary, for the follower-broker kill and the
  controller kill, the time from the victim's session expiry until Metadata shows a live
  leader for every moved partition and until every moved partition accepted a produce, and
  the controller event loop's busy time; and for the controller kill, the time until a new
  controller registered. Also the partitions each kill moved, and the two times per 1,000
  moved partitions: the victim leads a different share from run to run.

Prints the figures of every round (with the load average before and after each run), the
median per revision and the ratio new / old of the medians. A run that fails is reported with
the end of its output and left out of the medians. Asserts nothing.

Usage: python bench/compare_revisions.py --bench {replicated-produce,failover}
       [--old-rev a45906f] [--new-rev REV] [--rounds 3] [-- BENCH ARGS...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    """One number a bench prints: ``pattern``'s first group (thousands commas allowed); or,
    with ``per``, one derived from two others: ``per[0]`` / ``per[1]`` x 1,000."""

    name: str
    pattern: str
    unit: str
    per: tuple[str, str] | None = None


@dataclass(frozen=True)
class Bench:
    script: str
    figures: tuple[Figure, ...]


_F = r"([\d.]+)"
_KILLS = (("follower", "follower broker"), ("controller", "controller"))
FIGURES: dict[str, Bench] = {
    "replicated-produce": Bench("bench/replicated_produce.py", (
        Figure("kcat acks=all", r"^\(a\) throughput: .* = ([\d,]+) msg/s", "msg/s"),
    )),
    "failover": Bench("bench/failover.py", tuple(
        Figure(f"{who} kill: {what}", rf"^\s*kill {label}\s.*{pattern}", "s")
        for who, label in _KILLS
        for what, pattern in (("leaders in Metadata", rf"leaders in Metadata\s+{_F} s"),
                              ("all accepted", rf"all accepted a produce \(probe\)\s+{_F} s"),
                              ("controller busy", rf"controller busy\s+{_F} s"))
    ) + (Figure("controller kill: new controller", rf"^new controller registered {_F} s "
                "after expiry", "s"),)
      # The victim leads a different number of partitions from run to run (3,300 to 6,700 of
      # 10,000): the times per 1,000 moved partitions compare runs that moved different counts.
      + tuple(Figure(f"{who} kill: partitions moved",
                     rf"^\s*kill {label}\s+([\d,]+) partitions moved", "partitions")
              for who, label in _KILLS)
      + tuple(Figure(f"{who} kill: {what} per 1,000 moved", "", "s/1k",
                     per=(f"{who} kill: {what}", f"{who} kill: partitions moved"))
              for who, _ in _KILLS for what in ("leaders in Metadata", "all accepted"))),
}


def parse_figures(bench: str, output: str) -> dict[str, float]:
    """The figures of ``bench`` found in one run's ``output`` (the first match of each); a
    figure the output lacks (a failed or partial run) is absent."""
    found = {}
    for fig in FIGURES[bench].figures:
        if fig.per is not None:
            value, divisor = (found.get(name) for name in fig.per)
            if value is not None and divisor:
                found[fig.name] = value / divisor * 1000
            continue
        m = re.search(fig.pattern, output, re.MULTILINE)
        if m:
            found[fig.name] = float(m.group(1).replace(",", ""))
    return found


@dataclass
class Summary:
    """Per figure: the median of each revision's rounds and new / old of those medians
    (``None`` where a side has no value, or the old median is 0)."""

    old: dict[str, float | None] = field(default_factory=dict)
    new: dict[str, float | None] = field(default_factory=dict)
    ratio: dict[str, float | None] = field(default_factory=dict)


def summarize(bench: str, old_runs: list[dict[str, float]], new_runs: list[dict[str, float]]
              ) -> Summary:
    """The medians and ratios of ``bench``'s figures over each revision's finished runs (a
    figure a run did not print is left out of that side's median, not counted as 0)."""
    out = Summary()
    for fig in FIGURES[bench].figures:
        for side, runs in ((out.old, old_runs), (out.new, new_runs)):
            values = [r[fig.name] for r in runs if fig.name in r]
            side[fig.name] = statistics.median(values) if values else None
        o, n = out.old[fig.name], out.new[fig.name]
        out.ratio[fig.name] = n / o if o and n is not None else None
    return out


def load() -> str:
    """The 1-, 5- and 15-minute load averages, as printed."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def check_tree(tree: Path) -> None:
    """Refuse to measure a tree whose code would not be what runs (see the module doc)."""
    probe = ("import broker_core, tests.support.cluster as c; "
             "print(broker_core.__file__); print(c.ROOT)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tree, check=True, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(tree)})
    for line in out.stdout.splitlines():
        if not Path(line).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"{tree}: imports {line}, not its own code")


def run_bench(tree: Path, script: str, bench_args: list[str], tag: str) -> tuple[str, int]:
    """One run of ``script`` of ``tree``; its output is echoed as it comes and returned with
    its exit status. On any interruption the bench is sent SIGTERM (its own cleanup stops
    its brokers and ZooKeeper) and waited for, never killed first."""
    proc = subprocess.Popen([sys.executable, str(tree / script), *bench_args], cwd=tree,
                            env={**os.environ, "PYTHONPATH": str(tree),
                                 "PYTHONUNBUFFERED": "1"},  # echoed line by line
                            text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            print(f"    {tag} | {line}", end="", flush=True)
        return "".join(lines), proc.wait()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(180)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("msg/s", "partitions"):
        return f"{value:,.0f}"
    return f"{value:.3f}" if unit == "s/1k" else f"{value:.2f}"


def report(bench: str, rows: list[tuple[int, str, dict[str, float], str]],
           summary: Summary, revs: dict[str, str]) -> None:
    """One line per figure: every run in order, the medians and new / old; then each run's
    load average before and after it."""
    figs = FIGURES[bench].figures
    runs = [f"{side} {rnd}" for rnd, side, _, _ in rows]
    width = max(len(f.name) + len(f.unit) + 3 for f in figs)
    print(f"\n{bench}: old = {revs['old']}, new = {revs['new']}")
    print(f"{'':{width}}" + "".join(f"{r:>11}" for r in runs)
          + f"{'median old':>12}{'median new':>12}{'new / old':>11}")
    for f in figs:
        ratio = summary.ratio[f.name]
        print(f"{f'{f.name} ({f.unit})':{width}}"
              + "".join(f"{fmt(figures.get(f.name), f.unit):>11}" for _, _, figures, _ in rows)
              + f"{fmt(summary.old[f.name], f.unit):>12}{fmt(summary.new[f.name], f.unit):>12}"
              + f"{'-' if ratio is None else f'{ratio:.2f}':>11}")
    for (rnd, side, _, loads) in rows:
        print(f"  load average, {side} {rnd}: {loads}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", choices=sorted(FIGURES), required=True)
    ap.add_argument("--old-rev", default="a45906f")
    ap.add_argument("--new-rev", default=None, help="default: this working tree")
    ap.add_argument("--rounds", type=int, default=3)
    args, bench_args = ap.parse_known_args()
    if bench_args[:1] == ["--"]:
        bench_args = bench_args[1:]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # run the cleanup
    sys.path.insert(0, str(ROOT))
    from bench.common import extract_revision

    bench = FIGURES[args.bench]
    temps: list[Path] = []
    try:
        trees: dict[str, Path] = {}
        revs = {"old": args.old_rev, "new": args.new_rev or "working tree"}
        for side, rev in (("old", args.old_rev), ("new", args.new_rev)):
            if rev is None:
                trees[side] = ROOT
                continue
            temps.append(Path(tempfile.mkdtemp(prefix=f"sluice-compare-{side}-")))
            extract_revision(ROOT, rev, temps[-1])
            trees[side] = temps[-1]
            revs[side] = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT,
                                        check=True, capture_output=True,
                                        text=True).stdout.strip()
        if args.new_rev is None:
            head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                  check=True, capture_output=True, text=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=ROOT, check=True, capture_output=True,
                                   text=True).stdout.strip()
            revs["new"] = f"working tree at {head}" + (" (modified)" if dirty else "")
        for tree in trees.values():
            check_tree(tree)
        print(f"load average at the start: {load()}", flush=True)
        rows: list[tuple[int, str, dict[str, float], str]] = []
        runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        try:
            measure(args, bench, trees, revs, bench_args, rows, runs)
        finally:  # stopped early (Ctrl-C, SIGTERM): what the finished runs measured
            if rows:
                report(args.bench, rows, summarize(args.bench, runs["old"], runs["new"]),
                       revs)
                print(f"load average at the end: {load()}")
    finally:
        for t in temps:
            shutil.rmtree(t, ignore_errors=True)


def measure(args: argparse.Namespace, bench: Bench, trees: dict[str, Path],
            revs: dict[str, str], bench_args: list[str],
            rows: list[tuple[int, str, dict[str, float], str]],
            runs: dict[str, list[dict[str, float]]]) -> None:
    """The rounds, old then new in each; appends to ``rows`` and ``runs`` as runs finish."""
    for rnd in range(1, args.rounds + 1):
        for side in ("old", "new"):
            print(f"round {rnd}, {side} ({revs[side]}): {bench.script} "
                  f"{' '.join(bench_args)}", flush=True)
            before = load()
            output, status = run_bench(trees[side], bench.script, bench_args, side)
            loads = f"{before} / {load()}"
            figures = parse_figures(args.bench, output) if status == 0 else {}
            if status != 0:
                print(f"  round {rnd}, {side}: FAILED (exit {status}); left out")
            else:
                runs[side].append(figures)
            rows.append((rnd, side, figures, loads))


if __name__ == "__main__":
    main()
