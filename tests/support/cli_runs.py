"""Running the installed ``sluice`` command as a user would, and reading what it printed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.cluster import ROOT

SLUICE = Path(sys.executable).with_name("sluice")  # the installed console script


CLI_TIMEOUT = 60.0


def sluice(*args: str, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    assert SLUICE.exists(), f"console script {SLUICE} is not installed"
    return subprocess.run([str(SLUICE), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def ok(*args: str) -> str:
    r = sluice(*args)
    assert r.returncode == 0, f"sluice {' '.join(args)} -> {r.returncode}: {r.stderr}"
    return r.stdout


def eventually(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition"):
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def one_line_error(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {r.stderr!r}"
    assert lines[0].startswith("sluice: "), lines[0]
    return lines[0]


def parse_describe(out: str) -> dict[str, dict[str, Any]]:
    """``topics describe`` output -> {topic: {count, rf, configs, deleting, partitions}}."""
    topics: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        if not line.strip():
            continue
        fields = dict(f.split(": ", 1) if ": " in f else (f.rstrip(":"), "")
                      for f in line.strip("\n").lstrip("\t").split("\t"))
        if line.startswith("\t"):
            t = topics[fields["Topic"]]
            t["partitions"][int(fields["Partition"])] = {
                "leader": None if fields["Leader"] == "none" else int(fields["Leader"]),
                "epoch": int(fields["Epoch"]),
                "replicas": [int(x) for x in fields["Replicas"].split(",") if x],
                "isr": [int(x) for x in fields["Isr"].split(",") if x],
            }
        else:
            configs = fields["Configs"].strip()
            topics[fields["Topic"]] = {
                "count": int(fields["PartitionCount"]),
                "rf": int(fields["ReplicationFactor"]),
                "configs": dict(kv.split("=", 1) for kv in configs.split(",") if kv),
                "deleting": fields.get("MarkedForDeletion") == "true",
                "partitions": {},
            }
    return topics


def describe(conn: list[str], topic: str) -> dict[str, Any]:
    return parse_describe(ok("topics", "describe", "--topic", topic, *conn))[topic]


