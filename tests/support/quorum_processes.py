"""Quorum nodes as ``python -m broker_core.raft`` processes on 127.0.0.1, read through their
``--events`` lines: for the system tests and ``bench/raft_quorum.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.cluster import free_port

ROOT = Path(__file__).resolve().parents[2]


class QuorumProcess:
    """One node: its port, data directory and event log (stdout, one JSON object a line)."""

    def __init__(self, node_id: int, port: int, base: Path, extra: list[str]) -> None:
        self.node_id = node_id
        self.port = port
        self.data_dir = base / f"node-{node_id}"
        self.stdout_path = base / f"node-{node_id}.events"
        self.stderr_path = base / f"node-{node_id}.log"
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self._events: list[dict[str, Any]] = []
        self._read_pos = 0
        self._partial = b""
        self.starts = 0

    def start(self, voters: str | None, cluster_id: str | None, peers: str = "",
              bootstrap: str = "") -> None:
        """Start the process; ``voters`` or ``cluster_id`` None leaves ``--quorum-voters`` or
        ``--cluster-id`` out, ``bootstrap`` is ``--bootstrap-servers``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        args = [sys.executable, "-m", "broker_core.raft", "--node-id", str(self.node_id),
                *(["--quorum-voters", voters] if voters is not None else []),
                *(["--bootstrap-servers", bootstrap] if bootstrap else []),
                "--listen", f"127.0.0.1:{self.port}",
                "--data-dir", str(self.data_dir),
                *(["--cluster-id", cluster_id] if cluster_id is not None else []), "--events",
                *(["--peers", peers] if peers else []), *self.extra]
        self.starts += 1
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, cwd=ROOT, env=env)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> float:
        """SIGKILL; returns the time (``time.time()``) just before the signal."""
        assert self.proc is not None
        t = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return t

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (a clean stop), SIGKILL if it does not exit in ``timeout`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def events(self) -> list[dict[str, Any]]:
        """Every event printed so far (all incarnations), in order."""
        try:
            with open(self.stdout_path, "rb") as f:
                f.seek(self._read_pos)
                data = f.read()
        except FileNotFoundError:
            return self._events
        self._read_pos += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self._events.append(json.loads(line))
        return self._events


class QuorumProcesses:
    """``size`` nodes (ids 1..size) on free ports under ``base``; the first ``voters`` of them
    (default all) are the bootstrap voters, the others start as observers, and every node is
    given every other's address (``--peers``)."""

    def __init__(self, base: Path, size: int = 3, extra: list[str] | None = None,
                 cluster_id: str = "quorum-sys", voters: int | None = None) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.cluster_id = cluster_id
        self.nodes = {n: QuorumProcess(n, free_port(), base, list(extra or []))
                      for n in range(1, size + 1)}
        voter_count = size if voters is None else voters
        self.voters = ",".join(f"{n}@127.0.0.1:{p.port}" for n, p in self.nodes.items()
                               if n <= voter_count)
        self.peers = ",".join(f"{n}@127.0.0.1:{p.port}" for n, p in self.nodes.items()
                              if n > voter_count)

    @property
    def bootstrap_servers(self) -> str:
        """Every node's quorum listener, for ``sluice quorum --bootstrap-server``."""
        return ",".join(f"127.0.0.1:{p.port}" for p in self.nodes.values())

    def start(self, node_id: int | None = None, extra: list[str] | None = None) -> None:
        for n, p in self.nodes.items():
            if node_id is None or n == node_id:
                if extra is not None:
                    p.extra = list(extra)
                p.start(self.voters, self.cluster_id, self.peers)

    def stop(self) -> None:
        for p in self.nodes.values():
            p.stop()

    def wait(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            for p in self.nodes.values():
                if p.proc is not None and p.proc.poll() not in (None, 0, -9):
                    raise AssertionError(f"node {p.node_id} exited with {p.proc.returncode}; "
                                         f"see {p.stderr_path}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.02)

    def leader_committed(self, after_epoch: int = 0) -> dict[str, Any] | None:
        """The newest ``leader-committed`` event of an epoch above ``after_epoch`` from a
        running node, if any."""
        best = None
        for p in self.nodes.values():
            if not p.running:
                continue
            for e in p.events():
                if e["event"] == "leader-committed" and e["epoch"] > after_epoch and (
                        best is None or e["epoch"] > best["epoch"]):
                    best = e
        return best
