"""A snapshot installed from the leader while the network quorum client runs (FetchSnapshot):
the tree is replaced, the apply listeners hear what changed (a store's watch fires if and only
if its node changed, as on ZooKeeper), sessions the new tree lacks are reported ended, and a
write waiting for an entry the snapshot covers fails with ConnectionLost."""

from __future__ import annotations

from twisted.internet.task import Clock

from broker_core.config.quorum import RaftConfig
from broker_core.metadata import ConnectionLost
from broker_core.raft.entries import VoterAssignment
from broker_core.raft.metadata_commands import CreateNode, DeleteNode, OpenSession, SetNode, encode
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.raft.metadata_tree import EventKind, MetadataTree, WatchEvent
from broker_core.raft.quorum_client import NetworkQuorumClient
from broker_core.raft.snapshots import Snapshot, SnapshotId


class FakeDriver:
    """What ``NetworkQuorumClient.attach`` uses of a driver; keeps the snapshot loader."""

    config = RaftConfig()
    running = True
    role = None

    def subscribe_transitions(self, callback):
        pass

    def subscribe_committed(self, callback, load_snapshot=None):
        self.load_snapshot = load_snapshot


def tree(*commands) -> MetadataTree:
    t = MetadataTree()
    for offset, command in enumerate(commands):
        t.apply(offset, encode(command, 0))
    return t


BEFORE = [CreateNode("/a", b"1"), OpenSession(5000), CreateNode("/b", b"2"),
          CreateNode("/c", b""), CreateNode("/c/d", b"same")]
# The leader's tree, 4 entries further: /a changed, /b gone, /e new, /c/d untouched, and the
# session (opened at offset 1) expired in the entries the snapshot covers.
AFTER = [*BEFORE, SetNode("/a", b"new"), DeleteNode("/b"), CreateNode("/e", b"3"),
         CreateNode("/f", b"")]


def test_changes_to_names_exactly_the_nodes_that_differ():
    old, new = tree(*BEFORE), tree(*AFTER)
    assert old.changes_to(new) == [
        WatchEvent(EventKind.CHILDREN, "/"), WatchEvent(EventKind.CHANGED, "/a"),
        WatchEvent(EventKind.DELETED, "/b"), WatchEvent(EventKind.CREATED, "/e"),
        WatchEvent(EventKind.CREATED, "/f")]
    assert new.changes_to(new) == []


def _installed_client():
    clock = Clock()
    client = NetworkQuorumClient(2, {}, clock)
    client.tree = tree(*BEFORE)
    driver = FakeDriver()
    client.attach(driver)
    new = tree(*AFTER)
    new._sessions.clear()  # the session ended in the entries the snapshot covers
    end = new.applied_offset + 1
    snapshot = Snapshot(SnapshotId(end, 3), VoterAssignment("c", (1,)), -1, new.to_snapshot())
    return clock, client, driver, snapshot


def test_a_replaced_tree_fires_the_watches_of_the_nodes_that_changed_and_only_those():
    clock, client, driver, snapshot = _installed_client()
    store = QuorumMetadataStore(client, reactor=clock)
    client.add_apply_listener(store._on_apply)  # what store.start() does
    seen = []
    for path in ("/a", "/b", "/c/d", "/e"):
        store.watch_data(path, lambda data, stat, path=path: seen.append((path, data)))
    store.watch_children("/", lambda children: seen.append(("/ children", children)))
    clock.advance(0)  # the first calls
    seen.clear()
    results = []
    client.add_apply_listener(lambda offset, applied: results.append((offset, applied)))
    driver.load_snapshot(snapshot)
    assert sorted(seen) == [("/ children", ["a", "c", "e", "f"]), ("/a", b"new"),
                            ("/b", None), ("/e", b"3")]
    assert client.tree.get("/a")[0] == b"new" and client.snapshots_installed == 1
    # One result per ended session, then the changes, all at the snapshot's last offset.
    (offset, ended), (_, changes) = results
    assert offset == snapshot.end_offset - 1
    assert ended.ended_session == 1 and not ended.events
    assert changes.ended_session is None and len(changes.events) == 5


def test_a_write_waiting_for_an_entry_the_snapshot_covers_fails_with_connection_lost():
    clock, client, driver, snapshot = _installed_client()
    covered = client._applied(snapshot.end_offset - 2, 10.0)
    later = client._applied(snapshot.end_offset, 10.0)
    failures = []
    covered.addErrback(failures.append)
    driver.load_snapshot(snapshot)
    (failure,) = failures
    assert failure.check(ConnectionLost) and "covered by snapshot" in failure.getErrorMessage()
    assert not later.called  # an entry after the snapshot still comes as an entry
    later.addErrback(lambda f: None)
    later.cancel()
