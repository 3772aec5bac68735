"""The cluster secret file: generated private, loaded only when it is safe to trust, each refusal
saying which check failed; and the config keys that name it and the SASL mechanisms."""

from __future__ import annotations

import os

import pytest

from broker_core.config.broker_config import BrokerConfig
from broker_core.config.parsing import ConfigError
from broker_core.security import cluster_secret
from broker_core.security.cluster_secret import ClusterSecretError
from broker_core.security.sasl import CLUSTER_USER, SaslServer, SaslSettings
from broker_core.security.scram import ScramClient


def test_generate_writes_a_private_secret_that_loads(tmp_path):
    path = tmp_path / "cluster.secret"
    secret = cluster_secret.generate(path)
    assert len(secret) == 64 and int(secret, 16) >= 0  # 256 random bits as hex
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert cluster_secret.load(path) == secret
    with pytest.raises(FileExistsError):
        cluster_secret.generate(path)  # never overwritten
    assert cluster_secret.load(path) == secret


def write(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_surrounding_whitespace_is_not_part_of_the_secret(tmp_path):
    assert cluster_secret.load(write(tmp_path / "s", "  " + "x" * 32 + "\n")) == "x" * 32


@pytest.mark.parametrize("text, mode, reason", [
    ("x" * 31, 0o600, "has 31 characters; at least 32"),
    ("x" * 31 + "\n   ", 0o600, "has 31 characters"),
    ("x" * 40, 0o604, "accessible by other users"),
    ("x" * 40, 0o644, "accessible by other users"),
    ("x" * 40, 0o620, "accessible by other users"),  # group-writable: anyone in it may swap it
    ("x" * 5000, 0o600, "larger than"),
])
def test_unsafe_or_weak_secrets_are_refused(tmp_path, text, mode, reason):
    with pytest.raises(ClusterSecretError, match=reason):
        cluster_secret.load(write(tmp_path / "s", text, mode))


def test_missing_unreadable_non_utf8_and_directory_are_refused(tmp_path):
    with pytest.raises(ClusterSecretError, match="does not exist"):
        cluster_secret.load(tmp_path / "nope")
    with pytest.raises(ClusterSecretError, match="not a regular file"):
        cluster_secret.load(tmp_path)
    binary = tmp_path / "b"
    binary.write_bytes(b"\xff" * 40)
    os.chmod(binary, 0o600)
    with pytest.raises(ClusterSecretError, match="not UTF-8"):
        cluster_secret.load(binary)
    if os.geteuid() != 0:  # root reads anything
        locked = write(tmp_path / "locked", "x" * 40, 0o000)
        with pytest.raises(ClusterSecretError, match="cannot be read"):
            cluster_secret.load(locked)


def test_credential_and_login_derived_from_the_secret_match():
    secret = "y" * 48
    server = SaslServer(SaslSettings(cluster_credential=cluster_secret.cluster_credential(secret)))
    login = cluster_secret.broker_login(secret)
    assert (login.mechanism, login.username) == ("SCRAM-SHA-512", CLUSTER_USER)
    server.handshake(login.mechanism)
    client = ScramClient(login.mechanism, login.username, login.password)
    first = server.authenticate(client.client_first())
    assert server.authenticate(client.client_final(first.auth_bytes)).result == "success"
    assert server.is_broker


BASE = {"broker.id": "1", "log.dirs": "/nonexistent", "zookeeper.connect": "localhost:2181"}


def test_config_keys_defaults_and_refusals(tmp_path):
    cfg = BrokerConfig.from_mapping(BASE)
    assert cfg.sasl_mechanisms() == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    assert cfg.cluster_secret_file is None
    with pytest.raises(ConfigError, match="missing required config key 'cluster.secret.file'"
                       ".*sluice secret create FILE") as e:
        # Every broker needs one; the message says how to make it.
        cluster_secret.load_cluster_credential(cfg)
    assert e.value.key == "cluster.secret.file"
    cfg = BrokerConfig.from_mapping({**BASE, "sasl.enabled.mechanisms": " PLAIN , SCRAM-SHA-512"})
    assert cfg.sasl_mechanisms() == ("PLAIN", "SCRAM-SHA-512")
    assert cfg.as_properties()["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-512"
    for bad, reason in (("GSSAPI", "unknown SASL mechanism 'GSSAPI'"), ("", "expected"),
                        ("PLAIN,,SCRAM-SHA-256", "expected"),
                        ("PLAIN,PLAIN", "at most once"), ("plain", "unknown")):
        with pytest.raises(ConfigError, match=reason) as e:
            BrokerConfig.from_mapping({**BASE, "sasl.enabled.mechanisms": bad})
        assert e.value.key == "sasl.enabled.mechanisms"
    weak = write(tmp_path / "weak", "short")
    cfg = BrokerConfig.from_mapping({**BASE, "cluster.secret.file": str(weak)})
    with pytest.raises(ConfigError, match="cluster.secret.file .* at least 32") as e:
        cluster_secret.load_cluster_credential(cfg)
    assert e.value.key == "cluster.secret.file"
    good = write(tmp_path / "good", "z" * 40)
    credential = cluster_secret.load_cluster_credential(BrokerConfig.from_mapping(
        {**BASE, "cluster.secret.file": str(good)}))
    assert credential.secret == "z" * 40 and "z" * 40 not in repr(credential)
    assert (credential.login.username, credential.login.password) == (CLUSTER_USER, "z" * 40)


def test_unknown_users_get_the_same_salt_from_every_broker_of_a_cluster():
    def salt_shown(settings):
        server = SaslServer(settings)
        server.handshake("SCRAM-SHA-512")
        return server.authenticate(b"n,,n=mallory,r=abcdefgh").auth_bytes.split(b",s=")[1]

    def broker(secret):  # each broker derives its own cluster credential (its own salt)
        return SaslSettings(cluster_credential=cluster_secret.cluster_credential(secret),
                            decoy_key=cluster_secret.decoy_key(secret))

    assert salt_shown(broker("y" * 48)) == salt_shown(broker("y" * 48))
    assert salt_shown(broker("y" * 48)) != salt_shown(broker("z" * 48))
