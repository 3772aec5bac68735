"""The quorum's metadata state machine (``broker_core.raft.metadata_tree``) and its command
encoding: every command and error as the ZooKeeper store reports them, multi atomicity,
sequence names, ephemeral cleanup, watch events, and determinism (same log, same tree; a
snapshot plus the rest of the log gives the tree of the whole log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.metadata import (
    BadVersion,
    NodeExists,
    NoNode,
    NotEmpty,
    RolledBack,
    SessionExpired,
    TransactionFailed,
)
from broker_core.raft.metadata_commands import (
    CheckNode,
    CloseSession,
    CreateNode,
    DeleteNode,
    Envelope,
    ExpireSession,
    MalformedCommand,
    Multi,
    OpenSession,
    SetNode,
    UnsupportedCommandVersion,
    decode,
    encode,
)
from broker_core.raft.metadata_tree import (
    ApplyFailed,
    BadArguments,
    EventKind,
    MetadataTree,
    NoChildrenForEphemerals,
    SnapshotError,
    WatchEvent,
)


class Log:
    """Feeds a tree encoded commands at increasing offsets (offset 0 is a control record, as
    in a real quorum log)."""

    def __init__(self, tree: MetadataTree | None = None) -> None:
        self.tree = tree or MetadataTree()
        self.offset = 0
        self.tree.skip(0)
        self.payloads: list[tuple[int, bytes]] = []

    def __call__(self, command, time_ms: int = 1000):
        self.offset += 1
        payload = encode(command, time_ms)
        self.payloads.append((self.offset, payload))
        return self.tree.apply(self.offset, payload)


def _state(tree: MetadataTree) -> dict:
    """The tree's nodes and sessions (its snapshot without the applied offset)."""
    doc = json.loads(tree.to_snapshot())
    del doc["applied"]
    return doc


def _outcome(result):
    """A result in a comparable form (exceptions compare by identity)."""
    if isinstance(result, TransactionFailed):
        return ("TransactionFailed", [_outcome(r) for r in result.results])
    if isinstance(result, Exception):
        return (type(result).__name__, str(result))
    return result


@pytest.fixture
def log() -> Log:
    return Log()


# -- encoding ------------------------------------------------------------------------------------


ALL_COMMANDS = [
    CreateNode("/a", b"\x00\xffvalue", owner=7, sequence=True),
    SetNode("/a/b", b"v", 3),
    DeleteNode("/a", 2, recursive=True),
    CheckNode("/a", -1),
    Multi((CheckNode("/x", 1), CreateNode("/y", b"1"), SetNode("/x", b"", 1),
           DeleteNode("/z", 0))),
    OpenSession(6000),
    CloseSession(12),
    ExpireSession(13),
]


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_round_trips_with_its_time(command):
    assert decode(encode(command, 1234)) == Envelope(command, 1234)


def test_encoding_is_versioned_json():
    doc = json.loads(encode(SetNode("/a", b"hi", 4), 5))
    assert doc == {"v": 1, "t": 5, "c": "set", "p": "/a", "d": "aGk=", "n": 4}


@pytest.mark.parametrize("version", [0, 2, None, "1"])
def test_an_unknown_encoding_version_is_refused(version):
    doc = json.loads(encode(CheckNode("/a", 0)))
    doc["v"] = version
    with pytest.raises(UnsupportedCommandVersion, match="version"):
        decode(json.dumps(doc).encode())


@pytest.mark.parametrize("payload, reason", [
    (b"\xff\xfe", "not UTF-8"),
    (b"{1: 2}", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"v":1,"t":0,"c":"frobnicate","p":"/a"}', "unknown command"),
    (b'{"v":1,"t":0,"c":"set","p":"/a","n":1}', "missing field 'd'"),
    (b'{"v":1,"t":0,"c":"set","p":"/a","d":"aGk=","n":true}', "'n' should be int"),
    (b'{"v":1,"t":0,"c":"check","p":"a","n":1}', "must start with /"),
    (b'{"v":1,"t":0,"c":"set","p":"/a","d":"%%%","n":1}', "not base64"),
    (b'{"v":1,"t":0,"c":"open_session","ms":0}', "'ms' is 0, outside"),
    (b'{"v":1,"t":0,"c":"multi","ops":[{"c":"delete","p":"/a","n":-1,"r":true}]}',
     "recursive delete"),
    (b'{"v":1,"c":"check","p":"/a","n":1}', "missing field 't'"),
])
def test_malformed_commands_are_refused_with_the_reason(payload, reason):
    with pytest.raises(MalformedCommand, match=reason):
        decode(payload)


