"""ZooKeeper ACLs: the brokers' credential file (each way it can be wrong is refused with a
message naming the key), the mechanism that proves it (SASL DIGEST-MD5 or the ``digest``
scheme), how the store hands each to kazoo, and the ACL each path gets."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from broker_core.config.broker_config import BrokerConfig
from broker_core.config.metadata_keys import DIGEST, SASL_DIGEST_MD5, parse_mechanism
from broker_core.config.parsing import ConfigError
from broker_core.security.secret_file import MAX_SECRET_FILE_BYTES, read_secret_file
from broker_core.zk.acl_policy import (
    ALL,
    OPEN_ACL,
    READ,
    AclEntry,
    AclPolicy,
    ZkAuthFileError,
    ZkCredential,
    broker_acl_policy,
    is_sensitive,
    secure_acl,
)
from broker_core.zk.store import kazoo_auth

PASSWORD = "0123456789abcdef0123456789abcdef"
BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "data"}


def auth_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    p = tmp_path / "zk-auth"
    p.write_text(text)
    os.chmod(p, mode)
    return p


def test_credential_file_is_read_and_named_as_zookeeper_names_it(tmp_path):
    cred = ZkCredential.from_file(str(auth_file(tmp_path, f"sluice:{PASSWORD}\n")),
                                  mechanism=DIGEST)
    assert (cred.username, cred.password, cred.mechanism) == ("sluice", PASSWORD, DIGEST)
    expected = base64.b64encode(hashlib.sha1(f"sluice:{PASSWORD}".encode()).digest()).decode()
    assert cred.digest_id == f"sluice:{expected}"
    assert cred.auth == f"sluice:{PASSWORD}"
    assert cred.owner == AclEntry(ALL, "digest", f"sluice:{expected}")
    assert PASSWORD not in repr(cred)


def test_a_sasl_credential_is_named_by_its_user_alone(tmp_path):
    cred = ZkCredential.from_file(str(auth_file(tmp_path, f"sluice:{PASSWORD}\n")))
    assert cred.mechanism == SASL_DIGEST_MD5 and cred.is_sasl  # the default, as Kafka's
    # ZooKeeper's SASL provider names a DIGEST-MD5 login by its user: no secret in the ACL.
    assert cred.owner == AclEntry(ALL, "sasl", "sluice")
    assert str(cred.owner) == "sasl:sluice:cdrwa"
    assert PASSWORD not in repr(cred) and "DIGEST-MD5" in repr(cred)
    with pytest.raises(ValueError, match="unknown ZooKeeper auth mechanism"):
        ZkCredential("sluice", PASSWORD, "PLAIN")


@pytest.mark.parametrize("raw, mechanism", [
    ("DIGEST-MD5", SASL_DIGEST_MD5), ("digest-md5", SASL_DIGEST_MD5), (" DIGEST-MD5 ", SASL_DIGEST_MD5),
    ("digest", DIGEST), ("DIGEST", DIGEST),
])
def test_mechanism_names(raw, mechanism):
    assert parse_mechanism(raw) == mechanism


@pytest.mark.parametrize("raw", ["", "PLAIN", "GSSAPI", "md5", "sasl"])
def test_unknown_mechanisms_are_refused(raw):
    with pytest.raises(ValueError, match="DIGEST-MD5 or digest"):
        parse_mechanism(raw)


def test_each_mechanism_reaches_kazoo_as_its_own_login():
    sasl = ZkCredential("sluice", PASSWORD)
    assert kazoo_auth(sasl) == {"sasl_options": {
        "mechanism": "DIGEST-MD5", "username": "sluice", "password": PASSWORD}}
    assert kazoo_auth(ZkCredential("sluice", PASSWORD, DIGEST)) == {
        "auth_data": [("digest", f"sluice:{PASSWORD}")]}
    assert kazoo_auth(None) == {}


@pytest.mark.parametrize("text, why", [
    ("", "exactly one line"),
    (f"sluice:{PASSWORD}\nother:{PASSWORD}\n", "exactly one line"),
    (PASSWORD, "username:password"),
    (f":{PASSWORD}", "username:password"),
    (f"slu ice:{PASSWORD}", "username:password"),
    ("sluice:short", "at least 32"),
    (f"sluice:{PASSWORD} x", "whitespace"),
])
@pytest.mark.parametrize("mechanism", [SASL_DIGEST_MD5, DIGEST])
def test_malformed_credential_files_are_refused(tmp_path, text, why, mechanism):
    with pytest.raises(ZkAuthFileError, match=why):
        ZkCredential.from_file(str(auth_file(tmp_path, text)), mechanism=mechanism)


@pytest.mark.parametrize("mechanism, reason", [(SASL_DIGEST_MD5, "guessed offline"),
                                               (DIGEST, "unsalted hash")])
def test_a_short_password_is_refused_with_the_mechanisms_reason(tmp_path, mechanism, reason):
    with pytest.raises(ZkAuthFileError, match=reason):
        ZkCredential.from_file(str(auth_file(tmp_path, "sluice:short")), mechanism=mechanism)


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o601])
def test_a_credential_file_other_users_can_reach_is_refused(tmp_path, mode):
    p = auth_file(tmp_path, f"sluice:{PASSWORD}", mode)
    with pytest.raises(ZkAuthFileError, match="accessible by other users.*chmod 600"):
        ZkCredential.from_file(str(p))


def test_group_readable_is_allowed(tmp_path):
    # A service group may need to read it (e.g. the broker runs as a group member).
    assert ZkCredential.from_file(str(auth_file(tmp_path, f"u:{PASSWORD}", 0o640))).username == "u"


def test_missing_directory_and_oversized_files_are_refused(tmp_path):
    with pytest.raises(ZkAuthFileError, match="does not exist"):
        ZkCredential.from_file(str(tmp_path / "nope"))
    with pytest.raises(ZkAuthFileError, match="not a regular file"):
        ZkCredential.from_file(str(tmp_path))
    big = auth_file(tmp_path, "x" * (MAX_SECRET_FILE_BYTES + 1))
    with pytest.raises(ZkAuthFileError, match="more than a secret file holds"):
        ZkCredential.from_file(str(big))
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe")
    os.chmod(binary, 0o600)
    with pytest.raises(ValueError, match="not UTF-8"):
        read_secret_file(binary, "x")


@pytest.mark.parametrize("mechanism", [SASL_DIGEST_MD5, DIGEST])
def test_acl_per_path(mechanism):
    cred = ZkCredential("sluice", PASSWORD, mechanism)
    owner = cred.owner
    world_read = AclEntry(READ, "world", "anyone")
    for path in ("/", "/brokers/ids/1", "/config", "/config/topics/t", "/config/usersx"):
        assert not is_sensitive(path)
        assert secure_acl(path, cred) == (owner, world_read)
    for path in ("/config/users", "/config/users/alice"):
        assert is_sensitive(path)
        assert secure_acl(path, cred) == (owner,)
    assert str(owner) == ("sasl:sluice:cdrwa" if mechanism == SASL_DIGEST_MD5
                          else f"digest:{cred.digest_id}:cdrwa")
    assert str(world_read) == "world:anyone:r"


def test_policy_without_set_acl_creates_open_nodes():
    cred = ZkCredential("sluice", PASSWORD)
    assert AclPolicy().acl_for("/brokers") == OPEN_ACL
    assert AclPolicy(cred).acl_for("/brokers") == OPEN_ACL
    assert AclPolicy(cred, set_acl=True).acl_for("/brokers") == secure_acl("/brokers", cred)
    with pytest.raises(ValueError, match="needs a credential"):
        AclPolicy(None, set_acl=True)


# -- the config keys ------------------------------------------------------------------------------

def test_config_defaults_to_no_acls():
    cfg = BrokerConfig.from_mapping(BASE)
    assert cfg.zookeeper_set_acl is False and cfg.zookeeper_auth_file is None
    assert cfg.zookeeper_auth_mechanism == "DIGEST-MD5"
    assert broker_acl_policy(cfg) == AclPolicy()


@pytest.mark.parametrize("raw, mechanism", [(None, SASL_DIGEST_MD5), ("DIGEST-MD5", SASL_DIGEST_MD5),
                                            ("digest", DIGEST), ("Digest", DIGEST)])
def test_config_mechanism_chooses_how_the_credential_is_proven(tmp_path, raw, mechanism):
    good = auth_file(tmp_path, f"sluice:{PASSWORD}")
    values = {**BASE, "zookeeper.set.acl": "true", "zookeeper.auth.file": str(good)}
    if raw is not None:
        values["zookeeper.auth.mechanism"] = raw
    cfg = BrokerConfig.from_mapping(values)
    assert broker_acl_policy(cfg) == AclPolicy(ZkCredential("sluice", PASSWORD, mechanism),
                                                   True)


def test_config_refuses_an_unknown_mechanism():
    with pytest.raises(ConfigError, match="DIGEST-MD5 or digest") as e:
        BrokerConfig.from_mapping({**BASE, "zookeeper.auth.mechanism": "GSSAPI"})
    assert e.value.key == "zookeeper.auth.mechanism"


def test_config_set_acl_needs_an_auth_file():
    with pytest.raises(ConfigError, match="zookeeper.auth.file") as e:
        BrokerConfig.from_mapping({**BASE, "zookeeper.set.acl": "true"})
    assert e.value.key == "zookeeper.auth.file"


def test_the_broker_reads_and_checks_the_auth_file(tmp_path):
    good = auth_file(tmp_path, f"sluice:{PASSWORD}")
    cfg = BrokerConfig.from_mapping({**BASE, "zookeeper.set.acl": "true",
                                     "zookeeper.auth.file": str(good)})
    assert broker_acl_policy(cfg) == AclPolicy(ZkCredential("sluice", PASSWORD), True)
    os.chmod(good, 0o644)
    with pytest.raises(ConfigError, match="accessible by other users") as e:
        broker_acl_policy(BrokerConfig.from_mapping({**BASE, "zookeeper.auth.file": str(good)}))
    assert e.value.key == "zookeeper.auth.file"
    with pytest.raises(ConfigError, match="does not exist"):
        broker_acl_policy(BrokerConfig.from_mapping(
            {**BASE, "zookeeper.auth.file": str(tmp_path / "missing")}))


def test_quorum_mode_ignores_the_zookeeper_acl_keys():
    cfg = BrokerConfig.from_mapping({"broker.id": "1", "log.dirs": "data",
                                     "metadata.store": "quorum", "quorum.voters": "1@h:9093",
                                     "zookeeper.set.acl": "true"})
    assert cfg.zookeeper_set_acl is True  # parsed, unused: there is no ZooKeeper
