"""The start procedure driving ``sluice-quorum`` processes: three fresh voters given by
id only (``--quorum-voters 1,2,3``), each with one other node as its bootstrap server and no
``--peers``, find each other's addresses by gossip, elect a leader and commit; restarted from
their data directories, they rejoin the same cluster without falling back to
``--quorum-voters``."""

from __future__ import annotations

import pytest

from broker_core.raft.entries import VoterAssignment
from tests.support.quorum_admin_procs import TIMEOUTS, read_log
from tests.support.quorum_processes import QuorumProcesses

pytestmark = pytest.mark.slow

CLUSTER = "boot-sys"


def phases(events: list[dict], since: int = 0) -> list[str]:
    return [e["phase"] for e in events[since:] if e["event"] == "bootstrap"]


def test_voters_known_by_id_find_each_other_by_gossip_and_rejoin_after_a_restart(tmp_path):
    quorum = QuorumProcesses(tmp_path, size=3, extra=[*TIMEOUTS, "--discovery-timeout-ms", "300"])
    ring = {n: quorum.nodes[n % 3 + 1].port for n in (1, 2, 3)}  # 1 asks 2, 2 asks 3, 3 asks 1

    def start_all() -> None:
        for n, p in quorum.nodes.items():
            p.start("1,2,3", CLUSTER, bootstrap=f"127.0.0.1:{ring[n]}")

    try:
        start_all()
        first = quorum.wait(lambda: quorum.leader_committed(), 30, "a leader")
        quorum.wait(lambda: all("started" in phases(p.events()) for p in quorum.nodes.values()),
                    30, "every node started")
        formed = 0
        for p in quorum.nodes.values():
            events = p.events()
            # Nothing found (a fresh cluster): quorum.voters decides, then a majority of its
            # voters' addresses, learned by gossip, starts the vote (steps 5 and 6); a node
            # slower to give up discovering finds the others' quorum and joins it instead.
            assert phases(events) in (["discovering", "waiting for voters", "started"],
                                      ["discovering", "started"]), phases(events)
            formed += "waiting for voters" in phases(events)
            (started,) = [e for e in events if e.get("phase") == "started"]
            assert started["voters"] == [1, 2, 3] and started["as_voter"]
        assert formed >= 1
        # Every node knows the leader (so its quorum-state file holds the epoch) before the
        # restart: a node that never heard of an election is a fresh node still.
        quorum.wait(lambda: all(any(e["event"] == "role" and e["epoch"] == first["epoch"]
                                    and e["leader"] == first["node"] for e in p.events())
                                for p in quorum.nodes.values()), 30, "every node following")
        quorum.stop()
        seen = {n: len(p.events()) for n, p in quorum.nodes.items()}

        start_all()
        quorum.wait(lambda: quorum.leader_committed(first["epoch"]), 30, "a leader again")
        quorum.wait(lambda: all("started" in phases(p.events(), seen[n])
                                for n, p in quorum.nodes.items()), 30, "every node started")
        for n, p in quorum.nodes.items():
            events = p.events()
            # Each knows its quorum from its own files: it waits for that quorum's addresses
            # and never forms one from quorum.voters.
            assert "waiting for voters" not in phases(events, seen[n])
            assert phases(events, seen[n])[-1] == "started"
            assert [e["cluster_id"] for e in events[seen[n]:]
                    if e["event"] == "cluster-id"] == [CLUSTER]
    finally:
        quorum.stop()
    for p in quorum.nodes.values():
        assert read_log(p.data_dir)[0].payload == VoterAssignment(CLUSTER, (1, 2, 3), None)
