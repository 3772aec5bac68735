"""The pure parts of the user store and its APIs: user-name rules, Kafka's name encoding in
``/config/users``, the stored value's codec (poison refused, other keys kept), the credential
derived from a client's salted password, and the authorization seam of both APIs (a refused
request never reaches the store). The store itself is tested on both metadata stores in
``tests/integration/test_user_store.py``."""

from __future__ import annotations

import json
import os

import pytest
import pytest_twisted
from twisted.internet import defer

from broker_core import metadata_paths as paths
from broker_core.security.acl import (
    CLUSTER_NAME,
    AccessEntry,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker_core.security.principal import ConnectionSecurity, Principal, SecurityProtocol
from broker_core.security.scram_credential import ScramCredential, salted_password
from broker_core.security.user_store import (
    MAX_USER_CONFIG_BYTES,
    MAX_USER_NAME_BYTES,
    UserConfig,
    validate_user_name,
)
from broker_core.server.handlers import RequestHandler
from broker_core.server.user_admin import MAX_REQUEST_ENTRIES, UserAdminApis
from broker_core.wire.apis import ApiKey, encode_response
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import alter_user_scram_credentials as alter_msg
from broker_core.wire.messages import describe_user_scram_credentials as describe_msg


@pytest.mark.parametrize("name", ["alice", "a" * MAX_USER_NAME_BYTES, "é" * 128, "a b*c",
                                  "user@example.com", "_single", "x_"])
def test_valid_user_names(name):
    validate_user_name(name)


@pytest.mark.parametrize("name, why", [
    ("", "empty"), ("a" * (MAX_USER_NAME_BYTES + 1), "257 bytes"), ("é" * 129, "258 bytes"),
    ("tab\there", "control"), ("nul\x00", "control"), ("c1\x85", "control"),
    ("\ud800", "UTF-8"), (".", "cannot be"), ("..", "cannot be"),
    ("__sluice_broker", "reserved"), ("__anything", "reserved"),
])
def test_invalid_user_names_say_why(name, why):
    with pytest.raises(ValueError, match=why):
        validate_user_name(name)


@pytest.mark.parametrize("name, node", [
    ("alice", "alice"), ("a b", "a%20b"), ("a*b", "a%2Ab"), ("a+b", "a%2Bb"),
    ("a/b", "a%2Fb"), ("a~b", "a%7Eb"), ("é", "%C3%A9"), ("a.b_c-d", "a.b_c-d"),
])
def test_user_nodes_are_named_as_kafka_sanitizes_them(name, node):
    assert paths.user_config(name) == f"/config/users/{node}"
    assert paths.desanitize_user(node) == name


@pytest.mark.parametrize("node", ["a+b", "a b", "%zz", "%C3", "%61", "a*b", "%2a"])
def test_a_node_name_kafka_would_not_write_is_no_user(node):
    assert paths.desanitize_user(node) is None


def test_user_config_round_trips_and_keeps_other_keys():
    sha512 = ScramCredential.from_password("SCRAM-SHA-512", "pw", iterations=8192)
    config = UserConfig({"SCRAM-SHA-512": sha512}, {"producer_byte_rate": "1024"})
    data = config.to_bytes()
    assert json.loads(data) == {"version": 1, "config": {
        "SCRAM-SHA-512": sha512.to_text(), "producer_byte_rate": "1024"}}
    assert UserConfig.from_bytes(data) == config


@pytest.mark.parametrize("data, why", [
    (b"\xff", "JSON"), (b"{", "JSON"), (b"[]", "config"), (b'{"config":[]}', "config"),
    (b'{"config":{"SCRAM-SHA-512":5}}', "config"),
    (b'{"config":{"k":"' + b"x" * MAX_USER_CONFIG_BYTES + b'"}}', "limit"),
])
def test_unreadable_values_are_refused_whole(data, why):
    with pytest.raises(ValueError, match=why):
        UserConfig.from_bytes(data)


def test_one_bad_credential_is_a_problem_not_a_refusal():
    sha256 = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    data = json.dumps({"version": 1, "config": {
        "SCRAM-SHA-256": sha256.to_text(), "SCRAM-SHA-512": "salt=AAAA",
        "SCRAM-SHA-1": "whatever", "consumer_byte_rate": "1"}}).encode()
    config = UserConfig.from_bytes(data)
    assert config.credentials == {"SCRAM-SHA-256": sha256}
    # Kept verbatim (an alter of SHA-256 must not lose them), never used as credentials.
    assert config.other == {"SCRAM-SHA-512": "salt=AAAA", "SCRAM-SHA-1": "whatever",
                            "consumer_byte_rate": "1"}
    assert len(config.problems) == 2
    assert any("unknown SCRAM mechanism" in p for p in config.problems)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_credential_of_a_salted_password_is_the_passwords(mechanism):
    salt = os.urandom(24)
    salted = salted_password(mechanism, "pässword", salt, 5000)
    assert ScramCredential.from_salted_password(mechanism, salt, salted, 5000) == \
        ScramCredential.from_password(mechanism, "pässword", salt=salt, iterations=5000)


@pytest.mark.parametrize("salt, salted, iterations, why", [
    (b"s" * 16, b"p" * 64, 4095, "iterations"),
    (b"s" * 16, b"p" * 64, 16385, "iterations"),
    (b"", b"p" * 64, 4096, "salt"),
    (b"s" * 1025, b"p" * 64, 4096, "salt"),
    (b"s" * 16, b"p" * 32, 4096, "salted password"),
])
def test_a_salted_password_that_does_not_fit_is_refused(salt, salted, iterations, why):
    with pytest.raises(ValueError, match=why):
        ScramCredential.from_salted_password("SCRAM-SHA-512", salt, salted, iterations)


# -- the authorization seam ----------------------------------------------------------------------


class _Handler(UserAdminApis):
    """The two APIs with RequestHandler's seam and no store at all: a refused request that
    reached the store would fail on ``None``. Its authorizer has no ACLs and one super user,
    ``User:admin``: everyone else but a broker is refused."""

    store = None
    authorizer = Authorizer(super_users=["User:admin"])
    super_users = frozenset()  # without an authorizer (not this one's case): none
    authorize_cluster = RequestHandler.authorize_cluster

    class log:  # noqa: N801 (stands in for a Logger)
        @staticmethod
        def info(*args, **kwargs):
            raise AssertionError("a refused request logs no alteration")


class _Proto:
    def __init__(self, security):
        self.security = security


def _sasl(authenticated: bool) -> ConnectionSecurity:
    s = ConnectionSecurity("CLIENT", SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1")
    if authenticated:
        s.authenticate(Principal("User", "admin"))
    return s


def test_authorize_cluster_asks_the_authorizer_about_the_cluster():
    """The user APIs' guard: with no authorizer only a broker connection or one of
    ``super.users`` may (an open cluster must not let anyone set the password of the user it
    wants to become); with one, only a principal allowed the operation on the CLUSTER
    resource (or a broker connection); no security record: no."""
    class _H:
        authorizer = None
        super_users = frozenset({"User:alice"})
        authorize_cluster = RequestHandler.authorize_cluster

    h = _H()
    alice = ConnectionSecurity("C", SecurityProtocol.SASL_PLAINTEXT)
    alice.authenticate(Principal("User", "alice"))
    mallory = ConnectionSecurity("C", SecurityProtocol.SASL_PLAINTEXT)
    mallory.authenticate(Principal("User", "mallory"))
    anonymous = ConnectionSecurity("C", SecurityProtocol.PLAINTEXT)
    assert not h.authorize_cluster(_Proto(mallory), "ALTER")  # no authorizer: not anyone
    assert not h.authorize_cluster(_Proto(anonymous), "DESCRIBE")
    assert h.authorize_cluster(_Proto(alice), "ALTER")  # a super user
    h.super_users = frozenset()
    h.authorizer = Authorizer()
    h.authorizer.replace_resource(
        ResourcePattern(ResourceType.CLUSTER, PatternType.LITERAL, CLUSTER_NAME),
        [AccessEntry("User:alice", "*", AclOperation.ALTER, AclPermission.ALLOW)])
    assert h.authorize_cluster(_Proto(alice), "ALTER")
    assert h.authorize_cluster(_Proto(alice), "DESCRIBE")  # ALTER implies DESCRIBE
    assert not h.authorize_cluster(_Proto(mallory), "ALTER")
    assert not h.authorize_cluster(_Proto(mallory), "DESCRIBE")
    broker = ConnectionSecurity("B", SecurityProtocol.SASL_PLAINTEXT)
    broker.authenticate(Principal("User", "__sluice_broker"), is_broker=True)
    assert h.authorize_cluster(_Proto(broker), "ALTER")
    assert not h.authorize_cluster(object(), "ALTER")  # no security record: refused


def _alter_body(count: int = 1):
    return alter_msg.REQUEST.build({"deletions": [{"name": "bob", "mechanism": 2}],
                                    "upsertions": [{"name": f"u{i}", "mechanism": 2,
                                                    "iterations": 4096, "salt": b"s" * 16,
                                                    "salted_password": b"p" * 64}
                                                   for i in range(count)]})


@pytest_twisted.ensureDeferred
async def test_refused_requests_answer_kafkas_errors_and_touch_nothing():
    h, unauthenticated = _Handler(), _Proto(_sasl(authenticated=False))
    got = await defer.ensureDeferred(
        h.alter_user_scram_credentials(None, _alter_body(2), unauthenticated))
    assert [(r["user"], r["error_code"]) for r in got["results"]] == [
        ("bob", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        ("u0", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        ("u1", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    encode_response(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 7, got)  # a valid answer
    described = await defer.ensureDeferred(h.describe_user_scram_credentials(
        None, describe_msg.REQUEST.build({"users": None}), unauthenticated))
    assert described["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert described["results"] == []
    encode_response(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 8, described)

    too_many = await defer.ensureDeferred(h.alter_user_scram_credentials(
        None, _alter_body(MAX_REQUEST_ENTRIES), _Proto(_sasl(authenticated=True))))
    assert {r["error_code"] for r in too_many["results"]} == {ErrorCode.INVALID_REQUEST}
    names = [{"name": f"u{i}"} for i in range(MAX_REQUEST_ENTRIES + 1)]
    described = await defer.ensureDeferred(h.describe_user_scram_credentials(
        None, describe_msg.REQUEST.build({"users": names}), _Proto(_sasl(authenticated=True))))
    assert described["error_code"] == ErrorCode.INVALID_REQUEST
