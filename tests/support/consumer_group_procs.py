"""Consumer processes of Sluice's client in a group, and how to wait for a group to be stable.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.cluster import ROOT

SESSION_MS = 4000


class ConsumerProc:
    def __init__(self, base: Path, bootstrap: str, group: str, cid: str, topics: str,
                 pattern: str = "static") -> None:
        self.cid = cid
        self.out = base / f"{group}-{cid}.jsonl"
        self.spec = {"bootstrap": bootstrap, "group": group, "consumer_id": cid,
                     "topics": topics, "pattern": pattern, "session_timeout_ms": SESSION_MS,
                     "out": str(self.out)}
        self.err = open(base / f"{group}-{cid}.stderr", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.consumer_process", json.dumps(self.spec)],
            cwd=ROOT, stdout=self.err, stderr=self.err)

    def events(self) -> list[dict]:
        try:
            lines = self.out.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def describe(bootstrap: str, group: str):
    from sluice_tools.admin import describe_groups

    return describe_groups(bootstrap, [group], timeout=5)[0]


def stable(bootstrap: str, group: str, members: int, partitions: int):
    """The group's description once it is stable with ``members`` members owning exactly
    ``partitions`` partitions, each once; else None."""
    from sluice_tools.admin import AdminError

    try:
        g = describe(bootstrap, group)
    except AdminError:  # no coordinator yet, or it does not know the group yet
        return None
    owned = [p for p in g.partitions if p.owner is not None]
    if (g.state == "stable" and len(g.members) == members and len(owned) == partitions
            and len({(p.topic, p.partition) for p in owned}) == partitions):
        return g
    return None