# -- nodes ---------------------------------------------------------------------------------------


def test_create_get_set_delete_with_zookeeper_stats(log):
    assert log(CreateNode("/a", b"one"), time_ms=100).result == "/a"
    value, stat = log.tree.get("/a")
    assert value == b"one"
    assert (stat.version, stat.czxid, stat.mzxid, stat.ctime, stat.mtime) == (0, 1, 1, 100, 100)
    assert (stat.ephemeral_owner, stat.num_children, stat.cversion) == (0, 0, 0)

    stat = log(SetNode("/a", b"two", 0), time_ms=200).result
    assert (stat.version, stat.czxid, stat.mzxid, stat.mtime, stat.ctime) == (1, 1, 2, 200, 100)
    assert log(SetNode("/a", b"three"), time_ms=300).result.version == 2  # -1: any version

    log(CreateNode("/a/b"))
    log(CreateNode("/a/c"))
    log(DeleteNode("/a/b"))
    parent = log.tree.exists("/a")
    assert parent.cversion == 3 and parent.num_children == 1  # two creates, one delete
    assert parent.version == 2  # children do not count as sets
    assert log.tree.children("/a") == ["c"]
    assert log(DeleteNode("/a/c", 0)).result is None
    assert log(DeleteNode("/a", 2)).result is None
    assert log.tree.exists("/a") is None and log.tree.children("/") == []


@pytest.mark.parametrize("command, error", [
    (CreateNode("/missing/child"), NoNode),
    (CreateNode("/x"), NodeExists),
    (CreateNode("/"), NodeExists),
    (SetNode("/missing", b""), NoNode),
    (SetNode("/x", b"", 7), BadVersion),
    (DeleteNode("/missing"), NoNode),
    (DeleteNode("/x", 7), BadVersion),
    (DeleteNode("/x"), NotEmpty),
    (DeleteNode("/"), BadArguments),
    (CheckNode("/missing", -1), NoNode),
    (CheckNode("/x", 3), BadVersion),
    (CreateNode("/x/"), MalformedCommand),  # refused by the decoder: skipped, not applied
    (CreateNode("/x//y"), MalformedCommand),
    (CreateNode("/eph/child"), NoChildrenForEphemerals),
    (CreateNode("/other", owner=999), SessionExpired),
    (CloseSession(999), SessionExpired),
    (ExpireSession(999), SessionExpired),
])
def test_errors_are_typed_and_change_nothing(log, command, error):
    log(CreateNode("/x"))
    log(CreateNode("/x/child"))
    sid = log(OpenSession(1000)).result
    log(CreateNode("/eph", owner=sid))
    before = _state(log.tree)
    applied = log(command)
    assert isinstance(applied.result, error)
    assert applied.failed and applied.events == []
    assert _state(log.tree) == before


def test_check_passes_on_the_right_version(log):
    log(CreateNode("/x"))
    assert log(CheckNode("/x", 0)).result is True
    assert log(CheckNode("/x", -1)).result is True


def test_recursive_delete_removes_the_subtree_in_one_entry_and_absent_is_fine(log):
    for p in ("/t", "/t/a", "/t/a/1", "/t/b", "/keep"):
        log(CreateNode(p))
    applied = log(DeleteNode("/t", recursive=True))
    assert applied.result is None
    assert log.tree.children("/") == ["keep"]
    deleted = [e.path for e in applied.events if e.kind is EventKind.DELETED]
    assert deleted == ["/t/a/1", "/t/a", "/t/b", "/t"]  # children before their parent
    assert log(DeleteNode("/t", recursive=True)).result is None  # as kazoo: no NoNode


