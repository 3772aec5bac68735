"""Named listeners: the config model (every good form and every refusal), TLS file loading,
the TLS principal's name, the registration's endpoints and per-listener Metadata answers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID, ObjectIdentifier
from twisted.internet import defer

from broker_core import metadata_paths as paths
from broker_core.config.broker_config import BrokerConfig
from broker_core.config.listeners import ClientAuth
from broker_core.config.parsing import ConfigError
from broker_core.controller.batch import LiveBroker
from broker_core.controller.context import _live_endpoints
from broker_core.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState
from broker_core.security.principal import ConnectionSecurity, SecurityProtocol
from broker_core.security.ssl_principal import distinguished_name
from broker_core.server.authorization import Access
from broker_core.server.handlers import RequestHandler
from broker_core.server.listener_endpoints import TlsFileError, load_peer_tls, load_tls_options
from broker_core.wire.errors import ErrorCode
from tests.support.certs import make_pki

BASE = {"broker.id": "1", "zookeeper.connect": "zk:2181", "log.dirs": "/data"}
TLS = {"ssl.certfile": "/tls/server.pem", "ssl.keyfile": "/tls/server.key"}


def listeners(**keys: str):
    return BrokerConfig.from_mapping({**BASE, **keys}).listener_configs()


def refused(**keys: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping({**BASE, **keys})
    return info.value


# -- the model -----------------------------------------------------------------------------------

def test_the_old_twisted_endpoint_is_one_plaintext_listener():
    model = listeners()
    (only,) = model
    assert (only.name, only.protocol, only.endpoint) == ("PLAINTEXT", SecurityProtocol.PLAINTEXT,
                                                          "tcp:9092")
    assert model.inter_broker == "PLAINTEXT"
    assert only.advertised_address("0.0.0.0", 9092) == ("127.0.0.1", 9092)


def test_kafka_form_with_names_hosts_and_ports():
    model = listeners(**{"listeners": "client://:9092, Internal://127.0.0.1:0,"
                                      "SASL_PLAINTEXT://[::1]:9094",
                         "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SSL",
                         "inter.broker.listener.name": "client", **TLS})
    assert [(lc.name, lc.host, lc.port, lc.endpoint) for lc in model] == [
        ("CLIENT", "", 9092, None), ("INTERNAL", "127.0.0.1", 0, None),
        ("SASL_PLAINTEXT", "::1", 9094, None)]
    # A listener named after a protocol needs no map entry.
    assert [lc.protocol.value for lc in model] == ["PLAINTEXT", "SSL", "SASL_PLAINTEXT"]
    assert model.inter_broker == "CLIENT"


def test_the_first_listener_is_the_inter_broker_one_by_default():
    assert listeners(**{"listeners": "SASL_PLAINTEXT://:1,PLAINTEXT://:2"}).inter_broker == \
        "SASL_PLAINTEXT"


def test_protocol_map_inter_broker_name_and_advertised_addresses():
    model = listeners(**{
        "listeners": "CLIENT://:9092,BROKER://10.0.0.1:9093",
        "listener.security.protocol.map": "client:sasl_plaintext, BROKER:PLAINTEXT",
        "inter.broker.listener.name": "broker",
        "advertised.listeners": "CLIENT://kafka1.example:19092"})
    client, broker = model
    assert client.protocol is SecurityProtocol.SASL_PLAINTEXT
    assert broker.protocol is SecurityProtocol.PLAINTEXT
    assert model.inter_broker == "BROKER" and model.inter_broker_listener is broker
    assert client.advertised_address("0.0.0.0", 9092) == ("kafka1.example", 19092)
    assert broker.advertised_address("10.0.0.1", 9093) == ("10.0.0.1", 9093)  # not advertised
    assert model.protocol_map() == {"CLIENT": "SASL_PLAINTEXT", "BROKER": "PLAINTEXT"}
    assert client.settings.name == "CLIENT"


def test_the_old_advertised_form_is_the_first_listener():
    model = listeners(**{"listeners": "A://:1,B://:2", "listener.security.protocol.map":
                         "A:PLAINTEXT,B:PLAINTEXT", "advertised.listeners": "h:9"})
    assert [lc.advertised for lc in model] == [("h", 9), None]


def test_tls_files_with_per_listener_overrides():
    model = listeners(**{
        "listeners": "SSL://:9093,CLIENTS://:9094,PLAINTEXT://:9092",
        "listener.security.protocol.map": "SSL:SSL,CLIENTS:SASL_SSL,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        **TLS, "ssl.cafile": "/tls/ca.pem",
        "listener.name.clients.ssl.certfile": "/tls/clients.pem",
        "listener.name.clients.ssl.client.auth": "Required"})
    ssl_listener, clients, plain = model
    assert (ssl_listener.tls.certfile, ssl_listener.tls.client_auth) == (
        "/tls/server.pem", ClientAuth.NONE)
    assert (clients.tls.certfile, clients.tls.keyfile, clients.tls.cafile,
            clients.tls.client_auth) == ("/tls/clients.pem", "/tls/server.key", "/tls/ca.pem",
                                         ClientAuth.REQUIRED)
    assert clients.tls.key_of("ssl.certfile") == "listener.name.clients.ssl.certfile"
    assert plain.tls is None


def test_overrides_are_config_values():
    cfg = BrokerConfig.from_mapping({**BASE, **TLS, "listeners": "SSL://:9093,P://:9092",
                                     "listener.security.protocol.map": "SSL:SSL,P:PLAINTEXT",
                                     "inter.broker.listener.name": "P",
                                     "listener.name.ssl.ssl.keyfile": "/other.key"})
    assert cfg.get("listener.name.ssl.ssl.keyfile") == "/other.key"
    assert cfg.as_properties()["listener.name.ssl.ssl.keyfile"] == "/other.key"


@pytest.mark.parametrize("keys, key, message", [
    ({"listeners": "A://:1,a://:2"}, "listeners",
     "listeners: listener name A is given twice in 'A://:1,a://:2'"),
    ({"listeners": "PLAINTEXT://:9092,SSL://127.0.0.1:9092", **TLS}, "listeners",
     "listeners: PLAINTEXT and SSL both listen on port 9092"),
    ({"listeners": "PLAINTEXT://:9092,X://:9093",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,X:TLS"},
     "listener.security.protocol.map",
     "listener.security.protocol.map: unknown security protocol 'TLS' for listener X (one of "
     "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"),
    ({"listeners": "PLAINTEXT://:9092",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:SSL"},
     "listener.security.protocol.map",
     "listener.security.protocol.map names OTHER, which is not in listeners (PLAINTEXT)"),
    ({"listeners": "CLIENT://:9092"}, "listener.security.protocol.map",
     "listener CLIENT has no security protocol: add CLIENT:PROTOCOL (PLAINTEXT, SSL, "
     "SASL_PLAINTEXT or SASL_SSL) to listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "BROKER"},
     "inter.broker.listener.name",
     "inter.broker.listener.name BROKER is not one of the listeners (PLAINTEXT)"),
    ({"listeners": "SSL://:9093,PLAINTEXT://:9092", **TLS}, "ssl.cafile",
     "inter.broker.listener.name SSL is a TLS listener and needs ssl.cafile (the CA that "
     "signs the brokers' certificates, which brokers verify each other against)"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "BROKER://h:9092"},
     "advertised.listeners",
     "advertised.listeners names BROKER, which is not in listeners (PLAINTEXT)"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://:9092"},
     "advertised.listeners",
     "invalid value 'PLAINTEXT://:9092' for 'advertised.listeners': expected a host for "
     "PLAINTEXT (clients cannot connect to an empty host)"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://h:0"},
     "advertised.listeners",
     "invalid value 'PLAINTEXT://h:0' for 'advertised.listeners': expected host:port with a "
     "port from 1 to 65535"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093"}, "ssl.certfile",
     "listener SSL uses TLS and needs ssl.certfile (or listener.name.ssl.ssl.certfile)"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", "ssl.certfile": "/c"}, "ssl.keyfile",
     "listener SSL uses TLS and needs ssl.keyfile (or listener.name.ssl.ssl.keyfile)"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", **TLS, "ssl.client.auth": "required"},
     "ssl.cafile", "listener SSL has ssl.client.auth=required and needs ssl.cafile (the CA "
                   "that signs client certificates)"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", **TLS,
      "listener.name.ssl.ssl.client.auth": "always"}, "listener.name.ssl.ssl.client.auth",
     "invalid value 'always' for 'listener.name.ssl.ssl.client.auth': expected none, "
     "requested or required"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth",
     "invalid value 'sometimes' for 'ssl.client.auth': expected none, requested or required"),
    ({"listener.name.client.ssl.certfile": "/c"}, "listener.name.client.ssl.certfile",
     "listener.name.client.ssl.certfile names listener CLIENT, which is not in listeners "
     "(PLAINTEXT)"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", **TLS,
      "listener.name.SSL.ssl.cafile": "/c"}, "listener.name.SSL.ssl.cafile",
     "listener.name.SSL.ssl.cafile: Kafka's override form names the listener in lower case "
     "(listener.name.ssl.ssl.cafile)"),
    ({"listener.name.plaintext.ssl.protocol": "TLSv1.3"}, "listener.name.plaintext.ssl.protocol",
     "unknown config key 'listener.name.plaintext.ssl.protocol': per-listener keys are "
     "listener.name.<listener>.{ssl.certfile,ssl.keyfile,ssl.cafile,ssl.client.auth}"),
    ({"listeners": "PLAIN TEXT://:9092"}, "listeners",
     "invalid value 'PLAIN TEXT://:9092' for 'listeners': expected listener names of "
     "letters, digits, '_' and '-' (not 'PLAIN TEXT')"),
    ({"listeners": "PLAINTEXT://:99999"}, "listeners",
     "invalid value 'PLAINTEXT://:99999' for 'listeners': expected host:port with a port "
     "from 0 to 65535"),
    ({"listeners": "PLAINTEXT://localhost"}, "listeners",
     "invalid value 'PLAINTEXT://localhost' for 'listeners': expected host:port with a port "
     "from 0 to 65535"),
])
def test_every_refusal_names_its_key(keys: dict, key: str, message: str):
    error = refused(**keys)
    assert (error.key, str(error)) == (key, message)


def test_two_listeners_on_port_zero_are_fine():
    model = listeners(**{"listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                         "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT"})
    assert [lc.port for lc in model] == [0, 0]


# -- TLS files -------------------------------------------------------------------------------------

def tls_files(tmp_path: Path, **keys: str):
    pki = make_pki(tmp_path)
    values = {"ssl.certfile": str(pki.server.certfile), "ssl.keyfile": str(pki.server.keyfile),
              "ssl.cafile": str(pki.cafile), **keys}
    model = listeners(**{"listeners": "PLAINTEXT://:9092,SSL://:9093", **values})
    return pki, model.get("SSL").tls


def test_tls_options_from_real_files(tmp_path: Path):
    _, tls = tls_files(tmp_path, **{"ssl.client.auth": "required"})
    options = load_tls_options(tls)
    assert options.verify and options.requireCertificate and options.caCerts


def test_a_tls_inter_broker_listener_with_a_ca_is_accepted():
    model = listeners(**{"listeners": "SSL://:9093,PLAINTEXT://:9092", **TLS,
                         "ssl.cafile": "/tls/ca.pem"})
    assert model.inter_broker == "SSL"
    assert model.inter_broker_listener.tls.cafile == "/tls/ca.pem"


def test_peer_tls_from_real_files(tmp_path: Path):
    _, tls = tls_files(tmp_path, **{"ssl.client.auth": "required"})
    peer = load_peer_tls(tls)
    assert peer.client_certificate.getSubject().commonName == b"localhost"
    assert peer.chain == ()
    # Each connection's options name the host it reaches (the certificate is checked for it).
    assert peer.creator("127.0.0.1") is not peer.creator("localhost")


def test_peer_tls_needs_the_ca(tmp_path: Path):
    _, tls = tls_files(tmp_path)
    with pytest.raises(TlsFileError, match="ssl.cafile: the inter-broker listener uses TLS"):
        load_peer_tls(replace(tls, cafile=None))


@pytest.mark.parametrize("damage, message", [
    (lambda pki: pki.server.certfile.unlink(), "ssl.certfile: file '{cert}' not found"),
    (lambda pki: pki.server.certfile.write_text("not a certificate"),
     "ssl.certfile: '{cert}' holds no PEM certificate"),
    (lambda pki: pki.server.keyfile.write_text("not a key"),
     "ssl.keyfile: '{key}' holds no PEM private key"),
    (lambda pki: pki.server.keyfile.write_bytes(pki.client("x").keyfile.read_bytes()),
     "ssl.keyfile: the key in '{key}' does not belong to the certificate in '{cert}'"),
    (lambda pki: pki.cafile.write_text(""), "ssl.cafile: '{ca}' holds no PEM certificate"),
])
def test_tls_file_errors_name_the_key_and_file(tmp_path: Path, damage, message):
    pki, tls = tls_files(tmp_path, **{"ssl.client.auth": "requested"})
    damage(pki)
    with pytest.raises(TlsFileError) as info:
        load_tls_options(tls)
    assert str(info.value) == message.format(cert=pki.server.certfile, key=pki.server.keyfile,
                                             ca=pki.cafile)


def test_an_encrypted_key_is_refused(tmp_path: Path):
    from cryptography.hazmat.primitives import serialization

    pki, tls = tls_files(tmp_path)
    key = serialization.load_pem_private_key(pki.server.keyfile.read_bytes(), None)
    pki.server.keyfile.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    with pytest.raises(TlsFileError, match="is encrypted; give an unencrypted PEM key"):
        load_tls_options(tls)


# -- the principal of a client certificate -------------------------------------------------------

def test_distinguished_name_as_kafka_writes_it():
    name = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "GB"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Ltd"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, " alice+1"),
    ])
    assert distinguished_name(name) == "CN=\\ alice\\+1,OU=eng,O=Example\\, Ltd,C=GB"


def test_distinguished_name_writes_unknown_attributes_as_oid_and_der():
    name = x509.Name([x509.NameAttribute(ObjectIdentifier("1.2.840.113549.1.9.1"), "a@b"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "alice")])
    # Java: the e-mail attribute (an IA5String, tag 0x16) as #hex of its DER encoding.
    assert distinguished_name(name) == "CN=alice,1.2.840.113549.1.9.1=#1603614062"


# -- registration and UpdateMetadata endpoints ---------------------------------------------------

def test_registration_carries_every_endpoint_and_reads_old_ones():
    reg = paths.BrokerRegistration(
        1, "10.0.0.1", 9093, "r1", 5,
        endpoints=(paths.ListenerEndpoint("CLIENT", "kafka1", 9092),
                   paths.ListenerEndpoint("BROKER", "10.0.0.1", 9093),
                   paths.ListenerEndpoint("V6", "::1", 9094)),
        protocol_map=(("CLIENT", "SSL"), ("BROKER", "PLAINTEXT"), ("V6", "PLAINTEXT")))
    import json

    raw = json.loads(reg.to_bytes())
    assert raw["endpoints"] == ["CLIENT://kafka1:9092", "BROKER://10.0.0.1:9093",
                                "V6://[::1]:9094"]
    assert raw["listener_security_protocol_map"] == {"CLIENT": "SSL", "BROKER": "PLAINTEXT",
                                                     "V6": "PLAINTEXT"}
    assert paths.BrokerRegistration.from_bytes(reg.to_bytes()) == reg
    old = paths.BrokerRegistration.from_bytes(
        b'{"version":1,"id":2,"host":"h","port":9092,"timestamp":"7"}')
    assert old.endpoints == (paths.ListenerEndpoint("PLAINTEXT", "h", 9092),)
    assert old.protocol_map == (("PLAINTEXT", "PLAINTEXT"),)
    # Kafka's version 2/3 registrations: endpoints named after their protocol, no map.
    v2 = paths.BrokerRegistration.from_bytes(
        b'{"version":2,"host":"h","port":9093,"endpoints":["SSL://h:9093"]}', broker_id=3)
    assert v2.protocol_map == (("SSL", "SSL"),)


@pytest.mark.parametrize("value", [
    b'{"host":"h","port":1,"endpoints":["CLIENT://h:1"]}',
    b'{"host":"h","port":1,"endpoints":["PLAINTEXT://h"]}',
    b'{"host":"h","port":1,"endpoints":"PLAINTEXT://h:1"}',
    b'{"host":"h","port":1,"endpoints":["C://h:1"],"listener_security_protocol_map":{"C":"X"}}',
])
def test_a_bad_registration_is_refused(value: bytes):
    with pytest.raises(ValueError, match="broker registration: bad value"):
        paths.BrokerRegistration.from_bytes(value, broker_id=1)


def test_update_metadata_lists_the_inter_broker_endpoint_first():
    reg = paths.BrokerRegistration(
        1, "10.0.0.1", 9093, endpoints=(paths.ListenerEndpoint("CLIENT", "kafka1", 9092),
                                        paths.ListenerEndpoint("BROKER", "10.0.0.1", 9093)),
        protocol_map=(("CLIENT", "SASL_SSL"), ("BROKER", "SASL_PLAINTEXT")))
    live = LiveBroker(1, reg.host, reg.port, None, 7, _live_endpoints(reg))
    assert live.update_metadata_endpoints() == [
        {"port": 9093, "host": "10.0.0.1", "listener": "BROKER", "security_protocol": 2},
        {"port": 9092, "host": "kafka1", "listener": "CLIENT", "security_protocol": 3}]
    legacy = LiveBroker(2, "h", 9, None, 8)
    assert legacy.update_metadata_endpoints() == [
        {"port": 9, "host": "h", "listener": "PLAINTEXT", "security_protocol": 0}]


# -- Metadata per listener ---------------------------------------------------------------------

def handler_with_two_brokers() -> RequestHandler:
    """Broker 1 has listeners BROKER and CLIENT, broker 2 only BROKER; broker 1 leads t-0,
    broker 2 leads t-1."""
    cache = MetadataCache()
    cache.apply(1, 3, [
        BrokerEndpoint(1, "10.0.0.1", 9093, None, (("BROKER", "10.0.0.1", 9093),
                                                  ("CLIENT", "kafka1", 9092))),
        BrokerEndpoint(2, "10.0.0.2", 9093, None, (("BROKER", "10.0.0.2", 9093),)),
    ], [("t", 0, PartitionState(1, 5, (1, 2), (1, 2))),
        ("t", 1, PartitionState(2, 5, (2, 1), (2, 1)))])
    return RequestHandler(broker_id=1, config=None, cache=cache, replicas=None, store=None,
                          clock=None, broker_epoch=lambda: 0)


def metadata_on(handler: RequestHandler, listener: str) -> dict:
    proto = Access(None, ConnectionSecurity(listener, SecurityProtocol.PLAINTEXT))
    d = defer.Deferred.fromCoroutine(handler.metadata_apis.metadata(
        SimpleNamespace(api_version=9),
        SimpleNamespace(topics=None, allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False), proto))
    result: list[dict] = []
    d.addCallback(result.append)
    (answer,) = result
    return answer


def test_metadata_gives_the_addresses_of_the_listener_asked_on():
    handler = handler_with_two_brokers()
    brokers = [(b["node_id"], b["host"], b["port"])
               for b in metadata_on(handler, "BROKER")["brokers"]]
    assert brokers == [(1, "10.0.0.1", 9093), (2, "10.0.0.2", 9093)]
    # Broker 2 has no CLIENT listener: left out, as Kafka does.
    brokers = [(b["node_id"], b["host"], b["port"])
               for b in metadata_on(handler, "CLIENT")["brokers"]]
    assert brokers == [(1, "kafka1", 9092)]


def test_a_leader_without_the_listener_is_listener_not_found():
    handler = handler_with_two_brokers()
    led_by_1, led_by_2 = (handler.cache.partition("t", i) for i in (0, 1))
    assert handler.metadata_apis._partition_metadata(0, led_by_1, "CLIENT")["error_code"] == 0
    missing = handler.metadata_apis._partition_metadata(1, led_by_2, "CLIENT")
    assert (missing["error_code"], missing["leader_id"]) == (
        int(ErrorCode.LISTENER_NOT_FOUND), -1)
    on_broker = handler.metadata_apis._partition_metadata(1, led_by_2, "BROKER")
    assert (on_broker["error_code"], on_broker["leader_id"]) == (0, 2)


def test_cluster_metadata_without_a_coordinator_lists_the_listeners_brokers():
    handler = handler_with_two_brokers()
    proto = Access(None, ConnectionSecurity("CLIENT", SecurityProtocol.PLAINTEXT))
    answer = handler.coordination_apis.cluster_metadata(None, None, proto)
    assert answer["brokers"] == [{"node_id": 1, "host": "kafka1", "port": 9092}]


def test_a_broker_coming_back_with_other_listeners_refreshes_cached_answers():
    handler = handler_with_two_brokers()
    assert handler.metadata_apis._partition_metadata(1, handler.cache.partition("t", 1), "CLIENT")[
        "error_code"] == int(ErrorCode.LISTENER_NOT_FOUND)
    metadata_on(handler, "CLIENT")  # builds the cached partitions for CLIENT
    cache = handler.cache
    key = ("metadata", 9, "CLIENT")
    assert key in cache._derived["t"]
    cache.apply(1, 4, [*cache.brokers.values()][:1] + [BrokerEndpoint(
        2, "10.0.0.2", 9093, None, (("BROKER", "10.0.0.2", 9093), ("CLIENT", "kafka2", 9092)))],
        [])
    assert "t" not in cache._derived


# -- the quorum listener ---------------------------------------------------------------------------

QUORUM = {"broker.id": "1", "metadata.store": "quorum", "log.dirs": "/data",
          "quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094"}


def quorum_listener(**keys: str):
    return BrokerConfig.from_mapping({**QUORUM, **keys}).listener_configs().quorum


def quorum_refused(**keys: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping({**QUORUM, **keys})
    return info.value


def test_the_quorum_listener_is_plaintext_and_named_quorum_by_default():
    lc = quorum_listener()
    assert (lc.name, lc.protocol, lc.host, lc.port, lc.tls) == (
        "QUORUM", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9093, None)
    assert [x.name for x in BrokerConfig.from_mapping(QUORUM).listener_configs()] == [
        "PLAINTEXT"]  # not among the listeners the broker binds itself
    assert BrokerConfig.from_mapping({**BASE}).listener_configs().quorum is None  # ZooKeeper


def test_the_quorum_listener_takes_its_protocol_and_tls_files_as_the_others_do():
    """The map names it; its files fall back to the ``ssl.*`` keys and are overridden by
    ``listener.name.quorum.ssl.*`` (the same resolution as every listener's)."""
    lc = quorum_listener(**TLS, **{"listener.security.protocol.map":
                                   "PLAINTEXT:PLAINTEXT,QUORUM:SSL",
                                   "listener.name.quorum.ssl.cafile": "/tls/ca.pem",
                                   "listener.name.quorum.ssl.client.auth": "required"})
    assert lc.protocol is SecurityProtocol.SSL
    assert (lc.tls.certfile, lc.tls.keyfile, lc.tls.cafile, lc.tls.client_auth) == (
        "/tls/server.pem", "/tls/server.key", "/tls/ca.pem", ClientAuth.REQUIRED)
    assert lc.tls.key_of("ssl.cafile") == "listener.name.quorum.ssl.cafile"
    assert lc.tls.key_of("ssl.certfile") == "ssl.certfile"
    # Another name (KRaft's controller.listener.names habit) and SASL_SSL: TLS all the same.
    lc = quorum_listener(**TLS, **{"quorum.listener.name": "controller",
                                   "ssl.cafile": "/tls/ca.pem",
                                   "listener.security.protocol.map":
                                   "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL"})
    assert (lc.name, lc.protocol, lc.tls.cafile) == (
        "CONTROLLER", SecurityProtocol.SASL_SSL, "/tls/ca.pem")
    # An observer's quorum listener is quorum.listener's address.
    lc = quorum_listener(**{"broker.id": "7", "quorum.listener": "10.0.0.7:9193"})
    assert (lc.host, lc.port) == ("10.0.0.7", 9193)


@pytest.mark.parametrize("keys, key, message", [
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,QUORUM:SSL"}, "ssl.certfile",
     "listener QUORUM uses TLS and needs ssl.certfile (or listener.name.quorum.ssl.certfile)"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,QUORUM:SSL", **TLS},
     "ssl.cafile", "the quorum listener QUORUM uses SSL and needs ssl.cafile (the CA that "
                   "signs the quorum nodes' certificates, which they verify each other "
                   "against)"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,QUORUM:SSL", **TLS,
      "listener.name.quorum.ssl.cafile": " "}, "listener.name.quorum.ssl.cafile",
     "the quorum listener QUORUM uses SSL and needs ssl.cafile (the CA that signs the quorum "
     "nodes' certificates, which they verify each other against)"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,QUORUM:TLS"},
     "listener.security.protocol.map",
     "listener.security.protocol.map: unknown security protocol 'TLS' for listener QUORUM "
     "(one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"),
    ({"quorum.listener.name": "PLAINTEXT"}, "quorum.listener.name",
     "quorum.listener.name PLAINTEXT is also in listeners: the quorum listener is a port of "
     "its own (quorum.listener); give it another name"),
    ({"quorum.listener.name": "CONTROLLER",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,QUORUM:SSL"},
     "listener.security.protocol.map", "listener.security.protocol.map names QUORUM, which "
                                       "is not in listeners (PLAINTEXT, CONTROLLER)"),
    ({"quorum.listener.name": "quo rum"}, "quorum.listener.name",
     "invalid value 'quo rum' for 'quorum.listener.name': expected listener names of "
     "letters, digits, '_' and '-' (not 'quo rum')"),
    ({"quorum.listener.name": ""}, "quorum.listener.name",
     "invalid value '' for 'quorum.listener.name': expected a non-empty value"),
    ({"listeners": "PLAINTEXT://:9093"}, "quorum.listener",
     "quorum.listener and listener PLAINTEXT both listen on port 9093"),
])
def test_every_quorum_listener_refusal_names_its_key(keys: dict, key: str, message: str):
    error = quorum_refused(**keys)
    assert (error.key, str(error)) == (key, message)


def test_zookeeper_mode_has_no_quorum_listener_to_name():
    error = refused(**{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,QUORUM:SSL"})
    assert str(error) == ("listener.security.protocol.map names QUORUM, which is not in "
                          "listeners (PLAINTEXT)")


def test_a_quorum_node_takes_tls_on_both_sides_or_neither(tmp_path: Path):
    from twisted.internet import task

    from broker_core.config.quorum import RaftConfig
    from broker_core.raft.service import QuorumNode

    _, files = tls_files(tmp_path)
    with pytest.raises(ValueError, match="both server_tls and peer_tls"):
        QuorumNode(1, "c", None, tmp_path, RaftConfig(), task.Clock(),
                   server_tls=load_tls_options(files))
    node = QuorumNode(1, "c", None, tmp_path, RaftConfig(), task.Clock(),
                      listener_name="CONTROLLER", server_tls=load_tls_options(files),
                      peer_tls=load_peer_tls(files))
    assert (node.factory.listener.name, node.factory.listener.protocol) == (
        "CONTROLLER", SecurityProtocol.SSL)
