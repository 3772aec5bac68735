"""Typed broker configuration: parsing, defaults, precedence, error messages, the properties
file, and the topic-level keys."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from broker_core.config.broker_config import (
    BROKER_KEYS,
    BrokerConfig,
    broker_key_doc,
    topic_defaults,
)
from broker_core.config.listeners import OVERRIDE_PREFIX, SSL_KEYS
from broker_core.config.parsing import LONG_MAX, ConfigError, config_type_of, parse_decimal
from broker_core.config.properties import parse_properties, read_properties
from broker_core.config.topic_keys import (
    TOPIC_CONFIG_KEYS,
    UNSUPPORTED_TOPIC_KEYS,
    validate_topic_config,
)
from broker_core.wire.messages.describe_configs import ConfigType

REQUIRED = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "data"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def config(**kafka_keys: str) -> BrokerConfig:
    """A config from the required keys plus ``kafka_keys`` (underscores stand for dots)."""
    values = dict(REQUIRED)
    values.update({k.replace("_", "."): v for k, v in kafka_keys.items()})
    return BrokerConfig.from_mapping(values)


# -- defaults and types --------------------------------------------------------------------------

def test_kafka_defaults():
    cfg = config()
    assert cfg.broker_id == 1
    assert cfg.listeners == "tcp:9092"
    assert cfg.advertised_listeners is None
    assert cfg.zookeeper_connect == "127.0.0.1:2181"
    assert cfg.zookeeper_session_timeout_ms == 18000
    assert cfg.zookeeper_connection_timeout_ms == 18000
    assert cfg.log_dirs == "data"
    assert cfg.metrics_listener is None
    assert cfg.num_partitions == 1
    assert cfg.default_replication_factor == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.delete_topic_enable is True
    assert cfg.socket_request_max_bytes == 104857600
    assert cfg.message_max_bytes == 1048588
    assert cfg.log_segment_bytes == 1073741824
    assert cfg.log_roll_ms == 168 * 3_600_000
    assert cfg.log_retention_ms == 168 * 3_600_000
    assert cfg.log_retention_bytes == -1
    assert cfg.log_retention_check_interval_ms == 300000
    assert cfg.log_flush_interval_messages is None
    assert cfg.log_flush_interval_ms is None
    assert cfg.log_flush_scheduler_interval_ms == 1000
    assert cfg.log_index_interval_bytes == 4096
    assert cfg.replica_fetch_wait_max_ms == 500
    assert cfg.replica_lag_time_max_ms == 30000
    assert cfg.min_insync_replicas == 1
    assert cfg.unclean_leader_election_enable is False
    assert cfg.request_timeout_ms == 30000
    assert cfg.controller_socket_timeout_ms == 30000
    assert cfg.fetch_purgatory_purge_interval_requests == 1000
    assert cfg.producer_purgatory_purge_interval_requests == 1000
    assert cfg.broker_rack is None
    assert cfg.controlled_shutdown_enable is True


def test_values_are_typed():
    cfg = config(num_partitions=" 12 ", auto_create_topics_enable="FALSE", broker_rack="r1",
                 metrics_listener="tcp:9404:interface=127.0.0.1")
    assert cfg.num_partitions == 12
    assert cfg.auto_create_topics_enable is False
    assert cfg.broker_rack == "r1"
    assert cfg.metrics_listener == "tcp:9404:interface=127.0.0.1"


def test_config_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        config().num_partitions = 3  # type: ignore[misc]


def test_get_by_kafka_name():
    cfg = config(num_partitions="4", log_retention_minutes="2")
    assert cfg.get("num.partitions") == 4
    assert cfg.get("log.retention.ms") == 120_000
    assert cfg.get("log.retention.minutes") == 2
    with pytest.raises(ConfigError, match=r"unknown config key 'num.partition' "
                                          r"\(did you mean 'num.partitions'\?\)"):
        cfg.get("num.partition")


def test_non_text_values_are_accepted():
    cfg = BrokerConfig.from_mapping({"broker.id": 3, "zookeeper.connect": "zk:2181",
                                     "log.dirs": "d", "delete.topic.enable": False})
    assert cfg.broker_id == 3 and cfg.delete_topic_enable is False


def test_as_properties_lists_every_key_as_text():
    props = config(log_retention_hours="1").as_properties()
    assert set(props) == set(BROKER_KEYS)
    assert props["log.retention.ms"] == "3600000"
    assert props["auto.create.topics.enable"] == "true"
    assert props["broker.rack"] == ""


# -- precedence ----------------------------------------------------------------------------------

def test_retention_precedence_ms_over_minutes_over_hours():
    assert config(log_retention_hours="2").log_retention_ms == 7_200_000
    assert config(log_retention_hours="2", log_retention_minutes="3").log_retention_ms == 180_000
    assert config(log_retention_hours="2", log_retention_minutes="3",
                  log_retention_ms="1234").log_retention_ms == 1234


def test_retention_minus_one_means_unlimited_at_any_level():
    assert config(log_retention_hours="-1").log_retention_ms == -1
    assert config(log_retention_minutes="-1").log_retention_ms == -1
    assert config(log_retention_ms="-1").log_retention_ms == -1


def test_roll_precedence_ms_over_hours():
    assert config(log_roll_hours="1").log_roll_ms == 3_600_000
    assert config(log_roll_hours="1", log_roll_ms="500").log_roll_ms == 500
    assert config(log_roll_ms="500").log_roll_effective_ms == 500


def test_sources_precedence_defaults_file_overrides(tmp_path: Path):
    f = tmp_path / "broker.properties"
    f.write_text("broker.id=7\nzookeeper.connect=zk:2181\nlog.dirs=/var/lib/sluice\n"
                 "num.partitions=3\ndefault.replication.factor=2\n", encoding="utf-8")
    cfg = BrokerConfig.from_sources(f, {"num.partitions": "8"})
    assert cfg.broker_id == 7
    assert cfg.num_partitions == 8  # --set wins over the file
    assert cfg.default_replication_factor == 2  # the file wins over the default
    assert cfg.min_insync_replicas == 1  # the default


def test_sources_without_a_file():
    cfg = BrokerConfig.from_sources(None, REQUIRED)
    assert cfg.broker_id == 1


def test_flush_long_max_means_never():
    cfg = config(log_flush_interval_messages=str(LONG_MAX), log_flush_interval_ms=str(LONG_MAX),
                 log_flush_scheduler_interval_ms=str(LONG_MAX))
    assert cfg.log_flush_interval_messages is None
    assert cfg.log_flush_interval_ms is None
    assert cfg.log_flush_scheduler_interval_ms is None
    assert config(log_flush_interval_messages="10000").log_flush_interval_messages == 10000


# -- error messages ------------------------------------------------------------------------------

@pytest.mark.parametrize("key, raw, message", [
    ("num.partitions", "abc", "invalid value 'abc' for 'num.partitions': expected an integer ≥ 1"),
    ("num.partitions", "0", "invalid value '0' for 'num.partitions': expected an integer ≥ 1"),
    ("num.partitions", "1.5", "invalid value '1.5' for 'num.partitions': expected an integer ≥ 1"),
    ("num.partitions", "", "invalid value '' for 'num.partitions': expected an integer ≥ 1"),
    ("num.partitions", "1_000",
     "invalid value '1_000' for 'num.partitions': expected an integer ≥ 1"),
    ("num.partitions", "3000000000",
     "invalid value '3000000000' for 'num.partitions': expected an integer ≤ 2147483647"),
    ("broker.id", "-1", "invalid value '-1' for 'broker.id': expected an integer ≥ 0"),
    ("log.retention.bytes", "-2",
     "invalid value '-2' for 'log.retention.bytes': expected an integer ≥ -1 (-1: no limit)"),
    ("log.segment.bytes", "10",
     "invalid value '10' for 'log.segment.bytes': expected an integer ≥ 14"),
    ("default.replication.factor", "40000",
     "invalid value '40000' for 'default.replication.factor': expected an integer ≤ 32767"),
    ("log.flush.interval.messages", "0",
     "invalid value '0' for 'log.flush.interval.messages': expected an integer ≥ 1 "
     f"(or {LONG_MAX} for never)"),
    ("auto.create.topics.enable", "yes",
     "invalid value 'yes' for 'auto.create.topics.enable': expected true or false"),
    ("listeners", "", "invalid value '' for 'listeners': expected a Twisted server endpoint "
                      "such as 'tcp:9092'"),
    ("listeners", "tcp:http", "invalid value 'tcp:http' for 'listeners': expected a port number "
                              "from 0 to 65535"),
    ("listeners", "tcp:70000", "invalid value 'tcp:70000' for 'listeners': expected a port "
                               "number from 0 to 65535"),
    ("listeners", "PLAINTEXT://:9092,PLAINTEXT://:9093",
     "listeners: listener name PLAINTEXT is given twice in 'PLAINTEXT://:9092,PLAINTEXT://:9093'"),
    ("advertised.listeners", "localhost",
     "invalid value 'localhost' for 'advertised.listeners': expected host:port with a port "
     "from 1 to 65535"),
    ("zookeeper.connect", "zk:21x81",
     "invalid value 'zk:21x81' for 'zookeeper.connect': expected "
     "host:port[,host:port...][/chroot]"),
    ("zookeeper.connect", "zk:2181/",
     "invalid value 'zk:2181/' for 'zookeeper.connect': expected "
     "host:port[,host:port...][/chroot] with a chroot like /sluice"),
    ("log.dirs", "/a,,/b", "invalid value '/a,,/b' for 'log.dirs': expected directory "
                           "paths separated by commas, none of them empty"),
    ("log.dirs", "/a,/b/../a", "invalid value '/a,/b/../a' for 'log.dirs': expected each "
                               "directory once ('/a' and '/b/../a' are the same)"),
    ("log.dirs", "/a,/a/b", "invalid value '/a,/a/b' for 'log.dirs': expected directories "
                            "that do not contain each other ('/a' and '/a/b')"),
])
def test_bad_value_messages(key: str, raw: str, message: str):
    values = dict(REQUIRED)
    values[key] = raw
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping(values)
    assert str(info.value) == message
    assert info.value.key == key


def test_several_log_dirs_and_the_quorum_default_in_the_first():
    cfg = BrokerConfig.from_mapping({**REQUIRED, "log.dirs": " /d1 , /d2,/d3 "})
    assert cfg.log_dir_paths() == [Path("/d1"), Path("/d2"), Path("/d3")]
    assert cfg.quorum_data_path() == Path("/d1/quorum")

def test_broker_liveness_keys_are_checked_together():
    cfg = BrokerConfig.from_mapping({**REQUIRED})
    assert (cfg.broker_heartbeat_interval_ms, cfg.broker_session_timeout_ms) == (2000, 9000)
    cfg = BrokerConfig.from_mapping({**REQUIRED, "broker.heartbeat.interval.ms": "500",
                                     "broker.session.timeout.ms": "4000"})
    assert (cfg.broker_heartbeat_interval_ms, cfg.broker_session_timeout_ms) == (500, 4000)
    for interval in ("9000", "12000"):
        with pytest.raises(ConfigError) as info:
            BrokerConfig.from_mapping({**REQUIRED, "broker.heartbeat.interval.ms": interval})
        assert info.value.key == "broker.heartbeat.interval.ms"
        assert str(info.value) == (f"broker.heartbeat.interval.ms ({interval}) must be below "
                                   "broker.session.timeout.ms (9000)")
    for key in ("broker.heartbeat.interval.ms", "broker.session.timeout.ms"):
        for bad in ("0", "-1", "x", "99999999999"):
            with pytest.raises(ConfigError) as info:
                BrokerConfig.from_mapping({**REQUIRED, key: bad})
            assert info.value.key == key


def test_unknown_key_with_and_without_a_suggestion():
    with pytest.raises(ConfigError) as info:
        config(**{"log_retention_hour": "1"})
    assert str(info.value) == ("unknown config key 'log.retention.hour' "
                               "(did you mean 'log.retention.hours'?)")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping({**REQUIRED, "xyzzy": "1"})
    assert str(info.value) == "unknown config key 'xyzzy'"


def test_missing_required_keys_are_named():
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping({"broker.id": "1", "log.dirs": "d"})
    assert str(info.value) == "missing required config key 'zookeeper.connect'"
    assert info.value.key == "zookeeper.connect"
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping({"zookeeper.connect": "zk:2181", "log.dirs": "  "})
    assert str(info.value) == "missing required config keys 'broker.id', 'log.dirs'"


# -- listeners -----------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, endpoint", [
    ("tcp:9092", "tcp:9092"),
    ("tcp:0:interface=127.0.0.1", "tcp:0:interface=127.0.0.1"),
    ("tcp:port=9092:interface=127.0.0.1", "tcp:port=9092:interface=127.0.0.1"),
    ("tcp6:9092:interface=\\:\\:1", "tcp6:9092:interface=\\:\\:1"),
    ("unix:/run/sluice.sock", "unix:/run/sluice.sock"),
])
def test_listener_forms(raw: str, endpoint: str):
    """The old form: one Twisted endpoint, kept as given (Kafka's form: test_listeners.py)."""
    cfg = config(listeners=raw)
    assert cfg.listeners == endpoint
    (only,) = cfg.listener_configs()
    assert (only.name, only.endpoint) == ("PLAINTEXT", endpoint)


def test_advertised_listener_forms_and_derivation():
    named = config(advertised_listeners="PLAINTEXT://kafka1:9092")
    assert named.advertised_address("0.0.0.0", 9092) == ("kafka1", 9092)
    explicit = config(advertised_listeners="broker.example:19092")
    assert explicit.advertised_address("0.0.0.0", 9092) == ("broker.example", 19092)
    derived = config()
    assert derived.advertised_address("0.0.0.0", 40123) == ("127.0.0.1", 40123)
    assert derived.advertised_address("::", 40123) == ("127.0.0.1", 40123)
    assert derived.advertised_address("10.0.0.5", 9092) == ("10.0.0.5", 9092)


def test_zookeeper_connect_forms():
    for raw in ("zk1:2181,zk2:2181,zk3:2181/sluice", "zk", "[::1]:2181", "127.0.0.1:2181/a/b"):
        assert config(zookeeper_connect=raw).zookeeper_connect == raw


# -- the properties file -------------------------------------------------------------------------

def test_properties_file_format(tmp_path: Path):
    f = tmp_path / "server.properties"
    f.write_text(
        "# Sluice broker 1\n"
        "\n"
        "   ! another comment style\n"
        "broker.id=1\n"
        "  zookeeper.connect : 127.0.0.1:2181/sluice  \n"
        "log.dirs /var/lib/sluice/broker-1\n"
        "listeners=tcp:9092:interface=127.0.0.1\n"
        "broker.rack=rack\\u00e9\n"
        "num.partitions=2\n"
        "num.partitions=3\n",
        encoding="utf-8")
    assert read_properties(f) == {
        "broker.id": "1",
        "zookeeper.connect": "127.0.0.1:2181/sluice  ",  # trailing blanks kept, as in Java
        "log.dirs": "/var/lib/sluice/broker-1",
        "listeners": "tcp:9092:interface=127.0.0.1",  # only the first '=' separates
        "broker.rack": "racké",
        "num.partitions": "3",  # the last one wins
    }
    cfg = BrokerConfig.from_sources(f, {})
    assert cfg.num_partitions == 3 and cfg.broker_rack == "racké"
    assert cfg.zookeeper_connect == "127.0.0.1:2181/sluice"  # values are stripped when parsed


def test_properties_continuation_escapes_and_odd_lines():
    text = (
        "a.b = one \\\n"
        "      two\n"
        "ends.with.backslash=x\\\\\n"
        "key\\=with\\:seps=v\n"
        "tabs=\\tx\n"
        "empty=\n"
        "lonely\n"
        "colon:v=1\n"
        "\r\n"
        "crlf=yes\r\n"
    )
    assert parse_properties(text) == {
        "a.b": "one two",
        "ends.with.backslash": "x\\",
        "key=with:seps": "v",
        "tabs": "\tx",
        "empty": "",
        "lonely": "",
        "colon": "v=1",
        "crlf": "yes",
    }


def test_properties_errors_name_the_file_and_line(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"x\.properties:2: malformed \\u escape"):
        parse_properties("a=1\nb=\\u12G4\n", source="x.properties")
    with pytest.raises(ConfigError, match=r"x\.properties:1: expected key=value, got '=value'"):
        parse_properties("=value\n", source="x.properties")
    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfigError, match="config file .*nope.properties' not found"):
        BrokerConfig.from_sources(missing, {})
    latin = tmp_path / "latin.properties"
    latin.write_bytes(b"broker.rack=r\xe9\n")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        read_properties(latin)


