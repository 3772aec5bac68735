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
        def settled():
            # The leader that committed last, and describe given a node that is not it names
            # it: with short election timeouts a second election can follow the first at
            # start-up, and then the answer rightly names the newer leader; wait that out.
            first = quorum.leader_committed()
            if first is None:
                return None
            followers = [n for n in quorum.nodes if n != first["node"]]
            d = describe(f"127.0.0.1:{quorum.nodes[followers[0]].port}")
            if (d["leader_id"], d["leader_epoch"]) != (first["node"], first["epoch"]):
                return None
            return first, followers, d

        first, followers, d = quorum.wait(settled, 30, "a leader that describe finds")
        assert sorted(voter_ids(d)) == [1, 2, 3] and d["observers"] == []
        assert d["high_watermark"] > 0

        quorum.nodes[first["node"]].kill9()
        d = describe(f"127.0.0.1:{quorum.nodes[followers[1]].port}")
        assert d["leader_id"] in followers and d["leader_epoch"] > first["epoch"]
        assert sorted(voter_ids(d)) == [1, 2, 3]
        # A new leader answers DescribeQuorum as soon as it is elected, which can be before it
        # has committed in its epoch and logged so: wait for that, then it is the one named.
        latest = quorum.wait(lambda: quorum.leader_committed(d["leader_epoch"] - 1), 30,
                             "the new leader to commit in its epoch")
        assert (latest["node"], latest["epoch"]) == (d["leader_id"], d["leader_epoch"])
    finally:
        quorum.stop()
