"""The admin client in ZooKeeper mode, used as a library: one process runs several operations
(each used to start a reactor of its own, and a reactor cannot be started twice)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.cluster import ROOT

SCRIPT = """
import json, sys
from sluice_tools.admin import AdminClient, AdminError

hosts = sys.argv[1]
seen = [AdminClient(zookeeper=hosts).list_topics() for _ in range(3)]
try:
    AdminClient(zookeeper=hosts).create_topic("t", 1, 1)  # no broker is registered
except AdminError as e:
    seen.append(str(e))
print(json.dumps(seen))
"""


def test_one_process_runs_several_zookeeper_operations(zk_hosts):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, zk_hosts], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen[:3] == [[], [], []]
    assert len(seen) == 4 and "broker" in seen[3].lower(), seen[3]