def test_unknown_key_in_a_file_is_reported(tmp_path: Path):
    f = tmp_path / "b.properties"
    f.write_text("broker.id=1\nzookeeper.connect=zk\nlog.dirs=d\nnum.partitons=2\n")
    with pytest.raises(ConfigError, match="unknown config key 'num.partitons' "
                                          r"\(did you mean 'num.partitions'\?\)"):
        BrokerConfig.from_sources(f, {})


# -- topic-level keys ----------------------------------------------------------------------------

def test_validate_topic_config_normalises():
    assert validate_topic_config({
        "retention.ms": " 1000 ",
        "unclean.leader.election.enable": "TRUE",
        "cleanup.policy": "Delete",
        "flush.messages": str(LONG_MAX),
    }) == {
        "retention.ms": "1000",
        "unclean.leader.election.enable": "true",
        "cleanup.policy": "delete",
        "flush.messages": str(LONG_MAX),
    }
    assert validate_topic_config({}) == {}


@pytest.mark.parametrize("values, message", [
    ({"retention.msec": "1"}, "unknown topic config key 'retention.msec' "
                              "(did you mean 'retention.ms'?)"),
    ({"log.retention.ms": "1"}, "unknown topic config key 'log.retention.ms' "
                                "(did you mean 'retention.ms'?)"),
    ({"segment.bytes": "1"}, "invalid value '1' for 'segment.bytes': expected an integer ≥ 14"),
    ({"min.insync.replicas": "0"},
     "invalid value '0' for 'min.insync.replicas': expected an integer ≥ 1"),
    ({"retention.bytes": "lots"},
     "invalid value 'lots' for 'retention.bytes': expected an integer ≥ -1 (-1: no limit)"),
    ({"cleanup.policy": "compact"},
     "invalid value 'compact' for 'cleanup.policy': log compaction is not supported "
     "(only 'delete')"),
    ({"cleanup.policy": "delete,compact"},
     "invalid value 'delete,compact' for 'cleanup.policy': log compaction is not supported "
     "(only 'delete')"),
    ({"cleanup.policy": "shred"},
     "invalid value 'shred' for 'cleanup.policy': expected 'delete'"),
    ({"flush.ms": None}, "missing value for topic config key 'flush.ms'"),
    ({"compression.type": "brotli"},
     "invalid value 'brotli' for 'compression.type': expected one of producer, uncompressed, "
     "gzip, snappy, lz4, zstd"),
    ({"message.timestamp.type": "logappendtime"},
     "invalid value 'logappendtime' for 'message.timestamp.type': expected one of CreateTime, "
     "LogAppendTime"),
    ({"delete.retention.ms": "-5"},
     "invalid value '-5' for 'delete.retention.ms': expected an integer ≥ 0"),
    ({"message.timestamp.before.max.ms": "-1"},
     "invalid value '-1' for 'message.timestamp.before.max.ms': expected an integer ≥ 0"),
    ({"min.compaction.lag.ms": "1"},
     "topic config key 'min.compaction.lag.ms' is not supported: Sluice does not compact logs"),
])
def test_topic_config_errors(values: dict, message: str):
    with pytest.raises(ConfigError) as info:
        validate_topic_config(values)
    assert str(info.value) == message
    assert info.value.key == next(iter(values))


