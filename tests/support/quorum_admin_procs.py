"""Helpers of the `sluice quorum` process tests: the CLI run against quorum processes and its
answers read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from broker_core.raft.storage import DiskRaftLog
from tests.support.quorum_processes import ROOT

TIMEOUTS = ["--election-timeout-ms", "300", "--fetch-timeout-ms", "600",
            "--election-backoff-max-ms", "300", "--request-timeout-ms", "500",
            "--fetch-max-wait-ms", "200"]


def sluice(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sluice_tools.cli", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def describe(servers: str) -> dict:
    done = sluice("quorum", "describe", "--bootstrap-server", servers, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def voter_ids(d: dict) -> list[int]:
    return [r["replica_id"] for r in d["current_voters"]]


def read_log(data_dir) -> list:
    log = DiskRaftLog.open(data_dir, time_ms=lambda: 0)
    try:
        return log.read(0, log.end_offset())
    finally:
        log.close()


