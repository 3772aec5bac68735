"""The user store against both metadata stores: a real ZooKeeper and a real one-voter metadata
quorum (``tests/support/local_quorum.py``), each test run on each.

Two store sessions play two brokers: credentials written through one (with Kafka's
AlterUserScramCredentials semantics, :mod:`broker_core.server.user_admin`) reach the other's
:class:`UserCredentialCache` through its watches; poison values written straight into the store
are logged and count as no credential; the bounds (reserved names, iterations, duplicates, the
user cap) refuse and change nothing.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from broker_core import metadata_paths as paths
from broker_core.metadata import NoNode
from broker_core.raft.metadata_store import QuorumMetadataStore
from broker_core.security.scram_credential import ScramCredential, salted_password
from broker_core.security.user_store import UserCredentialCache
from broker_core.server.user_admin import (
    Deletion,
    Upsertion,
    alter_credentials,
    describe_credentials,
)
from broker_core.wire.errors import ErrorCode
from broker_core.zk.store import ZooKeeperStore
from tests.support.cluster import eventually
from tests.support.local_quorum import LocalQuorum

SHA256, SHA512 = 1, 2


def upsert(name: str, password: str, mechanism: int = SHA512, iterations: int = 4096,
           salt: bytes | None = None) -> Upsertion:
    """What a Kafka client sends: a random salt and the salted password, not the password."""
    salt = os.urandom(32) if salt is None else salt
    mech = {SHA256: "SCRAM-SHA-256", SHA512: "SCRAM-SHA-512"}[mechanism]
    return Upsertion(name, mechanism, iterations, salt,
                     salted_password(mech, password, salt, iterations))


class Recorder(list):
    """Stands in for a cache's Logger: keeps each line it would log, formatted."""

    def _record(self, fmt: str, **kw) -> None:
        self.append(fmt.format(**kw))

    warn = error = info = _record


def codes(results: list[dict]) -> dict[str, str]:
    return {r["user"]: ErrorCode(r["error_code"]).name for r in results}


def _deferred(result):
    """The stores answer with Deferreds or coroutines alike."""
    return result if isinstance(result, Deferred) else Deferred.fromCoroutine(result)


@pytest.fixture(params=["zookeeper", "quorum"])
def two_stores(request):
    """Two started sessions of one metadata store (two brokers' views), ``/config/users``
    ensured as a broker does at start; closed afterwards."""
    if request.param == "zookeeper":
        hosts = request.getfixturevalue("zk_hosts")
        stores = [ZooKeeperStore(hosts, reactor=reactor, session_timeout=6.0) for _ in range(2)]
        quorum = None
    else:
        quorum = LocalQuorum(reactor)
        pytest_twisted.blockon(Deferred.fromCoroutine(quorum.wait_for_leader()))
        stores = [QuorumMetadataStore(quorum, reactor=reactor, session_timeout=6.0)
                  for _ in range(2)]
    for s in stores:
        pytest_twisted.blockon(_deferred(s.start()))
    pytest_twisted.blockon(_deferred(stores[0].ensure_path(paths.USER_CONFIGS)))
    yield stores
    for s in stores:
        pytest_twisted.blockon(_deferred(s.stop()))
    if quorum is not None:
        quorum.stop()


@pytest.fixture
def cache(two_stores):
    """The second session's cache, started (every user read once), stopped afterwards."""
    c = UserCredentialCache(two_stores[1])
    pytest_twisted.blockon(c.start())
    yield c
    c.stop()


@pytest_twisted.ensureDeferred
async def test_credentials_written_on_one_broker_reach_the_other_brokers_cache(two_stores,
                                                                               cache):
    admin = two_stores[0]
    salt = os.urandom(32)
    got = await alter_credentials(admin, [], [upsert("alice", "secret-a", SHA512, 8192, salt),
                                              upsert("alice", "secret-a", SHA256),
                                              upsert("bob", "secret-b")])
    assert codes(got) == {"alice": "NONE", "bob": "NONE"}
    await eventually(lambda: cache.users() == {"alice": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
                                               "bob": ("SCRAM-SHA-512",)}, what="the cache")
    # What is stored is Kafka's layout and text form, derived from the salted password.
    data, _ = await admin.get("/config/users/alice")
    stored = json.loads(data)
    assert stored["version"] == 1
    assert stored["config"]["SCRAM-SHA-512"] == ScramCredential.from_password(
        "SCRAM-SHA-512", "secret-a", salt=salt, iterations=8192).to_text()
    assert cache.lookup("SCRAM-SHA-512", "alice") == ScramCredential.from_text(
        "SCRAM-SHA-512", stored["config"]["SCRAM-SHA-512"])
    assert cache.check_plain("alice", "secret-a") and cache.check_plain("bob", "secret-b")
    assert not cache.check_plain("alice", "secret-b")
    assert not cache.check_plain("nobody", "secret-a")

    # A changed password replaces the old one in the other cache; a deletion removes it.
    assert codes(await alter_credentials(admin, [], [upsert("alice", "new-a")])) == {
        "alice": "NONE"}
    await eventually(lambda: cache.check_plain("alice", "new-a"), what="the new password")
    assert not cache.check_plain("alice", "secret-a")
    got = await alter_credentials(admin, [Deletion("bob", SHA512)], [])
    assert codes(got) == {"bob": "NONE"}
    await eventually(lambda: "bob" not in cache.users(), what="bob's removal")
    assert await admin.exists("/config/users/bob") is None  # nothing left: the node goes
    assert cache.lookup("SCRAM-SHA-512", "bob") is None