def test_topic_key_table():
    """Every topic key's type is its parser's, and its synonym a broker key or a built-in."""
    for key, spec in TOPIC_CONFIG_KEYS.items():
        assert spec.name == key and spec.doc
        assert config_type_of(spec.parse) is spec.config_type or \
            spec.config_type in (ConfigType.LIST, ConfigType.STRING), key
        assert (spec.synonym in BROKER_KEYS) != (spec.builtin is not None), key
        assert key not in UNSUPPORTED_TOPIC_KEYS
    assert TOPIC_CONFIG_KEYS["retention.ms"].config_type is ConfigType.LONG
    assert TOPIC_CONFIG_KEYS["segment.bytes"].config_type is ConfigType.INT
    assert TOPIC_CONFIG_KEYS["unclean.leader.election.enable"].config_type is ConfigType.BOOLEAN
    assert config_type_of(BROKER_KEYS["listeners"].parse) is ConfigType.LIST
    assert config_type_of(BROKER_KEYS["cluster.id"].parse) is ConfigType.STRING


def test_topic_defaults_from_broker_keys():
    cfg = config(log_retention_minutes="5", log_retention_bytes="1000", log_segment_bytes="2048",
                 log_roll_hours="2", message_max_bytes="5000", min_insync_replicas="2",
                 default_replication_factor="3", unclean_leader_election_enable="true",
                 log_index_interval_bytes="100", log_flush_interval_messages="10")
    defaults = topic_defaults(cfg)
    assert set(defaults) == set(TOPIC_CONFIG_KEYS)
    assert defaults == {
        "retention.ms": "300000",
        "retention.bytes": "1000",
        "segment.bytes": "2048",
        "segment.ms": "7200000",
        "flush.messages": "10",
        "flush.ms": str(LONG_MAX),
        "max.message.bytes": "5000",
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "true",
        "cleanup.policy": "delete",
        "index.interval.bytes": "100",
        # No broker key in Sluice: Kafka's defaults.
        "compression.type": "producer",
        "delete.retention.ms": "86400000",
        "message.timestamp.type": "CreateTime",
        "message.timestamp.difference.max.ms": str(LONG_MAX),
        # Kafka 4's broker defaults (KIP-937): the past unbounded, the future one hour.
        "message.timestamp.before.max.ms": str(LONG_MAX),
        "message.timestamp.after.max.ms": "3600000",
    }
    assert list(defaults) == sorted(defaults)  # name order, as DescribeConfigs lists them
    assert validate_topic_config(defaults) == defaults  # defaults pass the topic checks


