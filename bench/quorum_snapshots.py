"""Snapshots of the metadata quorum: start-up time with a long metadata log, with and without a
snapshot, and how long a far-behind node takes to catch up through FetchSnapshot.

1. Start-up: a metadata log on disk of ``--entries`` entries (the first ``--nodes`` create
   ``/n<i>``, the rest set them round-robin: a long log over a tree of fixed size), then a
   single-voter ``EmbeddedQuorum`` (as a broker in quorum mode runs it: DiskRaftLog, listener,
   network quorum client) started on it: how long ``start()`` takes (it opens the log and
   loads a snapshot), and how long until its tree holds the whole log. Without a snapshot the
   node replays every entry once it has won its election (the log's entries count as committed
   only then: ``election_timeout_ms`` is 100 here); with one (of the same tree, at the log's
   end, the log's prefix below it deleted) it loads the snapshot, whose entries are committed.
2. Catch-up: that voter, with its log's prefix below the snapshot deleted, leads; an observer
   with an empty log starts, and is timed until its tree has applied the leader's whole log:
   one Fetch answered with the snapshot id, FetchSnapshot chunks of ``fetch_snapshot_max_bytes``
   (1 MiB), checking, installing, loading the tree, then the entries after it.

Usage: python bench/quorum_snapshots.py [--entries 100000,500000] [--nodes 10000]
Runs in a temp dir that is removed afterwards; prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twisted.internet import defer, task  # noqa: E402

from broker_core.config.quorum import RaftConfig, VoterAddress  # noqa: E402
from broker_core.raft.embedded import EmbeddedQuorum  # noqa: E402
from broker_core.raft.entries import LogEntry, VoterAssignment  # noqa: E402
from broker_core.raft.metadata_commands import CreateNode, SetNode, encode  # noqa: E402
from broker_core.raft.metadata_tree import MetadataTree  # noqa: E402
from broker_core.raft.quorum_state import QuorumState, write_quorum_state  # noqa: E402
from broker_core.raft.snapshots import DiskSnapshotStore, Snapshot, SnapshotId  # noqa: E402
from broker_core.raft.storage import DIR_NAME, DiskRaftLog  # noqa: E402
from tests.support.cluster import free_port  # noqa: E402

CLUSTER = "bench-snapshots"
# Snapshots only where the benchmark makes them; a quick election for the single voter.
CONFIG = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=1000, request_timeout_ms=1000,
                    fetch_max_wait_ms=200, snapshot_interval_entries=0,
                    snapshot_interval_bytes=0)


def write_log(directory: Path, entries: int, nodes: int) -> MetadataTree:
    """The metadata log of node 1 (epoch 1, committed by its single voter), and the tree it
    makes; its quorum state says node 1 led epoch 1."""
    log = DiskRaftLog.open(directory, time_ms=lambda: 0)
    tree = MetadataTree()
    batch = []
    for offset in range(entries):
        command = (CreateNode(f"/n{offset}", b"v" * 100) if offset < nodes
                   else SetNode(f"/n{offset % nodes}", b"%099d" % offset))
        payload = encode(command, 0)
        tree.apply(offset, payload)
        batch.append(LogEntry(offset, 1, payload))
        if len(batch) == 1000:
            log.append(batch)
            batch = []
    if batch:
        log.append(batch)
    log.flush()
    log.close()
    write_quorum_state(directory, QuorumState(CLUSTER, 1, 1, 1, -1, (1,), None))
    return tree


def save_snapshot(directory: Path, tree: MetadataTree, delete_prefix: bool) -> int:
    end = tree.applied_offset + 1
    snapshot = Snapshot(SnapshotId(end, 1), VoterAssignment(CLUSTER, (1,)), -1,
                        tree.to_snapshot())
    DiskSnapshotStore(directory / DIR_NAME).save(snapshot)
    if delete_prefix:
        log = DiskRaftLog.open(directory, time_ms=lambda: 0)
        log.delete_prefix(end)
        log.close()
    return (directory / DIR_NAME / snapshot.snapshot_id.file_name()).stat().st_size


async def until(reactor, done, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's node did not catch up")
        await task.deferLater(reactor, 0.005, lambda: None)


async def start_up(reactor, directory: Path, voters, entries: int
                   ) -> tuple[float, float, int]:
    """Seconds that start() takes (opening the log, loading a snapshot), seconds from start()
    until the tree applied the whole log, and how many entries the client applied."""
    q = EmbeddedQuorum(1, CLUSTER, voters, ("127.0.0.1", voters[1].port), directory, reactor,
                       CONFIG)
    started = time.perf_counter()
    await q.start()
    start_s = time.perf_counter() - started
    await until(reactor, lambda: q.client.tree.applied_offset >= entries - 1)
    elapsed = time.perf_counter() - started
    await q.stop()
    return start_s, elapsed, q.client.entries_applied


async def catch_up(reactor, base: Path, directory: Path, voters, entries: int
                   ) -> tuple[float, float]:
    """Seconds for an empty observer to hold the leader's whole tree; the leader's start-up
    seconds."""
    leader = EmbeddedQuorum(1, CLUSTER, voters, ("127.0.0.1", voters[1].port), directory,
                            reactor, CONFIG)
    t0 = time.perf_counter()
    await leader.start()
    await until(reactor, lambda: leader.client.leading
                and leader.client.tree.applied_offset >= entries)  # + its LeaderChange
    leader_s = time.perf_counter() - t0
    observer = EmbeddedQuorum(2, CLUSTER, voters, ("127.0.0.1", free_port()), base / "observer",
                              reactor, CONFIG)
    started = time.perf_counter()
    await observer.start()
    target = leader.client.tree.applied_offset
    await until(reactor, lambda: observer.client.tree.applied_offset >= target)
    elapsed = time.perf_counter() - started
    installed = observer.node.driver.node.snapshots_installed
    await observer.stop()
    await leader.stop()
    assert installed == 1, "the observer did not catch up through FetchSnapshot"
    return elapsed, leader_s


async def main(reactor, args) -> None:
    print(f"tree of {args.nodes:,} nodes (100-byte values); one voter; seconds from start()")
    print(f"{'log entries':>12} {'snapshot':>9} {'start()':>8} {'tree whole':>11} "
          f"{'applied':>8} {'observer catch-up':>18}")
    for entries in args.entries:
        base = Path(tempfile.mkdtemp(prefix="sluice-bench-snap-"))
        try:
            directory = base / "leader"
            tree = write_log(directory, entries, args.nodes)
            voters = {1: VoterAddress(1, "127.0.0.1", free_port())}
            plain = await start_up(reactor, directory, voters, entries)
            size = save_snapshot(directory, tree, delete_prefix=True)
            snap = await start_up(reactor, directory, voters, entries)
            fetch_s, _ = await catch_up(reactor, base, directory, voters, entries)
            print(f"{entries:>12,} {'none':>9} {plain[0]:>8.2f} {plain[1]:>11.2f} "
                  f"{plain[2]:>8,}")
            print(f"{entries:>12,} {size / 2**20:>7.1f}MB {snap[0]:>8.2f} {snap[1]:>11.2f} "
                  f"{snap[2]:>8,} {fetch_s:>18.2f}")
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", default="100000,500000",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--nodes", type=int, default=10_000)
    args = parser.parse_args()
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, args)))
