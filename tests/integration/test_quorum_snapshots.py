"""Snapshots of the metadata tree on a real quorum node (``EmbeddedQuorum``, as a broker in
quorum mode runs it: a DiskRaftLog, the quorum listener on TCP, the network quorum client):
the client asks for a snapshot every ``snapshot_interval_entries`` entries, the log's prefix
below it goes, and a restart loads the latest snapshot into the tree and replays only the
entries after it, ending with the same tree. Without snapshots a restart replays everything.
In a three-voter quorum, a voter stopped while the others write past several snapshots and
delete their prefixes, and an observer started late, catch up through FetchSnapshot."""

from __future__ import annotations

import dataclasses

import pytest_twisted
from twisted.internet import reactor

from broker_core.config.quorum import VoterAddress
from broker_core.raft.embedded import EmbeddedQuorum
from broker_core.raft.metadata_commands import CreateNode, encode
from broker_core.raft.snapshots import DiskSnapshotStore
from broker_core.raft.storage import DIR_NAME
from tests.support.cluster import eventually, free_port
from tests.support.embedded_quorums import FAST

WRITES = 120


def _quorum(data_dir, port: int, config) -> EmbeddedQuorum:
    voters = {1: VoterAddress(1, "127.0.0.1", port)}
    return EmbeddedQuorum(1, "snapshot-test", voters, ("127.0.0.1", port), data_dir, reactor,
                          config)


async def _started(q: EmbeddedQuorum) -> EmbeddedQuorum:
    await q.start()
    await eventually(lambda: q.client.leading, what="the single voter leads")
    return q


def _contents(tree) -> dict[str, bytes]:
    return {name: tree.get(f"/{name}")[0] for name in tree.children("/")}


async def _write_and_restart(tmp_path, config) -> tuple[EmbeddedQuorum, dict, int]:
    port = free_port()
    q = await _started(_quorum(tmp_path, port, config))
    for i in range(WRITES):
        await q.client.submit(encode(CreateNode(f"/n{i:03d}", b"v%d" % i, 0, False),
                                     int(reactor.seconds() * 1000)))
    before = _contents(q.client.tree)
    await q.stop()
    again = await _started(_quorum(tmp_path, port, config))
    return again, before, again.raft_log.end_offset()


@pytest_twisted.ensureDeferred
async def test_a_restart_loads_the_snapshot_and_replays_only_the_entries_after_it(tmp_path):
    config = dataclasses.replace(FAST, snapshot_interval_entries=50, snapshot_retain_entries=10)
    q, before, end = await _write_and_restart(tmp_path, config)
    try:
        snapshot = DiskSnapshotStore(tmp_path / DIR_NAME).latest()
        assert snapshot is not None and snapshot.end_offset >= 100
        assert q.client.loaded_snapshot == snapshot.snapshot_id
        # Only the entries after the snapshot were applied at start (plus the new epoch's
        # LeaderChange, committed since): not the whole log.
        await eventually(lambda: q.client.tree.applied_offset == end - 1, what="caught up")
        assert q.client.entries_applied == end - snapshot.end_offset
        assert q.client.entries_applied < WRITES // 2
        assert _contents(q.client.tree) == before and len(before) == WRITES
        # The log's prefix below the snapshot (minus the kept entries) is gone for good.
        assert q.raft_log.start_offset() == snapshot.end_offset - 10
        assert snapshot.voters.current_voters == (1,)
    finally:
        await q.stop()


@pytest_twisted.ensureDeferred
async def test_without_snapshots_a_restart_replays_the_whole_log(tmp_path):
    config = dataclasses.replace(FAST, snapshot_interval_entries=0, snapshot_interval_bytes=0)
    q, before, end = await _write_and_restart(tmp_path, config)
    try:
        assert q.client.loaded_snapshot is None
        await eventually(lambda: q.client.tree.applied_offset == end - 1, what="caught up")
        assert q.client.entries_applied == end  # every entry, from offset 0
        assert _contents(q.client.tree) == before
        assert q.raft_log.start_offset() == 0
    finally:
        await q.stop()


# -- FetchSnapshot: a voter that was away, and an observer added late ----------------------------

CATCH_UP = dataclasses.replace(FAST, snapshot_interval_entries=40, snapshot_retain_entries=5,
                               fetch_snapshot_max_bytes=1024)


def _three_voters(base) -> tuple[dict[int, VoterAddress], dict[int, EmbeddedQuorum]]:
    voters = {i: VoterAddress(i, "127.0.0.1", free_port()) for i in (1, 2, 3)}
    return voters, {i: _member(base, i, voters) for i in voters}


def _member(base, node_id: int, voters, port: int | None = None) -> EmbeddedQuorum:
    port = voters[node_id].port if node_id in voters else port
    return EmbeddedQuorum(node_id, "fetch-snapshot-test", voters, ("127.0.0.1", port),
                          base / f"node-{node_id}", reactor, CATCH_UP)


def _core(q: EmbeddedQuorum):
    return q.node.driver.node


@pytest_twisted.ensureDeferred
async def test_a_voter_back_from_far_behind_and_a_late_observer_catch_up_through_fetch_snapshot(
        tmp_path):
    voters, members = _three_voters(tmp_path)
    for q in members.values():
        await q.start()
    late: list[EmbeddedQuorum] = []
    try:
        await eventually(lambda: any(q.client.leading for q in members.values()),
                         what="a leader")
        leader = next(q for q in members.values() if q.client.leading)
        away_id = next(i for i in members if members[i] is not leader)
        away = members[away_id]
        await away.stop()
        writes = 200
        for i in range(writes):
            await leader.client.submit(encode(CreateNode(f"/n{i:03d}", b"v%d" % i, 0, False),
                                              int(reactor.seconds() * 1000)))
        # Several snapshots later, the log the absent voter would need is gone everywhere.
        others = [q for q in members.values() if q is not away]
        await eventually(lambda: all(q.raft_log.start_offset() > 100 for q in others),
                         what="the prefix deleted on the voters that stayed")

        events = []
        back = members[away_id] = _member(tmp_path, away_id, voters)
        back.client.add_apply_listener(lambda offset, applied: events.extend(applied.events))
        await back.start()
        observer = _member(tmp_path, 9, voters, port=free_port())
        late.append(observer)
        await observer.start()
        for q in (back, observer):
            await eventually(lambda q=q: _contents(q.client.tree) == _contents(
                leader.client.tree) and len(_contents(q.client.tree)) == writes,
                what=f"node {q.node_id} has the leader's tree")
            core = _core(q)
            # It caught up through FetchSnapshot: it installed a snapshot of the leader's, its
            # log starts at or past that snapshot's end, and its tree was replaced at run time.
            assert core.snapshots_installed >= 1
            assert q.client.snapshots_installed >= 1
            installed = DiskSnapshotStore(tmp_path / f"node-{q.node_id}" / DIR_NAME).latest()
            assert installed.snapshot_id in leader.node.driver.snapshots.ids()
            assert q.raft_log.start_offset() == installed.end_offset > 100
            assert q.client.entries_applied < writes  # it did not replay the whole log
        assert _core(observer).role.value == "observer"
        # The replaced tree told the apply listeners (the store's watches) of the new nodes.
        assert {e.path for e in events} >= {f"/n{i:03d}" for i in range(writes)}
    finally:
        for q in [*members.values(), *late]:
            await q.stop()
