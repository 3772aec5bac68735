"""The load driver's arithmetic: histogram quantiles from Prometheus buckets, the worker plan,
and how worker events fold into join times, rebalance spans and false expirations."""

from __future__ import annotations

import pytest

from consumer_client.loadtest import metrics as prom
from consumer_client.loadtest.driver import LoadTestConfig, _Tracker, plan_workers

SCRAPE = """\
# HELP sluice_coordinator_ping_rtt_seconds Ping round trip
# TYPE sluice_coordinator_ping_rtt_seconds histogram
sluice_coordinator_ping_rtt_seconds_bucket{le="0.001"} 10.0
sluice_coordinator_ping_rtt_seconds_bucket{le="0.01"} 90.0
sluice_coordinator_ping_rtt_seconds_bucket{le="0.1"} 100.0
sluice_coordinator_ping_rtt_seconds_bucket{le="+Inf"} 100.0
sluice_coordinator_ping_rtt_seconds_count 100.0
sluice_coordinator_ping_rtt_seconds_sum 0.5
# HELP sluice_coordinator_expired_members_total Failed consumers
# TYPE sluice_coordinator_expired_members_total counter
sluice_coordinator_expired_members_total{reason="ping"} 2.0
sluice_coordinator_expired_members_total{reason="closed"} 3.0
"""


def test_histogram_quantiles_interpolate_inside_the_bucket():
    h = prom.histogram(prom.parse(SCRAPE), "sluice_coordinator_ping_rtt_seconds")
    assert h.count == 100 and h.mean == pytest.approx(0.005)
    assert h.quantile(0.05) == pytest.approx(0.0005)  # half-way through the first bucket
    assert h.quantile(0.5) == pytest.approx(0.001 + 0.009 * 40 / 80)
    assert h.quantile(0.99) == pytest.approx(0.01 + 0.09 * 9 / 10)


def test_histogram_window_and_empty_window():
    samples = prom.parse(SCRAPE)
    h = prom.histogram(samples, "sluice_coordinator_ping_rtt_seconds")
    assert h.minus(h).quantile(0.5) is None
    assert prom.histogram(samples, "no_such_metric") is None


def test_counter_summed_over_labels_unless_labels_given():
    samples = prom.parse(SCRAPE)
    assert prom.value(samples, "sluice_coordinator_expired_members_total") == 5
    assert prom.value(samples, "sluice_coordinator_expired_members_total", reason="ping") == 2
    assert prom.value(samples, "sluice_coordinator_expired_members_total", reason="other") is None


def test_plan_spreads_consumers_and_groups_over_workers():
    cfg = LoadTestConfig("b:1", "t", consumers=10, processes=3, groups=2)
    plan = plan_workers(cfg)
    assert [len(w) for w in plan] == [4, 3, 3]
    ids = [c for w in plan for c, _ in w]
    assert len(set(ids)) == 10
    assert {g for w in plan for _, g in w} == {"loadtest-g0", "loadtest-g1"}


@pytest.mark.parametrize("bad", [dict(consumers=0), dict(processes=5), dict(groups=9),
                                 dict(kill_share=1.5), dict(duration_s=0)])
def test_bad_config_names_the_option(bad):
    values = dict(consumers=4, processes=1, groups=1)
    values.update(bad)
    with pytest.raises(ValueError, match="--"):
        LoadTestConfig("b:1", "t", **values).check()


def test_tracker_join_times_rebalance_spans_and_false_expirations():
    t = _Tracker(t0=100.0)
    t.feed({"ev": "started", "c": "a", "t": 100.0})
    t.feed({"ev": "started", "c": "b", "t": 100.5})
    t.feed({"ev": "registered", "c": "a", "t": 101.0})
    t.feed({"ev": "assigned", "c": "a", "g": "g", "gen": 1, "parts": 2, "t": 102.0})
    t.feed({"ev": "assigned", "c": "b", "g": "g", "gen": 1, "parts": 0, "t": 102.5})
    assert t.joined == {"a": 2.0, "b": 2.0}
    assert t.owning == {"a"}
    # a rebalance: first StopFetcher at 110, last StartFetcher at 110.75
    t.feed({"ev": "revoked", "c": "a", "g": "g", "t": 110.0})
    t.feed({"ev": "revoked", "c": "b", "g": "g", "t": 110.2})
    t.feed({"ev": "assigned", "c": "b", "g": "g", "gen": 2, "parts": 1, "t": 110.5})
    t.feed({"ev": "assigned", "c": "a", "g": "g", "gen": 2, "parts": 1, "t": 110.75})
    spans = {(r["generation"]): r["duration_s"] for r in t.rebalance_events()}
    assert spans == {2: pytest.approx(0.75)}
    t.feed({"ev": "killed", "c": "a", "t": 120.0})
    t.feed({"ev": "lost", "c": "a", "t": 120.0})
    t.feed({"ev": "lost", "c": "b", "t": 121.0})
    assert sorted(c for c in t.lost if c not in t.disturbed) == ["b"]


def test_summary_rounds_every_figure_gives_units_and_names_the_plot(tmp_path):
    from consumer_client.cli import loadtest_summary

    result = {
        "consumers_joined": 150, "memberships_lost": 3, "false_expirations": 0,
        "join_time_s": {"p50": 4.091397285461426, "p99": 12.5000001},
        "rebalances": {"duration_s": {"count": 7, "p50": 0.123456, "max": 1.98765}},
        "coordinator": {"broker_id": 2, "cpu_percent_mean": 41.26, "cpu_percent_max": 98.6,
                        "rss_bytes_max": 56565760.0, "expirations": 150.0,
                        "ping_round_trip_s": {"p50": 0.0012345, "p99": 0.0456789}},
        "plot": str(tmp_path / "loadtest.png"),
    }
    lines = loadtest_summary(result, 150, tmp_path)
    assert lines == [
        "consumers joined: 150/150  join time p50 4.09 s  p99 12.50 s",
        "rebalances seen by members: 7  p50 0.12 s  max 1.99 s",
        "memberships lost: 3  false expirations: 0",
        "coordinator 2: cpu mean 41%  max 99%  rss max 54 MiB  expirations 150  "
        "ping p50 1.2 ms  p99 45.7 ms",
        f"result: {tmp_path / 'loadtest.json'}",
        f"plot: {tmp_path / 'loadtest.png'}",
    ]


def test_summary_of_a_run_without_figures_says_so_instead_of_none(tmp_path):
    from consumer_client.cli import loadtest_summary

    result = {"consumers_joined": 0, "memberships_lost": 0, "false_expirations": 0,
              "join_time_s": {"p50": None, "p99": None},
              "rebalances": {"duration_s": {"count": 0, "p50": None, "max": None}}}
    lines = loadtest_summary(result, 10, tmp_path)
    assert lines[0] == "consumers joined: 0/10  join time p50 -  p99 -"
    assert not any("None" in line for line in lines)
    assert not any(line.startswith("plot:") for line in lines)