def test_sequence_names_count_the_children_created_as_ten_digits(log):
    log(CreateNode("/q"))
    assert log(CreateNode("/q/n-", sequence=True)).result == "/q/n-0000000000"
    assert log(CreateNode("/q/n-", sequence=True)).result == "/q/n-0000000001"
    log(CreateNode("/q/other"))
    log(DeleteNode("/q/n-0000000000"))
    # As a real ZooKeeper server: a delete counts in cversion, not in the next suffix.
    assert log.tree.exists("/q").cversion == 4
    assert log(CreateNode("/q/n-", sequence=True)).result == "/q/n-0000000003"
    assert log(CreateNode("/q/", sequence=True)).result == "/q/0000000004"


def test_a_re_created_node_gets_a_new_czxid(log):
    log(CreateNode("/brokers"))
    sid = log(OpenSession(1000)).result
    first = log(CreateNode("/brokers/1", owner=sid)).result
    czxid = log.tree.exists(first).czxid
    log(ExpireSession(sid))
    sid2 = log(OpenSession(1000)).result
    log(CreateNode("/brokers/1", owner=sid2))
    assert log.tree.exists("/brokers/1").czxid > czxid  # the controller's broker epoch moves


# -- multi ---------------------------------------------------------------------------------------


def test_a_failed_multi_writes_nothing_and_names_the_failing_operation(log):
    log(CreateNode("/epoch", b"1"))
    log(SetNode("/epoch", b"2"))
    before = log.tree.get("/epoch")
    applied = log(Multi((CreateNode("/t", b"new"), SetNode("/epoch", b"3", 1),
                         CreateNode("/t/u"), CheckNode("/epoch", 0), DeleteNode("/epoch"))))
    failed = applied.result
    assert isinstance(failed, TransactionFailed)
    assert failed.failed_index == 3 and isinstance(failed.first_error, BadVersion)
    assert [type(r) for r in failed.results] == [RolledBack, RolledBack, RolledBack,
                                                 BadVersion, RolledBack]
    assert applied.events == []
    assert log.tree.exists("/t") is None
    assert log.tree.get("/epoch") == before
    assert log.tree.exists("/").cversion == 1  # the rolled-back create left no trace


def test_a_multi_applies_in_order_at_one_offset(log):
    log(CreateNode("/epoch", b"1"))
    applied = log(Multi((CheckNode("/epoch", 0), CreateNode("/t", b"new"),
                         CreateNode("/t/child"), SetNode("/t", b"newer", 0),
                         DeleteNode("/epoch", 0))))
    assert applied.result[0] is True and applied.result[1:3] == ["/t", "/t/child"]
    assert applied.result[3].version == 1 and applied.result[4] is True
    value, stat = log.tree.get("/t")
    assert value == b"newer" and stat.czxid == stat.mzxid == log.offset
    assert log.tree.exists("/epoch") is None


def test_sequential_creates_in_one_multi_get_distinct_names(log):
    log(CreateNode("/q"))
    applied = log(Multi((CreateNode("/q/x-", sequence=True), CreateNode("/q/x-", sequence=True))))
    assert applied.result == ["/q/x-0000000000", "/q/x-0000000001"]


# -- sessions ------------------------------------------------------------------------------------


def test_session_ids_are_offsets_and_expiry_removes_only_that_sessions_ephemerals(log):
    log(CreateNode("/ids"))
    a = log(OpenSession(6000)).result
    b = log(OpenSession(9000)).result
    assert (a, b) == (2, 3) and log.tree.sessions == {2: 6000, 3: 9000}
    log(CreateNode("/ids/1", owner=a))
    log(CreateNode("/ids/2", owner=b))
    log(CreateNode("/ids/3", owner=a))
    assert log.tree.exists("/ids/1").ephemeral_owner == a
    applied = log(ExpireSession(a))
    assert applied.result == ["/ids/1", "/ids/3"] and applied.ended_session == a
    assert log.tree.children("/ids") == ["2"]
    assert log.tree.sessions == {b: 9000}
    assert isinstance(log(CreateNode("/ids/4", owner=a)).result, SessionExpired)
    log(CloseSession(b))
    assert log.tree.children("/ids") == [] and log.tree.sessions == {}


def test_a_deleted_ephemeral_is_forgotten_by_its_session(log):
    sid = log(OpenSession(1000)).result
    log(CreateNode("/e", owner=sid))
    log(DeleteNode("/e"))
    log(CreateNode("/e"))  # persistent now
    log(CloseSession(sid))
    assert log.tree.exists("/e").ephemeral_owner == 0


