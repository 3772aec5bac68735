"""The quorum's admin APIs end to end: ``sluice-quorum`` processes, and ``sluice quorum
describe|reassign`` run as processes against their listeners.

- The bootstrapping example: node 1 alone (voters = itself), described; nodes 2 and 3
  started as observers; ``reassign --voters 1,2,3 --wait``; describe shows three voters.
- The issue's acceptance: voters (1, 2, 3) moved to (4, 5, 6) while the leader writes without
  pause (its load loop). It completes, every acknowledged write is on a majority of the final
  voters' disks at its offset, and the CurrentVoters of the log's VoterAssignment entries go
  through the single-member steps of docs/design.md#voter-reassignment.
"""

from __future__ import annotations

import shutil

import pytest

from broker_core.raft.entries import LeaderChange, VoterAssignment
from broker_core.raft.reassignment import Add, Remove, ResignThenRemove, next_step
from tests.support.quorum_admin_procs import TIMEOUTS, describe, read_log, sluice, voter_ids
from tests.support.quorum_processes import QuorumProcesses

pytestmark = pytest.mark.slow











def test_the_bootstrapping_example_grows_one_node_to_three(tmp_path):
    """Node 1 alone (voters = itself, no cluster id: it generates one); nodes 2 and 3 given
    only ``--bootstrap-servers`` node 1 learn the cluster id, the voters and the endpoints
    through DiscoverBrokers, and node 1 learns theirs."""
    quorum = QuorumProcesses(tmp_path, size=3, voters=1, extra=TIMEOUTS)
    node1 = quorum.nodes[1]
    try:
        node1.start(quorum.voters, None)
        quorum.wait(lambda: quorum.leader_committed(), 30, "node 1 leading")
        d = describe(quorum.bootstrap_servers)
        assert d["leader_id"] == 1 and voter_ids(d) == [1] and d["observers"] == []
        for n in (2, 3):
            quorum.nodes[n].start(None, None, bootstrap=f"127.0.0.1:{node1.port}")
        quorum.wait(lambda: sorted(r["replica_id"] for r in describe(
            quorum.bootstrap_servers)["observers"]) == [2, 3], 30, "2 and 3 observing")
        done = sluice("quorum", "reassign", "--bootstrap-server", quorum.bootstrap_servers,
                      "--voters", "1,2,3", "--wait", "--timeout", "60")
        assert done.returncode == 0, done.stderr
        assert "Done: the voters are 1,2,3" in done.stdout
        d = describe(quorum.bootstrap_servers)
        assert voter_ids(d) == [1, 2, 3] and d["target_voters"] is None
        assert d["observers"] == []
        table = sluice("quorum", "describe", "--bootstrap-server", quorum.bootstrap_servers)
        assert table.returncode == 0 and "CurrentVoters:  [1,2,3]" in table.stdout
        (generated,) = [e for e in node1.events() if e["event"] == "cluster-id"]
        for n in (2, 3):
            (found,) = [e for e in quorum.nodes[n].events() if e["event"] == "discovered"]
            assert found["cluster_id"] == generated["cluster_id"] and found["voters"] == [1]
        # The grown quorum survives its first leader: 2 and 3 elect one of them, which they
        # can only do with each other's endpoints, learned by gossip.
        node1.stop()
        quorum.wait(lambda: quorum.leader_committed(d["leader_epoch"]), 30, "a new leader")
    finally:
        quorum.stop()


