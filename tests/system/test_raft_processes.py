"""Three quorum nodes as processes; the leader writes without pause (its load loop) and is
killed with SIGKILL again and again. Every write it acknowledged (committed) must be in the
final leader's log at the offset it was acknowledged at, and on a majority of the nodes' disks."""

from __future__ import annotations

import pytest

from broker_core.raft.storage import DiskRaftLog
from tests.support.quorum_processes import QuorumProcesses

pytestmark = pytest.mark.slow

# Short timeouts keep the test quick; the figures at the defaults are bench/raft_quorum.py's.
TIMEOUTS = ["--election-timeout-ms", "300", "--fetch-timeout-ms", "600",
            "--election-backoff-max-ms", "300", "--request-timeout-ms", "500",
            "--fetch-max-wait-ms", "200"]
KILLS = 3


def test_every_acknowledged_write_survives_repeated_leader_kills(tmp_path):
    quorum = QuorumProcesses(tmp_path, extra=[*TIMEOUTS, "--load-in-flight", "8",
                                              "--print-acks"])
    try:
        quorum.start()
        epoch = 0
        for _ in range(KILLS):
            event = quorum.wait(lambda e=epoch: quorum.leader_committed(e), 30,
                                f"a leader above epoch {epoch} committing")
            epoch = event["epoch"]
            victim = quorum.nodes[event["node"]]
            quorum.wait(lambda v=victim, ep=epoch: sum(
                1 for e in v.events() if e["event"] == "ack" and f"-e{ep}-" in e["tag"]) >= 200,
                30, "acknowledged writes")
            victim.kill9()
            quorum.wait(lambda e=epoch: quorum.leader_committed(e), 30, "a new leader")
            victim.start(quorum.voters, quorum.cluster_id)
        final = quorum.wait(lambda e=epoch: quorum.leader_committed(e), 30, "a final leader")
        leader = quorum.nodes[final["node"]]
        quorum.wait(lambda: sum(1 for e in leader.events() if e["event"] == "ack") >= 100,
                    30, "writes under the final leader")
    finally:
        quorum.stop()

    acked = {}
    for p in quorum.nodes.values():
        for e in p.events():
            if e["event"] == "ack":
                assert acked.setdefault(e["offset"], e["tag"]) == e["tag"], \
                    f"offset {e['offset']} acknowledged twice with different writes"
    assert len(acked) >= KILLS * 200
    logs = {}
    for n, p in quorum.nodes.items():
        log = DiskRaftLog.open(p.data_dir, time_ms=lambda: 0)
        try:
            logs[n] = log.read(0, log.end_offset())
        finally:
            log.close()
    for offset, tag in acked.items():
        entry = logs[leader.node_id][offset]
        assert entry.payload.startswith(tag.encode() + b"."), (offset, tag, entry)
        # Committed means stored on a majority, and no node ever truncates a committed entry
        # (every later leader holds it). A node may still hold a stale entry of an older
        # epoch at that offset, beyond its own high watermark, that it has not yet fetched
        # over: that is not a loss.
        holders = [n for n, entries in logs.items()
                   if offset < len(entries) and entries[offset] == entry]
        assert len(holders) >= 2, (offset, tag, holders)