# -- watch events --------------------------------------------------------------------------------


def test_apply_reports_data_and_child_events(log):
    E = WatchEvent  # noqa: N806
    assert log(CreateNode("/a")).events == [E(EventKind.CREATED, "/a"),
                                           E(EventKind.CHILDREN, "/")]
    assert log(SetNode("/a", b"x")).events == [E(EventKind.CHANGED, "/a")]
    assert log(CreateNode("/a/b")).events == [E(EventKind.CREATED, "/a/b"),
                                             E(EventKind.CHILDREN, "/a")]
    assert log(DeleteNode("/a/b")).events == [E(EventKind.DELETED, "/a/b"),
                                             E(EventKind.CHILDREN, "/a")]
    sid = log(OpenSession(1000)).result
    assert log(OpenSession(1000)).events == []
    log(CreateNode("/a/e", owner=sid))
    assert log(ExpireSession(sid)).events == [E(EventKind.DELETED, "/a/e"),
                                             E(EventKind.CHILDREN, "/a")]
    assert log(CheckNode("/a", 1)).events == []


# -- the log itself ------------------------------------------------------------------------------


def test_entries_apply_once_each_in_order(log):
    log(CreateNode("/a"))
    with pytest.raises(ValueError, match="in order"):
        log.tree.apply(log.offset, encode(CreateNode("/b")))


def test_an_entry_that_does_not_decode_is_skipped_and_the_next_ones_apply(log):
    """A malformed entry and one of an unknown version change nothing but the applied offset,
    say why (``skipped``), and the entries after them apply as usual."""
    before = _state(log.tree)
    malformed = log.tree.apply(1, b"not a command")
    assert isinstance(malformed.result, MalformedCommand) and malformed.skipped == "malformed"
    newer = log.tree.apply(2, b'{"v":2,"t":0,"c":"check","p":"/","n":-1}')
    assert isinstance(newer.result, UnsupportedCommandVersion)
    assert newer.skipped == "unsupported_version" and newer.events == []
    assert _state(log.tree) == before and log.tree.applied_offset == 2
    log.offset = 2
    assert log(CreateNode("/after")).result == "/after"
    assert log.tree.applied_offset == 3 and log.tree.exists("/after") is not None


def test_a_command_whose_apply_fails_unexpectedly_is_rolled_back_and_skipped(log, monkeypatch):
    """A bug in applying one command (here: the second set of a multi raises) undoes what the
    command did so far and skips it; the tree keeps applying."""
    log(CreateNode("/a", b"0"))
    log(CreateNode("/b", b"0"))
    before = _state(log.tree)
    real_set = MetadataTree._set

    def failing_set(self, op, offset, time_ms):
        if op.path == "/b":
            raise KeyError("a bug")
        return real_set(self, op, offset, time_ms)

    monkeypatch.setattr(MetadataTree, "_set", failing_set)
    applied = log(Multi((SetNode("/a", b"1"), SetNode("/b", b"1"))))
    assert applied.skipped == "apply_error" and isinstance(applied.result, ApplyFailed)
    assert "KeyError" in str(applied.result) and applied.events == []
    assert _state(log.tree) == before
    monkeypatch.undo()
    assert log(SetNode("/b", b"2")).result.version == 1


def test_snapshot_round_trips_and_refuses_garbage(log):
    sid = log(OpenSession(4000)).result
    log(CreateNode("/a", b"\x00\x01"))
    log(CreateNode("/a/e", b"e", owner=sid))
    log(SetNode("/a", b"2"))
    copy = MetadataTree.from_snapshot(log.tree.to_snapshot())
    assert copy == log.tree
    assert copy.get("/a") == log.tree.get("/a") and copy.ephemerals(sid) == ["/a/e"]
    assert copy.applied_offset == log.offset
    with pytest.raises(SnapshotError):
        MetadataTree.from_snapshot(b"{}")
    with pytest.raises(SnapshotError, match="version"):
        MetadataTree.from_snapshot(b'{"v": 9}')