@pytest_twisted.ensureDeferred
async def test_a_cache_started_later_reads_every_stored_user(two_stores):
    await alter_credentials(two_stores[0], [], [upsert("carol", "pw-c"), upsert("a b*c", "x")])
    late = UserCredentialCache(two_stores[1])
    await late.start()  # fires only when every user has been read
    try:
        assert late.users() == {"a b*c": ("SCRAM-SHA-512",), "carol": ("SCRAM-SHA-512",)}
        assert await two_stores[0].exists("/config/users/a%20b%2Ac") is not None
    finally:
        late.stop()


@pytest_twisted.ensureDeferred
async def test_poison_values_are_no_credential_and_never_crash_the_cache(two_stores, cache,
                                                                          monkeypatch):
    admin = two_stores[0]
    warnings = Recorder()
    monkeypatch.setattr(cache, "log", warnings)
    good = ScramCredential.from_password("SCRAM-SHA-512", "pw").to_text()
    poison = {
        "notjson": b"{not json",
        "badtext": json.dumps({"version": 1, "config": {"SCRAM-SHA-512": "salt=AA=="}}).encode(),
        "toolong": json.dumps({"version": 1, "config": {"SCRAM-SHA-512": good,
                                                        "pad": "x" * 20000}}).encode(),
        "unknownmech": json.dumps({"version": 1, "config": {"SCRAM-SHA-1": good}}).encode(),
        "noconfig": b'{"version":1,"config":[1,2]}',
        "__sluice_broker": json.dumps({"version": 1, "config": {
            "SCRAM-SHA-512": good}}).encode(),  # reserved: never a stored login
        "%ZZ": json.dumps({"version": 1, "config": {"SCRAM-SHA-512": good}}).encode(),
    }
    for child, value in poison.items():
        await admin.create(f"/config/users/{child}", value)
    await admin.create("/config/users/mixed", json.dumps({"version": 1, "config": {
        "SCRAM-SHA-512": "garbage", "SCRAM-SHA-256": ScramCredential.from_password(
            "SCRAM-SHA-256", "pw").to_text(), "producer_byte_rate": "1024"}}).encode())
    await eventually(lambda: cache.users() == {"mixed": ("SCRAM-SHA-256",)},
                     what="only the readable credential cached")
    await eventually(lambda: len(warnings) >= len(poison) + 1, what="each poison value logged")
    for name in ("notjson", "badtext", "toolong", "unknownmech", "noconfig", "__sluice_broker",
                 "%ZZ"):
        assert cache.lookup("SCRAM-SHA-512", name) is None
        assert not cache.check_plain(name, "pw")
    assert cache.check_plain("mixed", "pw")  # PLAIN falls back to the SCRAM-SHA-256 credential
    assert not any(good in w or "stored_key=" in w for w in warnings)

    # Logged once: re-reading the same poison (another user changing) logs nothing new.
    seen = len(warnings)
    await alter_credentials(admin, [], [upsert("eve", "pw")])
    await eventually(lambda: "eve" in cache.users(), what="eve")
    assert len(warnings) == seen

    # An admin can overwrite a poisoned user; the quota key it held is kept.
    assert codes(await alter_credentials(admin, [], [upsert("mixed", "fixed")])) == {
        "mixed": "NONE"}
    await eventually(lambda: cache.check_plain("mixed", "fixed"), what="the repaired user")
    kept = json.loads((await admin.get("/config/users/mixed"))[0])["config"]
    assert kept["producer_byte_rate"] == "1024"