# -- docs ----------------------------------------------------------------------------------------

def _rows_keys(section: str) -> set[str]:
    """The keys the first cells of the tables under ``## section`` of configuration.md name;
    the per-listener row's short forms (``.ssl.keyfile``) spelled out."""
    docs = DOCS.read_text(encoding="utf-8")
    body = docs.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
                names.add(f"{OVERRIDE_PREFIX}<name>{name}" if name.startswith(".") else name)
    return names


def test_every_key_is_documented():
    """Every broker key has a row under "Broker keys" and every topic key one under "Topic
    keys", and no row names a key that does not exist."""
    per_listener = {f"{OVERRIDE_PREFIX}<name>.{k}" for k in SSL_KEYS}
    broker_rows = _rows_keys("Broker keys")
    assert [k for k in BROKER_KEYS if k not in broker_rows] == []
    assert sorted(broker_rows - set(BROKER_KEYS) - per_listener) == []
    topic_rows = _rows_keys("Topic keys")
    assert [k for k in TOPIC_CONFIG_KEYS if k not in topic_rows] == []
    assert sorted(topic_rows - set(TOPIC_CONFIG_KEYS)) == []


def test_every_broker_key_carries_its_documentation():
    """DescribeConfigs answers a doc for every broker key: its own short text (one line, in the
    declaration), or for a topic key's broker-level default that topic key's, said as such."""
    for key, spec in BROKER_KEYS.items():
        assert spec.doc and spec.doc == spec.doc.strip() and "\n" not in spec.doc, key
        assert spec.doc.endswith("."), key
        assert broker_key_doc(key), key
    assert broker_key_doc("num.partitions") == BROKER_KEYS["num.partitions"].doc
    assert broker_key_doc("log.segment.bytes") == (
        "The broker-level default of the topic key segment.bytes. "
        + TOPIC_CONFIG_KEYS["segment.bytes"].doc)
    assert broker_key_doc("listener.name.client.ssl.cafile") == (
        "Listener CLIENT's own ssl.cafile, in place of the broker's. "
        + BROKER_KEYS["ssl.cafile"].doc)
    assert broker_key_doc("listener.name.client.ssl.nope") is None
    assert broker_key_doc("no.such.key") is None