# -- determinism, property-based -----------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c"])
PATHS = st.lists(NAMES, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
VERSIONS = st.integers(min_value=-1, max_value=2)
VALUES = st.binary(max_size=4)
OWNERS = st.sampled_from([0, 0, 1, 2, 3, 4, 5])
NODE_OPS = st.one_of(
    st.builds(CreateNode, PATHS, VALUES, OWNERS, st.booleans()),
    st.builds(SetNode, PATHS, VALUES, VERSIONS),
    st.builds(DeleteNode, PATHS, VERSIONS, st.booleans()),
    st.builds(CheckNode, PATHS, VERSIONS),
)
COMMANDS = st.one_of(
    NODE_OPS,
    st.builds(Multi, st.lists(NODE_OPS.filter(
        lambda op: not (isinstance(op, DeleteNode) and op.recursive)), max_size=4).map(tuple)),
    st.builds(OpenSession, st.integers(min_value=1, max_value=10)),
    st.builds(CloseSession, st.integers(min_value=0, max_value=6)),
    st.builds(ExpireSession, st.integers(min_value=0, max_value=6)),
)


def _check_invariants(tree: MetadataTree) -> None:
    snapshot = json.loads(tree.to_snapshot())
    paths = {n[0] for n in snapshot["nodes"]}
    assert "/" in paths
    sessions = {sid for sid, _ in snapshot["sessions"]}
    for path, _, _, _, _, _, _, owner, *_ in snapshot["nodes"]:
        if path != "/":
            parent = path.rsplit("/", 1)[0] or "/"
            assert parent in paths and path.rsplit("/", 1)[1] in tree.children(parent)
        if owner:
            assert owner in sessions and tree.children(path) == []
            assert path in tree.ephemerals(owner)


@settings(max_examples=150, deadline=None)
@given(st.lists(COMMANDS, max_size=40), st.integers(min_value=0, max_value=40))
def test_the_same_log_gives_the_same_tree_and_snapshots_resume_it(commands, cut):
    one, two = Log(), Log()
    for command in commands:
        assert _outcome(one(command).result) == _outcome(two(command).result)
    assert one.tree == two.tree
    _check_invariants(one.tree)

    # Replaying the whole log == restoring a snapshot taken part-way and replaying the rest.
    cut = min(cut, len(one.payloads))
    head = Log()
    for offset, payload in one.payloads[:cut]:
        head.tree.apply(offset, payload)
    resumed = MetadataTree.from_snapshot(head.tree.to_snapshot())
    for offset, payload in one.payloads[cut:]:
        resumed.apply(offset, payload)
    assert resumed == one.tree


REPLICA_SCRIPT = """
import hashlib, random, sys
from broker_core.raft.metadata_commands import *
from broker_core.raft.metadata_tree import MetadataTree
rng = random.Random(7)
tree = MetadataTree()
tree.skip(0)
names = ["a", "b", "c", "d"]
for offset in range(1, 3000):
    path = "/" + "/".join(rng.choice(names) for _ in range(rng.randint(1, 3)))
    kind = rng.randrange(6)
    if kind == 0:
        command = OpenSession(1000)
    elif kind == 1:
        command = ExpireSession(rng.randrange(offset))
    elif kind == 2:
        command = DeleteNode(path, -1, rng.random() < 0.3)
    elif kind == 3:
        command = SetNode(path, bytes([offset % 256]))
    else:
        command = CreateNode(path, b"", rng.choice([0, rng.randrange(offset)]), rng.random() < 0.2)
    tree.apply(offset, encode(command, offset))
sys.stdout.write(hashlib.sha256(tree.to_snapshot()).hexdigest() + " %d" % len(tree))
"""


def test_replicas_with_different_hash_seeds_build_the_same_tree(tmp_path):
    """Set and dict orders differ between processes with other hash seeds; the tree (and the
    ephemerals an expiry deletes, and their events) must not depend on them."""
    root = str(Path(__file__).resolve().parents[2])
    out = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=root)
        out.append(subprocess.run([sys.executable, "-c", REPLICA_SCRIPT], env=env, check=True,
                                  capture_output=True, text=True, cwd=tmp_path).stdout)
    assert out[0] == out[1]
    assert int(out[0].split()[1]) > 10  # the log built a real tree