@pytest_twisted.ensureDeferred
async def test_bad_requests_are_refused_per_user_and_change_nothing(two_stores, cache):
    admin = two_stores[0]
    assert codes(await alter_credentials(admin, [], [upsert("dave", "pw")])) == {"dave": "NONE"}
    before = await admin.get("/config/users/dave")
    bad_salted = Upsertion("frank", SHA512, 4096, os.urandom(32), b"short")
    got = await alter_credentials(admin, [
        Deletion("dave", SHA256),           # dave has no SHA-256 credential
        Deletion("gina", 9),                # unknown mechanism
    ], [
        upsert("__sluice_broker", "steal"),  # reserved
        upsert("", "pw"),                    # empty name
        upsert("x" * 257, "pw"),             # too long
        upsert("tab\tname", "pw"),           # control character
        Upsertion("ivan", SHA512, 100, os.urandom(32), os.urandom(64)),      # too few
        Upsertion("judy", SHA512, 1 << 20, os.urandom(32), os.urandom(64)),  # too many
        Upsertion("ken", SHA512, 4096, b"", os.urandom(64)),                 # no salt
        bad_salted,                          # wrong salted-password size
        upsert("dave", "pw2"),               # same user as the failed deletion
        upsert("lee", "a"), upsert("lee", "b"),  # the same mechanism twice
    ])
    assert codes(got) == {
        "dave": "RESOURCE_NOT_FOUND", "gina": "UNSUPPORTED_SASL_MECHANISM",
        "__sluice_broker": "UNACCEPTABLE_CREDENTIAL", "": "UNACCEPTABLE_CREDENTIAL",
        "x" * 257: "UNACCEPTABLE_CREDENTIAL", "tab\tname": "UNACCEPTABLE_CREDENTIAL",
        "ivan": "UNACCEPTABLE_CREDENTIAL", "judy": "UNACCEPTABLE_CREDENTIAL",
        "ken": "UNACCEPTABLE_CREDENTIAL", "frank": "UNACCEPTABLE_CREDENTIAL",
        "lee": "DUPLICATE_RESOURCE"}
    assert all(r["error_message"] for r in got)
    assert "short" not in repr(bad_salted) and "salted" not in repr(bad_salted)
    # Nothing changed: dave's value is as it was, no other user exists.
    assert await admin.get("/config/users/dave") == before
    assert sorted(await admin.get_children(paths.USER_CONFIGS)) == ["dave"]
    await eventually(lambda: cache.users() == {"dave": ("SCRAM-SHA-512",)}, what="dave only")
    assert cache.check_plain("dave", "pw")


@pytest_twisted.ensureDeferred
async def test_describe_names_mechanisms_and_iterations_only(two_stores):
    admin = two_stores[0]
    await alter_credentials(admin, [], [upsert("alice", "a", SHA512, 8192),
                                        upsert("alice", "a", SHA256), upsert("bob", "b")])
    await admin.create("/config/users/quota-only",
                       b'{"version":1,"config":{"producer_byte_rate":"1"}}')
    everyone = await describe_credentials(admin, None)
    assert [(r["user"], r["error_code"], r["credential_infos"]) for r in everyone] == [
        ("alice", 0, [{"mechanism": SHA256, "iterations": 4096},
                      {"mechanism": SHA512, "iterations": 8192}]),
        ("bob", 0, [{"mechanism": SHA512, "iterations": 4096}])]
    assert await describe_credentials(admin, []) == everyone
    named = await describe_credentials(admin, ["bob", "nobody", "alice", "alice", "", "__x"])
    assert [(r["user"], ErrorCode(r["error_code"]).name) for r in named] == [
        ("bob", "NONE"), ("nobody", "RESOURCE_NOT_FOUND"), ("alice", "DUPLICATE_RESOURCE"),
        ("", "RESOURCE_NOT_FOUND"), ("__x", "RESOURCE_NOT_FOUND")]


@pytest_twisted.ensureDeferred
async def test_the_user_cap_bounds_the_cache_and_refuses_new_users(two_stores, monkeypatch):
    admin = two_stores[0]
    for name in ("u1", "u2", "u3"):
        await alter_credentials(admin, [], [upsert(name, "pw")])
    errors = Recorder()
    capped = UserCredentialCache(two_stores[1], max_users=2)
    monkeypatch.setattr(capped, "log", errors)
    await capped.start()
    try:
        assert sorted(capped.users()) == ["u1", "u2"]  # the first two in name order
        assert len(errors) == 1 and "u2" in errors[0]
        # Refused, not written: the store already holds the cap.
        got = await alter_credentials(admin, [], [upsert("u4", "pw")], max_users=3)
        assert codes(got) == {"u4": "POLICY_VIOLATION"}
        with pytest.raises(NoNode):
            await admin.get("/config/users/u4")
        # An existing user may still change its password at the cap.
        assert codes(await alter_credentials(admin, [], [upsert("u1", "new")],
                                             max_users=3)) == {"u1": "NONE"}
        # Room again: the third user is cached once another goes.
        await alter_credentials(admin, [Deletion("u1", SHA512)], [])
        await eventually(lambda: sorted(capped.users()) == ["u2", "u3"], what="u3 cached")
    finally:
        capped.stop()


def test_the_decoy_check_of_an_unknown_user_costs_a_real_check():
    """Unknown users are checked against a decoy credential of the same cost (no timing
    oracle for which users exist): the decoy is a real SCRAM-SHA-512 credential."""
    c = UserCredentialCache(store=None)
    assert c._decoy.mechanism == "SCRAM-SHA-512" and c._decoy.iterations == 4096
    assert len(c._decoy.stored_key) == hashlib.sha512().digest_size
    assert not c.check_plain("nobody", "")