# -- quorum mode -----------------------------------------------------------------------------

QUORUM = {"broker.id": "2", "log.dirs": "data", "metadata.store": "quorum",
          "quorum.voters": "1@h1:9093,2@h2:9093,3@h3:9093"}


def test_quorum_mode_needs_no_zookeeper_and_defaults_from_the_voters():
    cfg = BrokerConfig.from_mapping(QUORUM)
    assert cfg.metadata_store == "quorum" and cfg.zookeeper_connect is None
    assert sorted(cfg.quorum_voter_addresses()) == [1, 2, 3]
    assert cfg.quorum_listen_address() == ("h2", 9093)
    assert cfg.quorum_data_path() == Path("data") / "quorum"
    assert cfg.cluster_id == "sluice"
    assert BrokerConfig.from_mapping(REQUIRED).metadata_store == "zookeeper"


@pytest.mark.parametrize("values, message", [
    ({"quorum.voters": ""}, "metadata.store=quorum needs 'quorum.voters' (id@host:port,"
                            "id@host:port,...) for the quorum's first start, or "
                            "'quorum.bootstrap.servers'"),
    ({"quorum.bootstrap.servers": "h1"}, "invalid entry 'h1' in 'quorum.bootstrap.servers'"),
    ({"quorum.voters": "", "quorum.bootstrap.servers": "h1:1"},
     "broker 2 is not in quorum.voters, so it runs as an observer and needs 'quorum.listener'"),
    ({"quorum.voters": "1@h1"}, "invalid entry '1@h1' in 'quorum.voters'"),
    ({"quorum.listener": "h2:9999"}, "quorum.listener h2:9999 does not match this broker's "
                                     "entry 2@h2:9093 in quorum.voters"),
    ({"broker.id": "7"}, "broker 7 is not in quorum.voters, so it runs as an observer and "
                         "needs 'quorum.listener'"),
    ({"metadata.store": "etcd"}, "invalid value 'etcd' for 'metadata.store': expected "
                                 "zookeeper or quorum"),
])
def test_quorum_mode_is_checked(values, message):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping({**QUORUM, **values})
    assert str(info.value).startswith(message)


