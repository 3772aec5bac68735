"""Broker metrics in a fresh registry per test, the partition collector, and the /metrics
resource (driven in memory: DummyRequest, and a Site over a StringTransport)."""

from __future__ import annotations

import gzip

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from twisted.web.test.requesthelper import DummyRequest

from broker_core.metrics import BrokerMetrics, LabelledChildren, MetricsResource, metrics_site
from tests.support.http import http_get


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics(CollectorRegistry())


def exposition(m: BrokerMetrics) -> str:
    return generate_latest(m.registry).decode()


def test_registry_is_private_and_injectable():
    registry = CollectorRegistry()
    m = BrokerMetrics(registry)
    assert m.registry is registry
    # A second broker in the same process gets its own registry: no duplicate-series clash.
    BrokerMetrics()
    BrokerMetrics()
    assert registry.get_sample_value("sluice_connections") == 0


def test_request_metrics(metrics: BrokerMetrics):
    metrics.requests_total.labels(api="PRODUCE").inc()
    metrics.requests_total.labels(api="PRODUCE").inc()
    metrics.request_errors_total.labels(api="PRODUCE", error="NOT_LEADER_OR_FOLLOWER").inc()
    metrics.request_duration_seconds.labels(api="FETCH").observe(0.0004)
    metrics.request_duration_seconds.labels(api="FETCH").observe(7.0)
    text = exposition(metrics)
    assert 'sluice_requests_total{api="PRODUCE"} 2.0' in text
    assert ('sluice_request_errors_total{api="PRODUCE",error="NOT_LEADER_OR_FOLLOWER"} 1.0'
            in text)
    assert 'sluice_request_duration_seconds_bucket{api="FETCH",le="0.0005"} 1.0' in text
    assert 'sluice_request_duration_seconds_bucket{api="FETCH",le="5.0"} 1.0' in text
    assert 'sluice_request_duration_seconds_bucket{api="FETCH",le="10.0"} 2.0' in text
    assert 'sluice_request_duration_seconds_count{api="FETCH"} 2.0' in text


def test_labelled_children_are_looked_up_once_and_count_into_the_metric(
        metrics: BrokerMetrics, monkeypatch):
    calls = []
    real = metrics.requests_total.labels
    monkeypatch.setattr(metrics.requests_total, "labels",
                        lambda *v: calls.append(v) or real(*v))
    children = LabelledChildren(metrics.requests_total)
    assert children("PRODUCE") is children("PRODUCE")
    children("PRODUCE").inc()
    children("PRODUCE").inc()
    children("FETCH").inc()
    assert calls == [("PRODUCE",), ("FETCH",)]
    # The same series as metric.labels(...): one child per label values.
    assert children("PRODUCE") is real(api="PRODUCE")
    text = exposition(metrics)
    assert 'sluice_requests_total{api="PRODUCE"} 2.0' in text
    assert 'sluice_requests_total{api="FETCH"} 1.0' in text


def test_per_request_shortcuts_feed_the_exported_series(metrics: BrokerMetrics):
    metrics.requests_by_api("PRODUCE").inc()
    metrics.request_duration_by_api("PRODUCE").observe(0.002)
    metrics.bytes_in_by_topic("t").inc(10)
    metrics.messages_in_by_topic("t").inc(2)
    metrics.bytes_out_by_topic("t").inc(5)
    text = exposition(metrics)
    for line in ('sluice_requests_total{api="PRODUCE"} 1.0',
                 'sluice_request_duration_seconds_count{api="PRODUCE"} 1.0',
                 'sluice_bytes_in_total{topic="t"} 10.0',
                 'sluice_messages_in_total{topic="t"} 2.0',
                 'sluice_bytes_out_total{topic="t"} 5.0'):
        assert line in text


def test_traffic_connection_and_storage_metrics(metrics: BrokerMetrics):
    metrics.bytes_in_total.labels(topic="t").inc(100)
    metrics.messages_in_total.labels(topic="t").inc(3)
    metrics.bytes_out_total.labels(topic="t").inc(40)
    metrics.connections.set(4)
    metrics.disconnects_total.labels(reason="frame_too_large").inc()
    metrics.log_recoveries_total.inc()
    metrics.log_truncated_bytes_total.inc(17)
    metrics.flush_duration_seconds.observe(0.002)
    text = exposition(metrics)
    for line in ('sluice_bytes_in_total{topic="t"} 100.0',
                 'sluice_messages_in_total{topic="t"} 3.0',
                 'sluice_bytes_out_total{topic="t"} 40.0',
                 "sluice_connections 4.0",
                 'sluice_disconnects_total{reason="frame_too_large"} 1.0',
                 "sluice_log_recoveries_total 1.0",
                 "sluice_log_truncated_bytes_total 17.0",
                 'sluice_flush_duration_seconds_bucket{le="0.0025"} 1.0'):
        assert line in text


