"""DescribeConfigs against a real ZooKeeper: ``broker_core.server.describe_configs`` reads topic
overrides from ``/config/topics/[topic]`` and reports every topic key with its effective value and
source, this broker's own keys for a BROKER resource, and a per-resource error (with a message)
for an unknown topic, a bad name, another broker or an unsupported resource type. The last test
runs confluent-kafka's AdminClient against a real in-process broker."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from broker_core import metadata_paths as paths
from broker_core import topic_admin
from broker_core.config.broker_config import BROKER_KEYS, topic_defaults
from broker_core.config.topic_keys import TOPIC_CONFIG_KEYS
from broker_core.config_changes import DYNAMIC_BROKER_KEYS
from broker_core.server.describe_configs import describe_configs
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages import describe_configs as dc
from tests.support.cluster import broker_config, eventually, start_brokers, stop_brokers

TOPIC = dc.ResourceType.TOPIC
BROKER = dc.ResourceType.BROKER
DYNAMIC = dc.ConfigSource.DYNAMIC_TOPIC_CONFIG
STATIC = dc.ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = dc.ConfigSource.DEFAULT_CONFIG
BROKER_ID = 1


@pytest.fixture
def cfg(zk_hosts, tmp_path):
    return broker_config(BROKER_ID, zk_hosts, tmp_path / "logs")


async def _with_topic(store: Any, name: str, config: dict[str, str] | None = None) -> None:
    """Create ``name`` the way the brokers do, with one (fake) live broker to assign it to."""
    for path in paths.PERSISTENT_PATHS:
        await store.ensure_path(path)
    if await store.exists(paths.broker(BROKER_ID)) is None:
        await store.create(paths.broker(BROKER_ID),
                           paths.BrokerRegistration(BROKER_ID, "127.0.0.1", 9092).to_bytes())
    await topic_admin.create_topic(store, name, 1, 1, config or {})


def _request(*resources: tuple[int, str, list[str] | None], include_synonyms: bool = False,
             include_documentation: bool = False) -> Any:
    return dc.REQUEST.build({
        "resources": [{"resource_type": t, "resource_name": n, "configuration_keys": k}
                      for t, n, k in resources],
        "include_synonyms": include_synonyms, "include_documentation": include_documentation})


async def _describe(store: Any, cfg: Any, *resources: tuple[int, str, list[str] | None],
                    version: int = 4, include_synonyms: bool = False,
                    include_documentation: bool = False) -> list[dict]:
    body = await describe_configs(_request(*resources, include_synonyms=include_synonyms,
                                           include_documentation=include_documentation),
                                  version=version, store=store, broker_config=cfg,
                                  broker_id=BROKER_ID)
    # Whatever the function answers must encode at every served version.
    for v in dc.REQUEST.versions():
        dc.RESPONSE.to_bytes(body, v)
    return body["results"]


def _by_name(result: dict) -> dict[str, dict]:
    return {c["name"]: c for c in result["configs"]}


# -- topics --------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_topic_reports_every_key_with_the_override_marked_dynamic(store, cfg):
    await _with_topic(store, "orders", {"retention.ms": "60000"})
    (result,) = await _describe(store, cfg, (TOPIC, "orders", None))
    assert (result["error_code"], result["error_message"]) == (0, None)
    assert (result["resource_type"], result["resource_name"]) == (TOPIC, "orders")
    assert [c["name"] for c in result["configs"]] == list(TOPIC_CONFIG_KEYS)
    configs = _by_name(result)
    assert configs["retention.ms"]["value"] == "60000"
    assert configs["retention.ms"]["config_source"] == DYNAMIC
    defaults = topic_defaults(cfg)
    for key in TOPIC_CONFIG_KEYS:
        if key != "retention.ms":
            assert (configs[key]["value"], configs[key]["config_source"]) == (
                defaults[key], DEFAULT), key
    assert configs["segment.bytes"]["value"] == "1073741824"
    assert not any(c["read_only"] or c["is_sensitive"] or c["synonyms"]
                   for c in result["configs"])


@pytest_twisted.ensureDeferred
async def test_topic_without_overrides_is_all_defaults(store, cfg):
    await _with_topic(store, "plain")
    (result,) = await _describe(store, cfg, (TOPIC, "plain", None), version=1)
    assert {c["config_source"] for c in result["configs"]} == {DEFAULT}


@pytest_twisted.ensureDeferred
async def test_configuration_keys_filter_and_unknown_keys_are_left_out(store, cfg):
    await _with_topic(store, "filtered", {"retention.ms": "60000", "segment.bytes": "1048576"})
    results = await _describe(store, cfg,
                              (TOPIC, "filtered", ["segment.bytes", "no.such.key", "flush.ms"]),
                              (TOPIC, "filtered", []))
    assert [(c["name"], c["value"], c["config_source"]) for c in results[0]["configs"]] == [
        ("flush.ms", str(2**63 - 1), DEFAULT), ("segment.bytes", "1048576", DYNAMIC)]
    assert results[1]["error_code"] == 0 and results[1]["configs"] == []


@pytest_twisted.ensureDeferred
async def test_synonyms_list_the_override_then_the_broker_setting_then_the_default(
        store, zk_hosts, tmp_path):
    cfg = broker_config(BROKER_ID, zk_hosts, tmp_path / "logs", log_retention_hours="24")
    await _with_topic(store, "syn", {"retention.ms": "60000"})
    (result,) = await _describe(store, cfg, (TOPIC, "syn", ["retention.ms", "segment.ms"]),
                                include_synonyms=True)
    configs = _by_name(result)
    assert [(s["name"], s["value"], s["source"]) for s in configs["retention.ms"]["synonyms"]] == [
        ("retention.ms", "60000", DYNAMIC),
        ("log.retention.ms", "86400000", STATIC),
        ("log.retention.ms", "604800000", DEFAULT)]
    assert configs["segment.ms"]["config_source"] == DEFAULT
    assert [(s["name"], s["source"]) for s in configs["segment.ms"]["synonyms"]] == [
        ("log.roll.ms", DEFAULT)]
    # Without an override, a key the broker's configuration sets reports the broker's value.
    await _with_topic(store, "syn2")
    (result,) = await _describe(store, cfg, (TOPIC, "syn2", ["retention.ms"]))
    (c,) = result["configs"]
    assert (c["value"], c["config_source"]) == ("86400000", STATIC)


@pytest_twisted.ensureDeferred
async def test_dynamic_broker_levels_come_between_the_override_and_the_static_setting(
        store, zk_hosts, tmp_path):
    """Kafka's order: topic override, this broker's dynamic config, the cluster-wide dynamic
    default, the static setting, the built-in default; each level with a value is listed."""
    cfg = broker_config(BROKER_ID, zk_hosts, tmp_path / "logs", log_retention_hours="24")
    await _with_topic(store, "layers", {"retention.ms": "60000"})
    await store.create(paths.broker_config("<default>"), paths.TopicConfig(
        {"log.retention.ms": "7000", "min.insync.replicas": "2",
         "listeners": "ignored: not dynamic"}).to_bytes(), makepath=True)
    await store.create(paths.broker_config(str(BROKER_ID)),
                       paths.TopicConfig({"log.retention.ms": "8000"}).to_bytes(), makepath=True)
    (topic,) = await _describe(store, cfg, (TOPIC, "layers", ["retention.ms",
                                                              "min.insync.replicas"]),
                               include_synonyms=True)
    retention = _by_name(topic)["retention.ms"]
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("retention.ms", "60000", DYNAMIC),
        ("log.retention.ms", "8000", dc.ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "7000", dc.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "86400000", STATIC),
        ("log.retention.ms", "604800000", DEFAULT)]
    isr = _by_name(topic)["min.insync.replicas"]
    assert (isr["value"], isr["config_source"]) == (
        "2", dc.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    node, defaults = await _describe(store, cfg, (BROKER, str(BROKER_ID), ["log.retention.ms",
                                                                            "listeners"]),
                                     (BROKER, "", None), include_synonyms=True)
    configs = _by_name(node)
    assert (configs["log.retention.ms"]["value"], configs["log.retention.ms"]["config_source"],
            configs["log.retention.ms"]["read_only"]) == (
        "8000", dc.ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert configs["listeners"]["read_only"] and \
        configs["listeners"]["config_source"] == STATIC  # the stored value is ignored
    # The cluster-wide resource lists what /config/brokers/<default> sets (dynamic keys only).
    assert [(c["name"], c["value"], c["config_source"]) for c in defaults["configs"]] == [
        ("log.retention.ms", "7000", dc.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("min.insync.replicas", "2", dc.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]


@pytest_twisted.ensureDeferred
async def test_types_and_documentation_from_v3(store, cfg):
    await _with_topic(store, "typed")
    (result,) = await _describe(store, cfg, (TOPIC, "typed", None), include_documentation=True)
    for c in result["configs"]:
        spec = TOPIC_CONFIG_KEYS[c["name"]]
        assert (c["config_type"], c["documentation"]) == (spec.config_type, spec.doc)
    configs = _by_name(result)
    assert configs["retention.ms"]["config_type"] == dc.ConfigType.LONG
    assert configs["cleanup.policy"]["config_type"] == dc.ConfigType.LIST
    assert configs["unclean.leader.election.enable"]["config_type"] == dc.ConfigType.BOOLEAN
    assert (configs["message.timestamp.type"]["value"],
            configs["compression.type"]["value"]) == ("CreateTime", "producer")
    # Documentation only when asked for.
    (result,) = await _describe(store, cfg, (TOPIC, "typed", ["retention.ms"]))
    assert result["configs"][0]["documentation"] is None
    (node,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), ["num.partitions",
                                                                     "listeners", "cluster.id"]))
    types = {"listeners": dc.ConfigType.LIST, "cluster.id": dc.ConfigType.STRING,
             "num.partitions": dc.ConfigType.INT}
    assert [(c["name"], c["config_type"]) for c in node["configs"]] == [
        (name, types[name]) for name in BROKER_KEYS if name in types]  # in the table's order


@pytest_twisted.ensureDeferred
async def test_unknown_override_keys_are_still_shown(store, cfg):
    await _with_topic(store, "extra", {"retention.ms": "1000"})
    await store.set(paths.topic_config("extra"),
                    paths.TopicConfig({"retention.ms": "1000", "x.future.key": "y"}).to_bytes())
    (result,) = await _describe(store, cfg, (TOPIC, "extra", None))
    assert result["configs"][-1]["name"] == "x.future.key"
    assert result["configs"][-1]["config_source"] == DYNAMIC


@pytest_twisted.ensureDeferred
async def test_unknown_and_invalid_topics_fail_alone(store, cfg):
    await _with_topic(store, "real")
    results = await _describe(store, cfg, (TOPIC, "ghost", None), (TOPIC, "bad/name", None),
                              (TOPIC, "real", ["retention.ms"]))
    assert results[0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "'ghost' does not exist" in results[0]["error_message"]
    assert results[0]["configs"] == []
    assert results[1]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "bad/name" in results[1]["error_message"]
    assert results[2]["error_code"] == 0 and len(results[2]["configs"]) == 1


# -- brokers and other resource types ------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_broker_reports_its_keys_static_or_default(store, zk_hosts, tmp_path):
    cfg = broker_config(BROKER_ID, zk_hosts, tmp_path / "logs", num_partitions="3")
    (result,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), None), include_synonyms=True)
    assert result["error_code"] == 0
    configs = _by_name(result)
    assert list(configs) == list(BROKER_KEYS)
    assert {k for k, c in configs.items() if not c["read_only"]} == set(DYNAMIC_BROKER_KEYS)
    assert (configs["broker.id"]["value"], configs["broker.id"]["config_source"]) == ("1", STATIC)
    assert (configs["num.partitions"]["value"],
            configs["num.partitions"]["config_source"]) == ("3", STATIC)
    assert [(s["value"], s["source"]) for s in configs["num.partitions"]["synonyms"]] == [
        ("3", STATIC), ("1", DEFAULT)]
    assert (configs["delete.topic.enable"]["value"],
            configs["delete.topic.enable"]["config_source"]) == ("true", DEFAULT)
    assert (configs["broker.rack"]["value"], configs["broker.rack"]["synonyms"]) == (None, [])
    assert configs["log.dirs"]["value"] == str(tmp_path / "logs")


@pytest_twisted.ensureDeferred
async def test_broker_reports_its_per_listener_overrides(store, zk_hosts, tmp_path):
    """``listener.name.<name>.ssl.*`` keys are not in the keys table: they are reported as
    set (a broker with one answered DescribeConfigs with an internal error before)."""
    cfg = broker_config(BROKER_ID, zk_hosts, tmp_path / "logs",
                        listener_name_plaintext_ssl_client_auth="requested")
    (result,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), None), include_synonyms=True)
    assert result["error_code"] == 0
    override = _by_name(result)["listener.name.plaintext.ssl.client.auth"]
    assert (override["value"], override["config_source"]) == ("requested", STATIC)
    assert [(s["value"], s["source"]) for s in override["synonyms"]] == [("requested", STATIC)]


@pytest_twisted.ensureDeferred
async def test_broker_resource_documents_every_key(store, zk_hosts, tmp_path):
    """With include_documentation, every key of a broker resource has a doc: its declaration's,
    a topic key's for a topic key's broker-level default, the overridden key's for a
    per-listener override; without it, none."""
    cfg = broker_config(BROKER_ID, zk_hosts, tmp_path / "logs",
                        listener_name_plaintext_ssl_client_auth="requested")
    (node,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), None),
                              include_documentation=True)
    assert node["error_code"] == 0
    docs = {c["name"]: c["documentation"] for c in node["configs"]}
    assert set(docs) == {*BROKER_KEYS, "listener.name.plaintext.ssl.client.auth"}
    assert [name for name, doc in docs.items() if not doc] == []
    assert docs["broker.id"] == BROKER_KEYS["broker.id"].doc
    assert docs["cluster.secret.file"] == BROKER_KEYS["cluster.secret.file"].doc
    assert docs["log.segment.bytes"] == ("The broker-level default of the topic key "
                                         "segment.bytes. " + TOPIC_CONFIG_KEYS["segment.bytes"].doc)
    assert docs["listener.name.plaintext.ssl.client.auth"] == (
        "Listener PLAINTEXT's own ssl.client.auth, in place of the broker's. "
        + BROKER_KEYS["ssl.client.auth"].doc)
    # The documentation travels at v3 as well (where it appeared) and not without the flag.
    (node,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), ["group.max.size"]),
                              version=3, include_documentation=True)
    assert node["configs"][0]["documentation"] == BROKER_KEYS["group.max.size"].doc
    (node,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), None))
    assert [c["name"] for c in node["configs"] if c["documentation"] is not None] == []


@pytest_twisted.ensureDeferred
async def test_broker_resource_must_name_this_broker(store, cfg):
    results = await _describe(store, cfg, (BROKER, "2", None), (BROKER, "", None),
                              (BROKER, "1", ["num.partitions"]))
    assert results[0]["error_code"] == ErrorCode.INVALID_REQUEST
    assert "broker 1" in results[0]["error_message"] and "'2'" in results[0]["error_message"]
    assert (results[1]["error_code"], results[1]["configs"]) == (0, [])  # cluster defaults: none
    assert [c["name"] for c in results[2]["configs"]] == ["num.partitions"]


@pytest_twisted.ensureDeferred
async def test_other_resource_types_are_invalid_requests(store, cfg):
    results = await _describe(store, cfg, (dc.ResourceType.BROKER_LOGGER, "1", None), (99, "x", None))
    assert [r["error_code"] for r in results] == [ErrorCode.INVALID_REQUEST] * 2
    assert "BROKER_LOGGER" in results[0]["error_message"]
    assert "99" in results[1]["error_message"]


# -- real clients against a real broker ----------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_confluent_admin_describe_configs_end_to_end(zk_hosts, tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    (broker,) = await start_brokers(zk_hosts, tmp_path, 1)
    try:
        await eventually(lambda: broker.controller.active, what="controller")
        await topic_admin.create_topic(broker.store, "described", 1, 1, {"retention.ms": "60000"})
        await eventually(lambda: "described" in broker.cache.topics, what="topic metadata")
        port = broker.port.getHost().port

        def describe() -> tuple[dict, dict]:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
            topic = ConfigResource(ResourceType.TOPIC, "described")
            node = ConfigResource(ResourceType.BROKER, str(broker.config.broker_id))
            futures = admin.describe_configs([topic, node], request_timeout=15)
            return futures[topic].result(timeout=30), futures[node].result(timeout=30)

        topic_configs, broker_configs = await threads.deferToThread(describe)
        retention = topic_configs["retention.ms"]
        assert retention.value == "60000"
        assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        segment = topic_configs["segment.bytes"]
        assert segment.value == "1073741824"
        assert segment.source == ConfigSource.DEFAULT_CONFIG.value and segment.is_default
        assert set(topic_configs) == set(TOPIC_CONFIG_KEYS)
        assert broker_configs["broker.id"].value == "1"
        assert broker_configs["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    finally:
        await stop_brokers([broker])


# -- what is applied -----------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_an_invalid_stored_override_is_reported_as_the_level_brokers_apply(store, zk_hosts,
                                                                                 tmp_path):
    """Another tool (or damage) stored values the keys' checks refuse: brokers ignore them, so
    DescribeConfigs reports what they apply instead (the broker level), never the stored
    value as a DYNAMIC_TOPIC_CONFIG; the valid override beside them is still in effect."""
    cfg = broker_config(BROKER_ID, zk_hosts, tmp_path / "logs", log_retention_ms="5000")
    await _with_topic(store, "damaged")
    await store.set(paths.topic_config("damaged"), paths.TopicConfig({
        "retention.ms": "soon", "min.insync.replicas": "0", "segment.bytes": "4096",
        "unclean.leader.election.enable": "yes"}).to_bytes())
    (result,) = await _describe(store, cfg, (TOPIC, "damaged", None), include_synonyms=True)
    configs = _by_name(result)
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_source"]) == (
        "5000", STATIC)
    assert [s["source"] for s in configs["retention.ms"]["synonyms"]] == [STATIC, DEFAULT]
    assert (configs["min.insync.replicas"]["value"],
            configs["min.insync.replicas"]["config_source"]) == ("1", DEFAULT)
    assert (configs["unclean.leader.election.enable"]["value"],
            configs["unclean.leader.election.enable"]["config_source"]) == ("false", DEFAULT)
    assert (configs["segment.bytes"]["value"], configs["segment.bytes"]["config_source"]) == (
        "4096", DYNAMIC)


@pytest_twisted.ensureDeferred
async def test_broker_keys_that_default_topic_keys_carry_their_documentation(store, cfg):
    (node,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), [
        "log.retention.ms", "message.max.bytes", "log.message.timestamp.after.max.ms",
        "num.partitions"]), include_documentation=True)
    docs = {c["name"]: c["documentation"] for c in node["configs"]}
    assert docs["log.retention.ms"] == (
        "The broker-level default of the topic key retention.ms. "
        + TOPIC_CONFIG_KEYS["retention.ms"].doc)
    assert docs["message.max.bytes"].startswith(
        "The broker-level default of the topic key max.message.bytes. ")
    assert "INVALID_TIMESTAMP" in docs["log.message.timestamp.after.max.ms"]
    assert docs["num.partitions"] == BROKER_KEYS["num.partitions"].doc  # not a topic default
    # Every dynamic broker key is such a default, so every one of them is documented.
    (node,) = await _describe(store, cfg, (BROKER, str(BROKER_ID), list(DYNAMIC_BROKER_KEYS)),
                              include_documentation=True)
    assert [c["name"] for c in node["configs"] if not c["documentation"]] == []