def test_the_quorum_nodes_settings_default_to_raft_configs_and_reach_it():
    from broker_core.config.quorum import RaftConfig

    assert BrokerConfig.from_mapping(QUORUM).raft_config() == RaftConfig()
    cfg = BrokerConfig.from_mapping({
        **QUORUM, "quorum.election.timeout.ms": "300", "quorum.fetch.timeout.ms": "900",
        "quorum.election.backoff.max.ms": "400", "quorum.request.timeout.ms": "700",
        "quorum.retry.backoff.ms": "5", "quorum.snapshot.interval.entries": "0",
        "quorum.snapshot.interval.bytes": "1024", "quorum.snapshot.retain.entries": "-1",
        "quorum.fetch.snapshot.max.bytes": "4096"})
    raft = cfg.raft_config()
    assert (raft.election_timeout_ms, raft.fetch_timeout_ms, raft.election_backoff_max_ms,
            raft.request_timeout_ms, raft.retry_backoff_ms) == (300, 900, 400, 700, 5)
    assert (raft.snapshot_interval_entries, raft.snapshot_interval_bytes) == (0, 1024)
    assert raft.snapshot_retain_entries is None  # -1: keep the whole log
    assert raft.fetch_snapshot_max_bytes == 4096


@pytest.mark.parametrize("values, key, message", [
    ({"quorum.fetch.timeout.ms": "400"}, "quorum.fetch.timeout.ms",
     "quorum.fetch.timeout.ms (400) must exceed"),
    ({"quorum.request.timeout.ms": "500"}, "quorum.request.timeout.ms",
     "quorum.request.timeout.ms (500) must exceed"),
    ({"quorum.snapshot.retain.entries": "-2"}, "quorum.snapshot.retain.entries",
     "invalid value '-2' for 'quorum.snapshot.retain.entries'"),
])
def test_bad_quorum_node_settings_fail_at_load_naming_the_key(values, key, message):
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping({**QUORUM, **values})
    assert str(info.value).startswith(message)
    assert info.value.key == key


