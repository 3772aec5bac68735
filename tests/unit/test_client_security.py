"""The client security properties (consumer_client.security): every good form, every bad value
refused with a ConfigError naming the key, the password in no repr and no message; and the
configs, Spark options and CLI flags that carry them."""

from __future__ import annotations

import ssl

import pytest

from broker_core.config.parsing import ConfigError
from broker_core.security.principal import SecurityProtocol
from broker_core.security.sasl import ClientCredential
from consumer_client.consumer_config import ConsumerConfig
from consumer_client.producer_config import ProducerConfig
from consumer_client.security import ClientSecurity, split
from consumer_client.spark.options import OptionError, parse_read_options, parse_write_options
from sluice_tools import cli
from tests.support.certs import make_pki

PASSWORD = "pa55-w0rd-never-shown"
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": PASSWORD}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    pki.client("alice")
    return pki


def refused(values: dict, key: str, *words: str) -> str:
    with pytest.raises(ConfigError) as e:
        ClientSecurity.from_mapping(values)
    assert e.value.key == key, str(e.value)
    for w in words:
        assert w in str(e.value)
    assert PASSWORD not in str(e.value)
    return str(e.value)


def test_plaintext_is_the_default():
    s = ClientSecurity.from_mapping({})
    assert s == ClientSecurity()
    assert s.protocol is SecurityProtocol.PLAINTEXT
    assert s.credential is None
    assert s.ssl_context() is None and s.tls_creator("h") is None


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-256"])
def test_sasl_plaintext_gives_the_credential(mechanism):
    s = ClientSecurity.from_mapping({**SASL, "sasl.mechanism": mechanism})
    assert s.protocol is SecurityProtocol.SASL_PLAINTEXT
    assert s.credential == ClientCredential(mechanism.upper(), "alice", PASSWORD)
    assert s.ssl_context() is None


def test_librdkafka_spelling_and_lowercase_protocol():
    values = {**SASL, "security.protocol": "sasl_plaintext"}
    values["sasl.mechanisms"] = values.pop("sasl.mechanism")
    assert ClientSecurity.from_mapping(values).mechanism == "SCRAM-SHA-512"


def test_the_password_is_in_no_repr():
    s = ClientSecurity.from_mapping(SASL)
    assert PASSWORD not in repr(s) and PASSWORD not in str(s)
    assert PASSWORD not in repr(s.credential)
    cfg = ConsumerConfig.from_mapping({"bootstrap.servers": "h:1", "group.id": "g",
                                       "topics": "t", **SASL})
    assert PASSWORD not in repr(cfg)
    assert PASSWORD not in repr(ProducerConfig.from_mapping({"bootstrap.servers": "h:1", **SASL}))


def test_ssl_with_ca_client_certificate_and_no_hostname_check(pki):
    client = pki.client("alice")
    s = ClientSecurity.from_mapping({
        "security.protocol": "SSL", "ssl.ca.location": str(pki.cafile),
        "ssl.certificate.location": str(client.certfile),
        "ssl.key.location": str(client.keyfile),
        "ssl.endpoint.identification.algorithm": "none"})
    assert s.verify_hostname is False and s.credential is None
    context = s.ssl_context()
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname is False
    assert context.minimum_version is ssl.TLSVersion.TLSv1_2
    assert s.tls_creator("127.0.0.1") is not None


def test_sasl_ssl_checks_the_host_name_by_default(pki):
    s = ClientSecurity.from_mapping({**SASL, "security.protocol": "SASL_SSL",
                                     "ssl.ca.location": str(pki.cafile)})
    assert s.verify_hostname is True and s.ssl_context().check_hostname is True
    assert s.credential is not None
    for spelled in ("HTTPS", ""):
        s = ClientSecurity.from_mapping({"security.protocol": "SSL",
                                         "ssl.endpoint.identification.algorithm": spelled})
        assert s.verify_hostname is (spelled == "HTTPS")


def test_bad_protocol_and_unknown_key():
    refused({"security.protocol": "TLS"}, "security.protocol", "'TLS'", "SASL_SSL")
    refused({"security.protocol": ""}, "security.protocol")
    refused({"sasl.jaas.config": "x"}, "sasl.jaas.config", "unknown security key")
    refused({**SASL, "sasl.mechanisms": "PLAIN"}, "sasl.mechanism", "twice")


@pytest.mark.parametrize("mechanism", [None, "", "GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1"])
def test_sasl_needs_a_known_mechanism(mechanism):
    values = dict(SASL)
    if mechanism is None:
        del values["sasl.mechanism"]
    else:
        values["sasl.mechanism"] = mechanism
    refused(values, "sasl.mechanism", "SCRAM-SHA-512, SCRAM-SHA-256, PLAIN")


@pytest.mark.parametrize("key", ["sasl.username", "sasl.password"])
def test_sasl_needs_username_and_password(key):
    refused({k: v for k, v in SASL.items() if k != key}, key)
    refused({**SASL, key: ""}, key)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
@pytest.mark.parametrize("key", ["sasl.mechanism", "sasl.username", "sasl.password"])
def test_sasl_keys_without_sasl_are_refused(protocol, key):
    refused({"security.protocol": protocol, key: SASL[key]}, key, protocol, "SASL")


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("key", ["ssl.ca.location", "ssl.certificate.location",
                                 "ssl.key.location", "ssl.endpoint.identification.algorithm"])
def test_ssl_keys_without_tls_are_refused(protocol, key):
    values = dict(SASL) if protocol == "SASL_PLAINTEXT" else {}
    refused({**values, "security.protocol": protocol, key: "x"}, key, "TLS")