def test_controller_and_zookeeper_metrics(metrics: BrokerMetrics):
    metrics.active_controller.set(1)
    metrics.controller_epoch.set(5)
    metrics.unclean_leader_elections_total.inc()
    metrics.zookeeper_session_state.state("suspended")
    text = exposition(metrics)
    assert "sluice_active_controller 1.0" in text
    assert "sluice_controller_epoch 5.0" in text
    assert "sluice_unclean_leader_elections_total 1.0" in text
    assert 'sluice_zookeeper_session_state{sluice_zookeeper_session_state="suspended"} 1.0' in text
    assert 'sluice_zookeeper_session_state{sluice_zookeeper_session_state="connected"} 0.0' in text
    with pytest.raises(ValueError):
        metrics.zookeeper_session_state.state("confused")


def test_partition_collector_reflects_the_callback(metrics: BrokerMetrics):
    rows = [("orders", 0, 120, 4096, True), ("orders", 1, 80, 2048, False),
            ("audit", 0, 5, 100, True)]
    metrics.set_partition_source(lambda: list(rows))
    text = exposition(metrics)
    assert 'sluice_log_end_offset{partition="0",topic="orders"} 120.0' in text
    assert 'sluice_log_size_bytes{partition="1",topic="orders"} 2048.0' in text
    assert "sluice_partitions_led 2.0" in text
    # A deleted partition disappears at the next scrape.
    rows.pop(1)
    rows[0] = ("orders", 0, 130, 5000, False)
    text = exposition(metrics)
    assert 'partition="1",topic="orders"' not in text
    assert 'sluice_log_end_offset{partition="0",topic="orders"} 130.0' in text
    assert "sluice_partitions_led 1.0" in text


def test_partition_collector_defaults_to_no_partitions(metrics: BrokerMetrics):
    text = exposition(metrics)
    assert "sluice_partitions_led 0.0" in text
    assert "sluice_log_end_offset{" not in text


def test_failing_partition_source_does_not_break_the_scrape(metrics: BrokerMetrics):
    from twisted.logger import capturedLogs

    def broken():
        yield ("t", 0, 1, 1, True)
        raise RuntimeError("replica manager went away")

    metrics.set_partition_source(broken)
    metrics.connections.set(2)
    with capturedLogs() as events:
        text = exposition(metrics)
    assert "sluice_connections 2.0" in text
    assert "sluice_log_end_offset{" not in text  # no half-filled families
    assert any(e.get("log_failure") is not None for e in events)


def test_partition_metric_names_are_reserved(metrics: BrokerMetrics):
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("log_end_offset", "clash", namespace="sluice", registry=metrics.registry)


def test_track_purgatory_reads_callables_at_scrape_time(metrics: BrokerMetrics):
    sizes = {"size": 3, "delayed": 1}
    metrics.track_purgatory("fetch", size=lambda: sizes["size"], delayed=lambda: sizes["delayed"])
    sizes["size"] = 9
    reg = metrics.registry
    assert reg.get_sample_value("sluice_purgatory_size", {"purgatory": "fetch"}) == 9
    assert reg.get_sample_value("sluice_purgatory_delayed_operations",
                                {"purgatory": "fetch"}) == 1


def test_resource_renders_text_format_by_default(metrics: BrokerMetrics):
    metrics.connections.set(3)
    request = DummyRequest([b""])
    body = MetricsResource(metrics.registry).render_GET(request)
    assert request.responseHeaders.getRawHeaders(b"content-type") == [
        CONTENT_TYPE_PLAIN_0_0_4.encode()]
    assert b"sluice_connections 3.0" in body


def test_resource_renders_openmetrics_when_asked(metrics: BrokerMetrics):
    metrics.requests_total.labels(api="METADATA").inc()
    request = DummyRequest([b""])
    request.requestHeaders.setRawHeaders(
        b"accept", [b"application/openmetrics-text;version=1.0.0,text/plain;q=0.5"])
    body = MetricsResource(metrics.registry).render_GET(request)
    content_type = request.responseHeaders.getRawHeaders(b"content-type")[0].decode()
    assert content_type.startswith("application/openmetrics-text")
    assert content_type.split(";")[0] == OPENMETRICS.split(";")[0]
    assert b'sluice_requests_total{api="METADATA"} 1.0' in body
    assert body.endswith(b"# EOF\n")




def _dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2:]
    return out


def test_site_serves_metrics_and_nothing_else(metrics: BrokerMetrics):
    metrics.connections.set(1)
    site = metrics_site(metrics.registry)
    head, body = http_get(site, b"/metrics")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Content-Type: text/plain; version=0.0.4" in head
    assert b"sluice_connections 1.0" in body
    head, _ = http_get(site, b"/")
    assert head.startswith(b"HTTP/1.1 404")
    head, _ = http_get(site, b"/other")
    assert head.startswith(b"HTTP/1.1 404")


def test_site_gzips_when_the_scraper_accepts_it(metrics: BrokerMetrics):
    metrics.connections.set(1)
    head, body = http_get(metrics_site(metrics.registry), b"/metrics",
                           b"Accept-Encoding: gzip\r\n")
    assert b"Content-Encoding: gzip" in head
    data = _dechunk(body) if b"Transfer-Encoding: chunked" in head else body
    assert b"sluice_connections 1.0" in gzip.decompress(data)


def test_every_metric_is_documented(metrics: BrokerMetrics):
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text("utf-8")
    names = set()
    for family in metrics.registry.collect():
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    assert names, "the registry exports nothing"
    assert sorted(n for n in names if f"`{n}`" not in docs) == []