def test_an_observer_names_its_listener():
    cfg = BrokerConfig.from_mapping({**QUORUM, "broker.id": "7", "quorum.listener": "h7:9100",
                                     "quorum.data.dir": "/var/q"})
    assert cfg.quorum_listen_address() == ("h7", 9100)
    assert cfg.quorum_data_path() == Path("/var/q")


def test_an_observer_may_know_only_the_bootstrap_servers():
    cfg = BrokerConfig.from_mapping({**QUORUM, "quorum.voters": "", "broker.id": "7",
                                     "quorum.bootstrap.servers": "h1:9093, [::1]:9094",
                                     "quorum.listener": "h7:9100"})
    assert cfg.quorum_voter_addresses() == {}
    assert cfg.quorum_bootstrap_server_list() == [("h1", 9093), ("::1", 9094)]
    assert cfg.quorum_listen_address() == ("h7", 9100)
    assert BrokerConfig.from_mapping(QUORUM).quorum_bootstrap_server_list() == []


@pytest.mark.parametrize("values", [REQUIRED, QUORUM,
                                    {**QUORUM, "broker.id": "7", "quorum.listener": "h7:1"},
                                    {**QUORUM, "quorum.bootstrap.servers": "h1:1"},
                                    {"broker.id": "7", "log.dirs": "d", "metadata.store": "quorum",
                                     "quorum.bootstrap.servers": "h1:1",
                                     "quorum.listener": "h7:1"}])