def test_bad_identification_algorithm():
    refused({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "http"},
            "ssl.endpoint.identification.algorithm", "https or none")


def test_a_certificate_needs_its_key_and_the_key_its_certificate(pki):
    client = pki.client("alice")
    refused({"security.protocol": "SSL", "ssl.certificate.location": str(client.certfile)},
            "ssl.key.location", "needs both")
    refused({"security.protocol": "SSL", "ssl.key.location": str(client.keyfile)},
            "ssl.certificate.location", "needs both")


def test_unreadable_and_wrong_files_are_refused_naming_the_key(pki, tmp_path):
    client = pki.client("alice")
    missing = str(tmp_path / "nope.pem")
    refused({"security.protocol": "SSL", "ssl.ca.location": missing}, "ssl.ca.location",
            "cannot read", missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    refused({"security.protocol": "SSL", "ssl.ca.location": str(garbage)}, "ssl.ca.location",
            "no usable CA")
    # A key that is not the certificate's.
    refused({"security.protocol": "SSL", "ssl.certificate.location": str(client.certfile),
             "ssl.key.location": str(pki.server.keyfile)}, "ssl.certificate.location")


def test_an_encrypted_key_is_refused_without_a_prompt(pki, tmp_path):
    from cryptography.hazmat.primitives import serialization

    client = pki.client("alice")
    key = serialization.load_pem_private_key(client.keyfile.read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"secret")))
    refused({"security.protocol": "SSL", "ssl.certificate.location": str(client.certfile),
             "ssl.key.location": str(locked)}, "ssl.key.location", "encrypted")


def test_split_takes_the_security_keys_out():
    sec, rest = split({**SASL, "sasl.mechanisms": "x", "group.id": "g"})
    assert set(sec) == set(SASL) | {"sasl.mechanisms"} and rest == {"group.id": "g"}


# -- the clients' configs ------------------------------------------------------------------------


def test_consumer_and_producer_configs_carry_the_security():
    cfg = ConsumerConfig.create(bootstrap_servers="h:1", group_id="g", topics="t",
                                security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                sasl_username="alice", sasl_password=PASSWORD)
    assert cfg.security.credential == ClientCredential("PLAIN", "alice", PASSWORD)
    prod = ProducerConfig.from_kwargs({"bootstrap.servers": "h:1"}, **{
        k.replace(".", "_"): v for k, v in SASL.items()})
    assert prod.security.mechanism == "SCRAM-SHA-512"
    assert ProducerConfig.from_mapping({"bootstrap.servers": "h:1"}).security == ClientSecurity()
    with pytest.raises(ConfigError) as e:
        ConsumerConfig.from_mapping({"bootstrap.servers": "h:1", "group.id": "g", "topics": "t",
                                     "security.protocol": "SASL_SSL"})
    assert e.value.key == "sasl.mechanism"


def test_spark_options_take_security_keys_plain_or_prefixed():
    base = {"bootstrap.servers": "h:1", "subscribe": "t"}
    plain = parse_read_options({**base, **SASL}, streaming=False)
    prefixed = parse_read_options({**base, **{f"kafka.{k}": v for k, v in SASL.items()}},
                                  streaming=False)
    assert plain.security == prefixed.security
    assert plain.security.credential.username == "alice"
    with pytest.raises(OptionError) as e:
        parse_read_options({**base, **SASL, "kafka.sasl.username": "bob"}, streaming=False)
    assert "different values" in str(e.value)
    with pytest.raises(OptionError) as e:
        parse_read_options({**base, "kafka.security.protocol": "SASL_SSL"}, streaming=False)
    assert e.value.option == "sasl.mechanism" and "sasl.mechanism" in str(e.value)
    write = parse_write_options({"bootstrap.servers": "h:1", **SASL})
    assert write.producer["sasl.password"] == PASSWORD
    assert ProducerConfig.from_kwargs({**write.producer, "bootstrap.servers": "h:1"}
                                      ).security == plain.security


# -- the CLI's --command-config ------------------------------------------------------------------


def sluice(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def test_command_config_is_refused_with_zookeeper(tmp_path, capsys):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\n")
    code, err = sluice(capsys, "topics", "list", "--zookeeper", "127.0.0.1:1",
                       "--command-config", str(props))
    assert code == 2 and "--command-config goes with --bootstrap-server" in err


def test_command_config_bad_files_are_bad_usage(tmp_path, capsys):
    code, err = sluice(capsys, "users", "list", "--bootstrap-server", "127.0.0.1:1",
                       "--command-config", str(tmp_path / "missing.properties"))
    assert code == 2 and "not found" in err
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n"
                     f"sasl.username=alice\nsasl.password={PASSWORD}\n")
    # (``quorum`` takes the cluster secret, not client settings: the quorum port serves
    # brokers only.)
    for argv in (["users", "list"], ["acls", "list"], ["groups", "list"], ["topics", "list"],
                 ["loadtest", "--topic", "t", "--consumers", "1", "--out", str(tmp_path / "lt")],
                 ["consume", "--topic", "t", "--group", "g"]):
        code, err = sluice(capsys, *argv, "--bootstrap-server", "127.0.0.1:1",
                           "--command-config", str(props))
        assert code == 2, (argv, err)
        assert "sasl.mechanism" in err and PASSWORD not in err
    props.write_text("security.protocol=SSL\nrequest.timeout.ms=5\n")
    code, err = sluice(capsys, "acls", "list", "--bootstrap-server", "127.0.0.1:1",
                       "--command-config", str(props))
    assert code == 2 and "unknown security key 'request.timeout.ms'" in err
