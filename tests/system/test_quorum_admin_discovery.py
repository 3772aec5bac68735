"""``sluice quorum`` finds the leader through DiscoverBrokers, end to end: three
``sluice-quorum`` processes, and ``sluice quorum describe`` run as a process given only one
node that does not lead (the admin client uses DiscoverBrokers and Metadata
to discover the current leader).

- Given one follower, describe answers with the leader's view: the leader, three voters.
- The leader killed with SIGKILL, describe given the other follower (whose DiscoverBrokers
  answer may still name the dead leader until the election) answers with the new leader, in
  a higher epoch.
"""

from __future__ import annotations

import pytest

from tests.support.quorum_admin_procs import TIMEOUTS, describe, voter_ids
from tests.support.quorum_processes import QuorumProcesses

pytestmark = pytest.mark.slow


def test_describe_given_one_follower_finds_the_leader_and_a_new_one_after_a_kill(tmp_path):
    quorum = QuorumProcesses(tmp_path, size=3, extra=TIMEOUTS)
    try:
        quorum.start()
        first = quorum.wait(lambda: quorum.leader_committed(), 30, "a leader")
        followers = [n for n in quorum.nodes if n != first["node"]]

        d = describe(f"127.0.0.1:{quorum.nodes[followers[0]].port}")
        assert d["leader_id"] == first["node"] and d["leader_epoch"] >= first["epoch"]
        assert sorted(voter_ids(d)) == [1, 2, 3] and d["observers"] == []
        assert d["high_watermark"] > 0

        quorum.nodes[first["node"]].kill9()
        d = describe(f"127.0.0.1:{quorum.nodes[followers[1]].port}")
        assert d["leader_id"] in followers and d["leader_epoch"] > first["epoch"]
        assert sorted(voter_ids(d)) == [1, 2, 3]
        latest = quorum.leader_committed(first["epoch"])
        assert latest is not None and latest["node"] == d["leader_id"]
    finally:
        quorum.stop()
