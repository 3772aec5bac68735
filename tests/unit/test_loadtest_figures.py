"""The load driver's arithmetic: histogram quantiles from Prometheus buckets, the worker plan,
and how worker events fold into join times, rebalance spans and false expirations."""

from __future__ import annotations

import pytest

from sluice_tools.loadtest import metrics as prom
from sluice_tools.loadtest.driver import (
    LoadTestConfig,
    _result,
    _Tracker,
    drain,
    plan_workers,
    scrape_figures,
)

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
    from sluice_tools.cli import loadtest_summary

    result = {
        "consumers_joined": 150, "memberships_lost": 3, "false_expirations": 0,
        "join_time_s": {"p50": 4.091397285461426, "p99": 12.5000001},
        "rebalances": {"duration_s": {"count": 7, "p50": 0.123456, "max": 1.98765}},
        "coordinator": {"broker_id": 2, "cpu_percent_mean": 41.26, "cpu_percent_max": 98.6,
                        "rss_bytes_max": 56565760.0, "expirations": 150.0, "leaves": 0.0,
                        "ping_round_trip_s": {"p50": 0.0012345, "p99": 0.0456789}},
        "plot": str(tmp_path / "loadtest.png"),
    }
    lines = loadtest_summary(result, 150, tmp_path)
    assert lines == [
        "consumers joined: 150/150  join time p50 4.09 s  p99 12.50 s",
        "rebalances seen by members: 7  p50 0.12 s  max 1.99 s",
        "memberships lost: 3  false expirations: 0",
        "coordinator 2: cpu mean 41%  max 99%  rss max 54 MiB  expirations 150  leaves 0  "
        "ping p50 1.2 ms  p99 45.7 ms",
        f"result: {tmp_path / 'loadtest.json'}",
        f"plot: {tmp_path / 'loadtest.png'}",
    ]


def test_summary_of_a_run_without_figures_says_so_instead_of_none(tmp_path):
    from sluice_tools.cli import loadtest_summary

    result = {"consumers_joined": 0, "memberships_lost": 0, "false_expirations": 0,
              "join_time_s": {"p50": None, "p99": None},
              "rebalances": {"duration_s": {"count": 0, "p50": None, "max": None}}}
    lines = loadtest_summary(result, 10, tmp_path)
    assert lines[0] == "consumers joined: 0/10  join time p50 -  p99 -"
    assert not any("None" in line for line in lines)
    assert not any(line.startswith("plot:") for line in lines)


def coordinator_scrape(expired_disconnect=None, left=0.0, pings=0, cpu=1.0):
    """A coordinator's /metrics text: the expired counter has no sample until its first
    increment, as a labelled prometheus counter."""
    lines = ["# TYPE process_cpu_seconds_total counter", f"process_cpu_seconds_total {cpu}",
             "# TYPE sluice_coordinator_left_members_total counter",
             f"sluice_coordinator_left_members_total {left}",
             "# TYPE sluice_coordinator_expired_members_total counter"]
    if expired_disconnect is not None:
        lines.append('sluice_coordinator_expired_members_total{reason="disconnect"} '
                     f"{expired_disconnect}")
    lines += ["# TYPE sluice_coordinator_ping_rtt_seconds histogram",
              f'sluice_coordinator_ping_rtt_seconds_bucket{{le="0.01"}} {pings}',
              f'sluice_coordinator_ping_rtt_seconds_bucket{{le="+Inf"}} {pings}',
              f"sluice_coordinator_ping_rtt_seconds_count {pings}",
              f"sluice_coordinator_ping_rtt_seconds_sum {pings * 0.001}"]
    return prom.parse("\n".join(lines) + "\n")


def test_timeline_and_summary_count_each_expiration_once_from_the_runs_start():
    # The broker expired 9 members before this run; during it 150 are killed; at the end
    # the 150 others stop and leave (a leave, not an expiration).
    scrapes = [(0.0, 2, coordinator_scrape(expired_disconnect=9.0, pings=0, cpu=1.0)),
               (5.0, 2, coordinator_scrape(expired_disconnect=9.0, pings=40, cpu=2.0)),
               (10.0, 2, coordinator_scrape(expired_disconnect=159.0, pings=90, cpu=3.0)),
               (12.0, 2, coordinator_scrape(expired_disconnect=159.0, left=150.0, pings=90,
                                            cpu=3.5))]
    timeline = []
    for i, (t, _, samples) in enumerate(scrapes):
        prev = scrapes[i - 1] if i else None
        point = {"t": t, "registered": 0, "owning": 0}
        point.update(scrape_figures(samples, t, prev, scrapes[0] if i else None))
        timeline.append(point)
    assert [p["expirations"] for p in timeline] == [0, 0, 150, 150]
    assert [p["leaves"] for p in timeline] == [0, 0, 0, 150]
    # every point after the baseline has its window: CPU and the pings in it
    assert [p.get("cpu_percent") for p in timeline] == [None, 20.0, 20.0, 25.0]
    assert [p.get("ping_count") for p in timeline] == [None, 40, 50, 0]
    assert timeline[1]["ping_p50_ms"] is not None and timeline[3]["ping_p50_ms"] is None
    result = _result(LoadTestConfig("b:1", "t", consumers=300), _Tracker(0.0), scrapes,
                     timeline, [], [])
    assert result["coordinator"]["expirations"] == timeline[-1]["expirations"] == 150
    assert result["coordinator"]["leaves"] == 150


def test_a_counter_without_samples_yet_counts_as_zero_in_timeline_and_summary():
    first = coordinator_scrape(expired_disconnect=None)
    later = coordinator_scrape(expired_disconnect=None)
    point = scrape_figures(later, 5.0, (0.0, 1, first), (0.0, 1, first))
    assert point["expirations"] == 0 and point["leaves"] == 0
    result = _result(LoadTestConfig("b:1", "t", consumers=1), _Tracker(0.0),
                     [(0.0, 1, first), (5.0, 1, later)], [], [], [])
    assert result["coordinator"]["expirations"] == 0


def test_draining_worker_events_is_bounded_by_time_even_when_they_never_pause():
    import queue

    events: queue.Queue = queue.Queue()

    class Busy(_Tracker):
        def feed(self, ev):
            super().feed(ev)
            events.put(ev)  # hundreds of consumers joining: there is always another event

    events.put({"ev": "registered", "c": "a", "t": 0.0})
    n = drain(events, Busy(0.0), 0.05)
    assert n > 0
    assert drain(queue.Queue(), _Tracker(0.0), 0.05) == 0
