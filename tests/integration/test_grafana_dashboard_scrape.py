"""The dashboard check in tests/unit/test_grafana_dashboard.py reasons from a fresh
``BrokerMetrics`` registry; this test holds that model to a real broker's /metrics: every series
a running broker serves is one the model knows, and the dashboard's queries find series there."""

from __future__ import annotations

import importlib.util
import sys
import urllib.request
from pathlib import Path

import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families

from broker_core.metrics import BrokerMetrics
from broker_core.wire.apis import ApiKey
from broker_core.wire.records import Record, build_batch
from tests.support.cluster import call, create_topic, eventually, leader_of, start_brokers, stop_brokers

ROOT = Path(__file__).resolve().parents[2]


def _dashboard_module():
    spec = importlib.util.spec_from_file_location(
        "sluice_grafana_dashboard", ROOT / "contrib" / "grafana" / "dashboard.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _served_names(port: int) -> set[str]:
    """The sample names on the broker's /metrics (blocking; run off the reactor)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest_twisted.ensureDeferred
async def test_a_live_broker_serves_only_series_the_dashboard_check_knows(zk_hosts, tmp_path):
    from twisted.internet import threads

    dashboard = _dashboard_module()
    (broker,) = await start_brokers(zk_hosts, tmp_path, 1,
                                    metrics_listener="tcp:0:interface=127.0.0.1")
    try:
        await eventually(lambda: broker.controller.active, what="controller")
        await create_topic(broker, "dashboarded", partitions=1)
        await eventually(lambda: leader_of([broker], "dashboarded", 0), what="leader")
        batch = build_batch([Record(None, b"x" * 100, [], 1000 + i) for i in range(5)])
        await call(broker, ApiKey.PRODUCE, 8, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "dashboarded", "partition_data": [{"index": 0, "records": batch}]}]})
        served = await threads.deferToThread(_served_names, broker.metrics_port.getHost().port)
    finally:
        await stop_brokers([broker])

    model = dashboard.exported_series_names(BrokerMetrics().registry.collect())
    assert served - model == set()
    used = set(dashboard.dashboard_metric_names(dashboard.load()))
    # What any broker serves from its start (the labelled series come with traffic).
    for name in ("sluice_active_controller", "sluice_offline_partitions",
                 "sluice_under_replicated_partitions", "sluice_under_min_isr_partitions",
                 "sluice_requests_total", "sluice_request_duration_seconds_bucket",
                 "sluice_bytes_in_total", "sluice_purgatory_delayed_operations",
                 "sluice_controller_event_duration_seconds_count", "sluice_coordinator_members",
                 "process_cpu_seconds_total", "process_resident_memory_bytes"):
        assert name in used, name
        assert name in served, name
