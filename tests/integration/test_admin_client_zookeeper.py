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


FAILURES = """
import json, sys
from sluice_tools.admin import AdminClient, AdminError

seen = []
for hosts in sys.argv[1:]:
    try:
        AdminClient(zookeeper=hosts).list_topics()
        seen.append(None)
    except AdminError as e:
        seen.append(str(e))
print(json.dumps(seen))
"""


def test_a_session_that_cannot_start_is_reported_with_its_real_cause(zk_hosts):
    """Not every failed start is an unreachable ZooKeeper: an address the client cannot parse
    says so; one that works still works after it in the same process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FAILURES, "127.0.0.1:notaport", ":2181", zk_hosts],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    bad_port, no_host, fine = json.loads(done.stdout)
    assert bad_port == ("could not start a ZooKeeper session with '127.0.0.1:notaport': Port "
                        "could not be cast to integer value as 'notaport'")
    assert no_host == "could not start a ZooKeeper session with ':2181': bad hostname"
    assert fine is None
