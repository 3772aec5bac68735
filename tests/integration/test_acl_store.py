"""ACL bindings in the metadata store (``broker_core.acl_store``), run against both stores: a real
ZooKeeper and a real one-voter metadata quorum. Round trip, deletion by filter, the watched
cache following every change, and poison values logged and ignored."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from broker_core import acl_store
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.security.acl import (
    AccessEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker_core.security.principal import Principal
from tests.support.cluster import eventually
from tests.support.local_quorum import LocalQuorum

Op, Perm, RT, PT = AclOperation, AclPermission, ResourceType, PatternType
ALICE = Principal("User", "alice")


@pytest.fixture
def quorum_store():
    q = LocalQuorum(reactor)
    pytest_twisted.blockon(Deferred.fromCoroutine(q.wait_for_leader()))
    s = QuorumMetadataStore(q, reactor=reactor, session_timeout=6.0)
    pytest_twisted.blockon(Deferred.fromCoroutine(s.start()))
    yield s
    pytest_twisted.blockon(Deferred.fromCoroutine(s.stop()))
    q.stop()


@pytest.fixture(params=["zookeeper", "quorum"])
def any_store(request):
    """The same tests on ZooKeeper (``store``) and on the metadata quorum."""
    return request.getfixturevalue("store" if request.param == "zookeeper" else "quorum_store")


def acl(rt, pt, name, principal="User:alice", op=Op.READ, perm=Perm.ALLOW, host="*"):
    return AclBinding(ResourcePattern(rt, pt, name), AccessEntry(principal, host, op, perm))


def everything() -> AclFilter:
    return AclFilter(RT.ANY, PT.ANY, None, None, None, Op.ANY, Perm.ANY)


BINDINGS = [
    acl(RT.TOPIC, PT.LITERAL, "orders"),
    acl(RT.TOPIC, PT.LITERAL, "orders", "User:bob", Op.WRITE, Perm.DENY, "10.0.0.7"),
    acl(RT.TOPIC, PT.PREFIXED, "fin-", op=Op.ALL),
    acl(RT.TOPIC, PT.LITERAL, "*", "User:*", Op.DESCRIBE),
    acl(RT.GROUP, PT.LITERAL, "billing"),
    acl(RT.CLUSTER, PT.LITERAL, "kafka-cluster", op=Op.ALTER),
]


@pytest_twisted.ensureDeferred
async def test_bindings_round_trip_and_adding_one_twice_changes_nothing(any_store):
    await acl_store.create_acls(any_store, BINDINGS)
    await acl_store.create_acls(any_store, BINDINGS[:2])
    assert sorted(await acl_store.load_acls(any_store), key=str) == sorted(BINDINGS, key=str)
    data, _ = await any_store.get("/acls/Topic/literal/orders")
    assert b'"operation":"Read"' in data and b'"permissionType":"Deny"' in data


@pytest_twisted.ensureDeferred
async def test_delete_by_filter_reports_what_it_deleted_and_keeps_the_rest(any_store):
    await acl_store.create_acls(any_store, BINDINGS)
    bob = AclFilter(RT.TOPIC, PT.ANY, "orders", "User:bob", None, Op.ANY, Perm.ANY)
    match = AclFilter(RT.TOPIC, PT.MATCH, "fin-ledger", "User:alice", None, Op.ANY, Perm.ANY)
    nothing = AclFilter(RT.GROUP, PT.ANY, "other", None, None, Op.ANY, Perm.ANY)
    deleted = await acl_store.delete_acls(any_store, [bob, match, nothing])
    assert deleted == [[BINDINGS[1]], [BINDINGS[2]], []]
    assert sorted(await acl_store.load_acls(any_store), key=str) == sorted(
        [BINDINGS[0], BINDINGS[3], BINDINGS[4], BINDINGS[5]], key=str)
    # A pattern whose last entry goes leaves no node behind.
    assert await any_store.exists("/acls/Topic/prefixed/fin-") is None
    assert await acl_store.delete_acls(any_store, [everything()]) != [[]]
    assert await acl_store.load_acls(any_store) == []


@pytest_twisted.ensureDeferred
async def test_the_cache_follows_creations_and_deletions(any_store):
    authorizer = Authorizer()
    cache = acl_store.AclCache(any_store, authorizer)
    cache.start()
    try:
        assert not authorizer.authorize(ALICE, "h", Op.READ, RT.TOPIC, "fin-q3")
        await acl_store.create_acls(any_store, BINDINGS)
        await eventually(lambda: authorizer.authorize(ALICE, "h", Op.READ, RT.TOPIC, "fin-q3"),
                         what="the prefixed ACL in the cache")
        await eventually(lambda: len(authorizer.bindings()) == len(BINDINGS),
                         what="every binding in the cache")
        await acl_store.delete_acls(any_store, [AclFilter(
            RT.TOPIC, PT.PREFIXED, "fin-", None, None, Op.ANY, Perm.ANY)])
        await eventually(lambda: not authorizer.authorize(ALICE, "h", Op.READ, RT.TOPIC,
                                                          "fin-q3"),
                         what="the deletion in the cache")
        await acl_store.create_acls(any_store, [acl(RT.TOPIC, PT.LITERAL, "orders",
                                                    op=Op.WRITE)])
        await eventually(lambda: authorizer.authorize(ALICE, "h", Op.WRITE, RT.TOPIC, "orders"),
                         what="a change of an existing node in the cache")
    finally:
        cache.stop()


@pytest_twisted.ensureDeferred
async def test_the_caches_start_fires_only_once_every_binding_is_read(any_store):
    """A broker opens its listeners once this fired: with allow.everyone.if.no.acl.found, a
    DENY not read yet would be ignored in the window."""
    await acl_store.create_acls(any_store, BINDINGS)
    empty = acl_store.AclCache(any_store, Authorizer())  # nothing stored for it: fires too
    authorizer = Authorizer(allow_if_no_acl=True)
    cache = acl_store.AclCache(any_store, authorizer)
    try:
        loaded = cache.start()
        assert not loaded.called or len(authorizer.bindings()) == len(BINDINGS)
        await loaded
        # At once, no polling: every binding, the DENY for bob from 10.0.0.7 among them.
        assert len(authorizer.bindings()) == len(BINDINGS)
        assert not authorizer.authorize(Principal("User", "bob"), "10.0.0.7", Op.WRITE,
                                        RT.TOPIC, "orders")
        await acl_store.delete_acls(any_store, [everything()])
        await empty.start()
    finally:
        cache.stop()
        empty.stop()


@pytest_twisted.ensureDeferred
async def test_poison_values_are_logged_and_ignored_never_crash(any_store):
    authorizer = Authorizer()
    cache = acl_store.AclCache(any_store, authorizer)
    await any_store.create("/acls/Topic/literal/junk", b"\xff not json", makepath=True)
    await any_store.create("/acls/Topic/literal/mixed", (
        b'{"version":1,"acls":[{"principal":"User:alice","host":"*","operation":"Read",'
        b'"permissionType":"Allow"},{"principal":"nobody","host":"*","operation":"Read",'
        b'"permissionType":"Allow"},{"principal":"User:bob","host":"*","operation":"Fly",'
        b'"permissionType":"Allow"},7]}'))
    await any_store.create("/acls/Group/literal/x", b'{"version":2,"acls":[]}', makepath=True)
    # A node whose name no pattern can have (a CLUSTER is only 'kafka-cluster').
    await any_store.create("/acls/Cluster/literal/other", (
        b'{"version":1,"acls":[{"principal":"User:alice","host":"*","operation":"All",'
        b'"permissionType":"Allow"}]}'), makepath=True)
    cache.start()
    try:
        await eventually(lambda: authorizer.authorize(ALICE, "h", Op.READ, RT.TOPIC, "mixed"),
                         what="the valid entry of a partly bad node")
        assert [str(b) for b in authorizer.bindings()] == [
            "ALLOW User:alice from * READ on Topic:LITERAL:mixed"]
        # load_acls reads the same way; a write replaces the unusable node.
        assert len(await acl_store.load_acls(any_store)) == 1
        await acl_store.create_acls(any_store, [acl(RT.TOPIC, PT.LITERAL, "junk")])
        await eventually(lambda: authorizer.authorize(ALICE, "h", Op.READ, RT.TOPIC, "junk"),
                         what="the rewritten node")
    finally:
        cache.stop()


@pytest_twisted.ensureDeferred
async def test_a_pattern_cannot_grow_past_its_entry_limit(any_store, monkeypatch):
    monkeypatch.setattr(acl_store, "MAX_ENTRIES", 2)
    await acl_store.create_acls(any_store, [acl(RT.GROUP, PT.LITERAL, "g", f"User:u{i}")
                                            for i in range(2)])
    with pytest.raises(acl_store.AclStoreError, match="the limit is 2"):
        await acl_store.create_acls(any_store, [acl(RT.GROUP, PT.LITERAL, "g", "User:u9")])
    assert len(await acl_store.load_acls(any_store)) == 2
