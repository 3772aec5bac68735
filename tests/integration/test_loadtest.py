"""``sluice loadtest`` end to end on a small scale: real brokers (in this process), worker
processes with real consumers, a worker killed with SIGKILL midway; the result JSON and the plot
are written and the figures add up."""

from __future__ import annotations

import json

import pytest
import pytest_twisted
from twisted.internet import threads

from sluice_tools.loadtest.driver import LoadTestConfig, run
from tests.support.cluster import eventually, running_brokers


@pytest.fixture
def brokers(zk_hosts, tmp_path):
    # One coordinator shard: the driver scrapes the one coordinator ClusterMetadata v0 names.
    yield from running_brokers(zk_hosts, tmp_path / "brokers", 3,
                               metrics_listener="tcp:0:interface=127.0.0.1",
                               group_coordinator_shards="1",
                               group_min_session_timeout_ms="1000",
                               group_initial_rebalance_delay_ms="300",
                               rebalance_backoff_ms="200", offsets_commit_interval_ms="500")


@pytest_twisted.ensureDeferred
async def test_small_loadtest_with_a_killed_worker(brokers, tmp_path):
    await eventually(lambda: [b for b in brokers if b.coordinator.active_services()],
                     what="a coordinator shard elected")
    bootstrap = ",".join(f"127.0.0.1:{b.port.getHost().port}" for b in brokers)
    urls = {b.config.broker_id: f"http://127.0.0.1:{b.metrics_port.getHost().port}/metrics"
            for b in brokers}
    cfg = LoadTestConfig(bootstrap_servers=bootstrap, topic="lt", consumers=12, processes=3,
                         groups=2, partitions=8, replication_factor=2,
                         session_timeout_ms=3000, duration_s=16, kill_share=0.3,
                         kill_at_s=9, metrics_urls=urls, scrape_interval_s=1.0,
                         out_dir=tmp_path / "out", progress=False)
    # The driver blocks (it is a command-line tool); the brokers need this reactor meanwhile.
    result = await threads.deferToThread(run, cfg)

    assert result["consumers_started"] == 12
    assert result["consumers_joined"] == 12, result["errors"] or result["worker_stderr"]
    assert result["false_expirations"] == 0, result["false_expiration_ids"]
    assert [a["what"] for a in result["actions"]] == ["kill -9 1 workers (4 consumers)"]
    coord = result["coordination"]
    # the killed worker's 4 members were failed by their coordinator, nobody else; the 8 that
    # were stopped at the end left (they are no expirations)
    assert coord["expirations"] == 4
    assert coord["leaves"] == 8
    # every broker is reported; the ones coordinating hold shards and had the members
    brokers = result["brokers"]
    assert sorted(brokers) == sorted(urls)
    coordinating = [b for b in brokers.values() if b["shards_active"]]
    assert coordinating and sum(b["members_max"] for b in coordinating) >= 8
    assert sum(b["expirations"] for b in brokers.values()) == 4
    assert all(b["cpu_percent_max"] is not None for b in brokers.values())
    # the timeline counts the same, from 0 at a scrape taken before any consumer started,
    # and every point after that one has its window (CPU) for every broker
    timeline = result["timeline"]
    assert timeline[0]["registered"] == 0 and timeline[0]["expirations"] == 0
    assert timeline[-1]["expirations"] == 4 and timeline[-1]["leaves"] == 8
    assert [p["expirations"] for p in timeline] == sorted(p["expirations"] for p in timeline)
    assert all(b.get("cpu_percent") is not None for b in timeline[1]["brokers"].values())
    assert coord["ping_round_trip_s"]["count"] > 0
    assert result["rebalances"]["per_group"]["count"] == 2
    assert result["workers"]["workers"] == 3
    # the survivors' groups were rebalanced after the kill
    assert any(r["end_t"] > 9 for r in result["rebalances"]["events"])
    saved = json.loads((tmp_path / "out" / "loadtest.json").read_text())
    assert saved["consumers_joined"] == 12
    assert (tmp_path / "out" / "loadtest.png").stat().st_size > 10_000