def test_voters_move_to_4_5_6_while_the_leader_writes(tmp_path):
    quorum = QuorumProcesses(tmp_path, size=6, voters=3,
                             extra=[*TIMEOUTS, "--load-in-flight", "8", "--print-acks"])

    def acks() -> dict[int, str]:
        out: dict[int, str] = {}
        for p in quorum.nodes.values():
            for e in p.events():
                if e["event"] == "ack":
                    assert out.setdefault(e["offset"], e["tag"]) == e["tag"], e
        return out

    try:
        quorum.start()
        first = quorum.wait(lambda: quorum.leader_committed(), 30, "a leader")
        assert first["node"] in (1, 2, 3)
        quorum.wait(lambda: len(acks()) >= 200, 30, "writes before the reassignment")
        done = sluice("quorum", "reassign", "--bootstrap-server", quorum.bootstrap_servers,
                      "--voters", "4,5,6", "--wait", "--timeout", "90")
        assert done.returncode == 0, done.stderr
        final = quorum.wait(lambda: quorum.leader_committed(first["epoch"]), 30,
                            "a leader among 4, 5, 6")
        assert final["node"] in (4, 5, 6)
        leader = quorum.nodes[final["node"]]
        before = len(acks())
        quorum.wait(lambda: sum(1 for e in leader.events() if e["event"] == "ack") >= 100,
                    30, "writes under the new voters")
        d = describe(quorum.bootstrap_servers)
        assert voter_ids(d) == [4, 5, 6] and d["target_voters"] is None
        assert len(acks()) > before
    finally:
        quorum.stop()

    acked = acks()
    logs = {n: read_log(p.data_dir) for n, p in quorum.nodes.items()}
    for offset, tag in acked.items():
        holders = [n for n in (4, 5, 6) if offset < len(logs[n])
                   and logs[n][offset].payload.startswith(tag.encode() + b".")]
        assert len(holders) >= 2, (offset, tag, holders)

    # The voter sets the final leader's log went through, each step checked against the
    # reassignment planner's rules for the leader of its time.
    entries = logs[final["node"]]
    sets: list[tuple[int, ...]] = []
    leaders: list[int] = []
    leader_id = -1
    for e in entries:
        if isinstance(e.payload, LeaderChange):
            leader_id = e.payload.leader_id
        elif isinstance(e.payload, VoterAssignment):
            voters = tuple(sorted(e.payload.current_voters))
            if not sets or sets[-1] != voters:
                sets.append(voters)
                leaders.append(leader_id)
    assert sets[0] == (1, 2, 3) and sets[-1] == (4, 5, 6), sets
    assert len(sets) == 7, sets  # three adds and three removals, one member at a time
    target = (4, 5, 6)
    for before_set, after_set, by in zip(sets, sets[1:], leaders[1:], strict=False):
        step = next_step(before_set, target, by if by in before_set else before_set[0],
                         caught_up=set(target))
        added, removed = set(after_set) - set(before_set), set(before_set) - set(after_set)
        if isinstance(step, Add):
            assert not removed and len(added) == 1 and added <= set(target), sets
        elif isinstance(step, Remove):
            assert not added and removed == {step.voter_id}, (sets, leaders)
        else:
            # The leader itself must go: it resigned and the next leader removed it.
            assert isinstance(step, ResignThenRemove) or by not in before_set, (sets, leaders)
            assert not added and len(removed) == 1, sets


def test_the_bootstrapping_voter_generates_the_cluster_id_and_other_ids_are_refused(tmp_path):
    quorum = QuorumProcesses(tmp_path, size=3, voters=1, extra=TIMEOUTS)
    node1, node2, node3 = (quorum.nodes[n] for n in (1, 2, 3))
    try:
        node1.start(quorum.voters, None, quorum.peers)
        quorum.wait(lambda: quorum.leader_committed(), 30, "node 1 leading")
        (event,) = [e for e in node1.events() if e["event"] == "cluster-id"]
        cluster_id = event["cluster_id"]
        assert event["generated"] and len(cluster_id) == 22
        # Node 2 with the generated id observes; node 3 with another id is refused by the
        # leader (INCONSISTENT_CLUSTER_ID) and never shows up as an observer.
        node2.start(quorum.voters, cluster_id, quorum.peers)
        node3.start(quorum.voters, "some-other-cluster", quorum.peers)
        quorum.wait(lambda: [r["replica_id"] for r in describe(
            quorum.bootstrap_servers)["observers"]] == [2], 30, "node 2 observing")
        node3.stop()
        assert read_log(node3.data_dir) == ()
        # A fresh observer without --cluster-id may not make one up.
        shutil.rmtree(node3.data_dir)
        node3.start(quorum.voters, None, quorum.peers)
        assert node3.proc is not None and node3.proc.wait(30) == 2
        assert "--cluster-id is needed" in node3.stderr_path.read_text()
        node3.proc = None  # exited as it should: not a failure for quorum.wait
        # Node 1 restarted without --cluster-id reads its own back.
        node1.stop()
        node1.start(quorum.voters, None, quorum.peers)
        quorum.wait(lambda: len([e for e in node1.events() if e["event"] == "cluster-id"]) == 2,
                    30, "node 1 restarted")
        assert [e for e in node1.events() if e["event"] == "cluster-id"][1] == {
            **[e for e in node1.events() if e["event"] == "cluster-id"][1],
            "cluster_id": cluster_id, "generated": False}
    finally:
        quorum.stop()
    entries = read_log(node1.data_dir)
    assert entries[0].payload == VoterAssignment(cluster_id, (1,), None)