def test_the_required_keys_of_each_mode_make_a_config(values):
    """DescribeConfigs builds the built-in defaults from a config's required keys alone."""
    from broker_core.config.broker_config import required_keys

    cfg = BrokerConfig.from_mapping(values)
    props = cfg.as_properties()
    minimal = BrokerConfig.from_mapping({k: props[k] for k in required_keys(cfg)})
    assert minimal.metadata_store == cfg.metadata_store
    assert set(required_keys(cfg)) <= set(values)


@pytest.mark.parametrize("text, signed, want", [
    ("0", False, 0), ("0042", False, 42), ("7", True, 7), ("-7", True, -7), ("+7", True, 7),
    ("-7", False, None), ("+7", False, None), ("²", False, None), ("²", True, None),
    ("١", False, None), ("1_000", False, None), (" 1", False, None), ("1 ", True, None),
    ("", False, None), ("-", True, None), ("1.0", False, None),
])
def test_parse_decimal_takes_only_ascii_digits(text, signed, want):
    assert parse_decimal(text, signed=signed) == want


def test_integer_parser_refuses_digits_int_would_crash_on():
    with pytest.raises(ConfigError, match="expected an integer"):
        TOPIC_CONFIG_KEYS["min.insync.replicas"].parse("min.insync.replicas", "²")
