"""Run three real brokers under load, scraped by a real Prometheus, and render the dashboard.

    .venv/bin/python contrib/grafana/demo.py --out docs/images/grafana-dashboard.png

What it does, in order: starts three brokers in quorum mode (``twistd broker`` processes on free
ports of 127.0.0.1, each serving /metrics), writes a Prometheus configuration scraping them
every 5 s under ``job="sluice"`` and starts ``prometheus`` (Debian's package) on a free port;
then, for ``--duration`` seconds, a producer writes to a 6-partition topic (replication factor
3, ``acks=all``) while ``sluice loadtest`` runs consumer groups on it in two worker processes
(one is killed halfway: the coordinator expires its consumers and rebalances), and one broker is stopped
for a while and started again (ISR shrinks and expands, a leader moves). Last it renders the
dashboard through Prometheus' HTTP API (``render.py``) and stops everything it started.

Everything lives in a temporary directory (``--workdir`` to keep it: the Prometheus data can
be rendered again with ``render.py`` after ``prometheus --storage.tsdb.path=WORKDIR/prometheus
--config.file=WORKDIR/prometheus.yml`` is started again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.support.cluster import free_port  # noqa: E402
from tests.support.procs import ProcessCluster  # noqa: E402

TOPIC = "demo-events"


def prometheus_config(targets: list[str], interval: str = "5s") -> str:
    """A Prometheus configuration scraping ``targets`` (host:port of /metrics) as job sluice."""
    listed = ", ".join(f"'{t}'" for t in targets)
    return (f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
            f"scrape_configs:\n  - job_name: sluice\n    static_configs:\n"
            f"      - targets: [{listed}]\n")


def wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"prometheus at {url} not ready in {timeout:.0f} s")
        time.sleep(0.5)


def produce(bootstrap: str, stop: threading.Event, rate: float) -> None:
    """Send small records at about ``rate`` per second until ``stop`` (errors are printed and
    the producer goes on: a broker is stopped on purpose in the middle of the run)."""
    from consumer_client.blocking_producer import BlockingProducer

    with BlockingProducer({"bootstrap.servers": bootstrap, "linger.ms": "20"}) as producer:
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            for _ in range(max(1, int(rate / 10))):
                producer.send(TOPIC, value=b"x" * 200, key=str(n % 97).encode())
                n += 1
            stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("grafana-dashboard.png"))
    ap.add_argument("--duration", type=float, default=240.0, help="seconds of load (default 240)")
    ap.add_argument("--rate", type=float, default=300.0, help="records per second produced")
    ap.add_argument("--consumers", type=int, default=40)
    ap.add_argument("--workdir", type=Path, help="keep everything here (default: a temp dir)")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    args = ap.parse_args(argv)
    if shutil.which(args.prometheus) is None:
        print(f"demo: no prometheus executable ({args.prometheus}); on Debian: apt-get install "
              "prometheus", file=sys.stderr)
        return 2

    work = args.workdir or Path(tempfile.mkdtemp(prefix="sluice-grafana-"))
    work.mkdir(parents=True, exist_ok=True)
    cluster = ProcessCluster(None, work / "brokers", size=3, metrics=True, quorum=True)
    prom = None
    stop = threading.Event()
    try:
        cluster.start()
        cluster.wait_registered(timeout=90)
        targets = [f"127.0.0.1:{b.metrics_port}" for b in cluster.brokers.values()]
        (work / "prometheus.yml").write_text(prometheus_config(targets))
        prom_port = free_port()
        prom_url = f"http://127.0.0.1:{prom_port}"
        prom_log = open(work / "prometheus.log", "ab")
        prom = subprocess.Popen(
            [args.prometheus, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'prometheus'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=prom_log, stderr=prom_log)
        prom_log.close()
        wait_ready(prom_url)
        print(f"demo: brokers {cluster.bootstrap}, prometheus {prom_url}, workdir {work}")
        start = time.time()

        loadtest = subprocess.Popen(
            [sys.executable, "-m", "sluice_tools.cli", "loadtest",
             "--bootstrap-server", cluster.bootstrap, "--topic", TOPIC, "--partitions", "6",
             "--replication-factor", "3", "--consumers", str(args.consumers),
             "--processes", "2", "--groups", "4", "--ramp", "20",
             "--duration", str(args.duration), "--kill-share", "0.5",
             "--kill-at", str(args.duration / 2), "--out", str(work / "loadtest"), "--quiet"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        time.sleep(15)  # the loadtest creates the topic
        producer = threading.Thread(target=produce, args=(cluster.bootstrap, stop, args.rate),
                                    daemon=True)
        producer.start()

        time.sleep(args.duration * 0.3)
        victim = cluster.brokers[3]
        print("demo: stopping broker 3")
        victim.stop()
        time.sleep(min(60.0, args.duration * 0.25))
        print("demo: starting broker 3 again")
        victim.start()
        victim.wait_listening()
        loadtest.wait(timeout=args.duration + 300)
        stop.set()
        producer.join(timeout=30)
        time.sleep(10)  # one more scrape after the load

        import render
        render.render(render.dashboard.load(), prom_url, start, time.time(), args.out)
        print(f"demo: wrote {args.out}")
        return 0
    finally:
        stop.set()
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
        cluster.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
