"""The load driver's arithmetic: histogram quantiles from Prometheus buckets, the worker plan,
how worker events fold into join times, rebalance spans and false expirations, and the figures
per broker (shards, CPU stretches above 90%) and for the cluster (brokers summed)."""

from __future__ import annotations

import threading

import pytest

from sluice_tools.loadtest import metrics as prom
from sluice_tools.loadtest.brokers import longest_hot_stretch, shards_label, shards_of
from sluice_tools.loadtest.driver import (
    LoadTestConfig,
    _result,
    _Tracker,
    drain,
    plan_workers,
    rebalances_per_group,
    scrape_figures,
    summed,
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
                                 dict(kill_share=1.5), dict(duration_s=0),
                                 dict(fetch_max_wait_ms=-1), dict(fetch_max_wait_ms=60_001)])
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
        "join_time_s": {"p50": 4.091397285461426, "p99": 12.5000001, "max": 13.0},
        "rebalances": {"duration_s": {"count": 7, "p50": 0.123456, "max": 1.98765},
                       "per_group": {"p50": 1.0, "p99": 3.0, "max": 3.0}},
        "coordination": {"expirations": 150.0, "leaves": 0.0, "failed_pings": 2.0,
                         "ping_round_trip_s": {"p50": 0.0012345, "p99": 0.0456789}},
        "brokers": {
            2: {"shards": ["0", "3"], "shards_active": 2.0, "cpu_percent_mean": 41.26,
                "cpu_percent_max": 98.6, "cpu_hot_longest_s": 12.4,
                "cpu_hot_over_limit": True, "rss_bytes_max": 56565760.0,
                "members_max": 150.0},
            1: {"shards": [], "shards_active": 0.0, "cpu_percent_mean": 3.0,
                "cpu_percent_max": 5.0, "cpu_hot_longest_s": 0.0,
                "cpu_hot_over_limit": False, "rss_bytes_max": 2**25, "members_max": 0.0}},
        "workers": {"workers": 2, "rss_bytes_max": 2**27, "rss_bytes_per_consumer": 51200.0,
                    "timers_per_consumer": 2.5, "reactor_late_s_max": 0.25},
        "plot": str(tmp_path / "loadtest.png"),
    }
    lines = loadtest_summary(result, 150, tmp_path)
    assert lines == [
        "consumers joined: 150/150  join time p50 4.09 s  p99 12.50 s  max 13.00 s",
        "rebalances seen by members: 7  p50 0.12 s  max 1.99 s",
        "rebalances per group: p50 1  p99 3  max 3",
        "memberships lost: 3  false expirations: 0",
        "coordination: expirations 150  leaves 0  failed pings 2  ping p50 1.2 ms  p99 45.7 ms",
        "broker 1 (0 shards): cpu mean 3%  max 5%  above 90% for 0 s at most  rss max 32 MiB  "
        "members max 0",
        "broker 2 (shards 0,3): cpu mean 41%  max 99%  above 90% for 12 s at most (over 10 s)"
        "  rss max 54 MiB  members max 150",
        "workers: 2  rss max 128 MiB (50 KiB per consumer)  timers per consumer 2.5  "
        "reactor late max 0.25 s",
        f"result: {tmp_path / 'loadtest.json'}",
        f"plot: {tmp_path / 'loadtest.png'}",
    ]


def test_summary_of_a_run_without_figures_says_so_instead_of_none(tmp_path):
    from sluice_tools.cli import loadtest_summary

    result = {"consumers_joined": 0, "memberships_lost": 0, "false_expirations": 0,
              "join_time_s": {"p50": None, "p99": None},
              "rebalances": {"duration_s": {"count": 0, "p50": None, "max": None}}}
    lines = loadtest_summary(result, 10, tmp_path)
    assert lines[0] == "consumers joined: 0/10  join time p50 -  p99 -  max -"
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
    for p, (_, bid, _) in zip(timeline, scrapes, strict=True):
        p["brokers"] = {bid: dict(p)}
    result = _result(LoadTestConfig("b:1", "t", consumers=300), _Tracker(0.0), scrapes,
                     timeline, [], [])
    assert result["coordination"]["expirations"] == timeline[-1]["expirations"] == 150
    assert result["coordination"]["leaves"] == 150
    assert result["brokers"][2]["expirations"] == 150
    assert result["brokers"][2]["cpu_percent_max"] == 25.0


def test_a_counter_without_samples_yet_counts_as_zero_in_timeline_and_summary():
    first = coordinator_scrape(expired_disconnect=None)
    later = coordinator_scrape(expired_disconnect=None)
    point = scrape_figures(later, 5.0, (0.0, 1, first), (0.0, 1, first))
    assert point["expirations"] == 0 and point["leaves"] == 0
    result = _result(LoadTestConfig("b:1", "t", consumers=1), _Tracker(0.0),
                     [(0.0, 1, first), (5.0, 1, later)], [], [], [])
    assert result["coordination"]["expirations"] == 0
    assert result["brokers"][1]["expirations"] == 0


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


def test_cluster_figures_sum_every_brokers_counters_and_ping_histograms():
    # two brokers coordinate groups: each expired some and answered some pings
    scrapes = [(0.0, 1, coordinator_scrape(expired_disconnect=1.0, pings=0)),
               (0.0, 2, coordinator_scrape(expired_disconnect=None, pings=0)),
               (5.0, 1, coordinator_scrape(expired_disconnect=4.0, pings=30)),
               (5.0, 2, coordinator_scrape(expired_disconnect=2.0, left=5.0, pings=70))]
    result = _result(LoadTestConfig("b:1", "t", consumers=10), _Tracker(0.0), scrapes, [],
                     [], [])
    assert result["coordination"]["expirations"] == 3 + 2
    assert result["coordination"]["leaves"] == 5
    assert result["coordination"]["ping_round_trip_s"]["count"] == 100
    assert sorted(result["brokers"]) == [1, 2]
    assert result["brokers"][1]["expirations"] == 3


def test_histograms_add_bucket_by_bucket_and_refuse_other_buckets():
    h = prom.histogram(prom.parse(SCRAPE), "sluice_coordinator_ping_rtt_seconds")
    both = h.plus(h)
    assert both.count == 200 and both.quantile(0.5) == h.quantile(0.5)
    other = prom.Histogram(((1.0, 5.0), (float("inf"), 5.0)), 1.0, 5.0)
    with pytest.raises(ValueError, match="different buckets"):
        h.plus(other)
    # across brokers: none to add is none; brokers of two versions give no cluster figure
    assert summed([None, h, None]) == h
    assert summed([]) is None
    assert summed([h, other]) is None


def test_shards_of_a_single_coordinator_and_of_a_sharded_one():
    single = prom.parse("# TYPE sluice_active_coordinator gauge\n"
                        "sluice_active_coordinator 1.0\n"
                        "# TYPE sluice_coordinator_members gauge\n"
                        "sluice_coordinator_members 40.0\n")
    assert shards_of(single) == (1.0, [])
    sharded = prom.parse("# TYPE sluice_coordinator_shards_active gauge\n"
                         "sluice_coordinator_shards_active 3.0\n"
                         "# TYPE sluice_active_coordinator gauge\n"
                         "sluice_active_coordinator 1.0\n"
                         "# TYPE sluice_coordinator_members gauge\n"
                         'sluice_coordinator_members{shard="10"} 5.0\n'
                         'sluice_coordinator_members{shard="2"} 7.0\n'
                         'sluice_coordinator_members{shard="4"} 0.0\n')
    assert shards_of(sharded) == (3.0, ["2", "4", "10"])
    assert scrape_figures(sharded, 0.0, None, None)["members"] == 12
    assert shards_label({"shards": ["2", "4", "10"], "shards_active": 3.0}) == "shards 2,4,10"
    assert shards_label({"shards": [], "shards_active": 0.0}) == "0 shards"
    assert shards_label({"shards": [], "shards_active": 1.0}) == "1 shard"
    assert shards_label({}) == "no coordinator metrics"


def test_longest_cpu_stretch_above_90_percent_after_the_ramp():
    points = [(0.0, None), (5.0, 95.0), (10.0, 99.0), (15.0, 50.0), (20.0, 91.0),
              (25.0, 92.0), (30.0, 93.0), (35.0, 10.0)]
    # the first stretch (0-10 s) is during a 10 s ramp; the second runs 15-30 s
    assert longest_hot_stretch(points, after=10.0) == 15.0
    # counted from the ramp's end where a hot window spans it
    assert longest_hot_stretch(points, after=7.0) == 15.0
    assert longest_hot_stretch([(0.0, None), (5.0, 95.0), (10.0, 99.0)], after=2.0) == 8.0
    # a missed scrape ends a stretch; nothing hot is 0
    assert longest_hot_stretch([(0.0, None), (5.0, 95.0), (10.0, None), (15.0, 95.0)],
                               after=0.0) == 5.0
    assert longest_hot_stretch([(0.0, None), (5.0, 10.0)], after=0.0) == 0.0


def test_rebalances_per_group_counts_groups_without_any_as_zero():
    events = [{"group": "a"}, {"group": "a"}, {"group": "b"}]
    spread = rebalances_per_group(events, {"a", "b", "c"})
    assert spread["groups_by_count"] == {0: 1, 1: 1, 2: 1}
    assert (spread["count"], spread["p50"], spread["max"]) == (3, 1.0, 2.0)


def test_worker_figures_give_the_largest_cost_per_consumer():
    t = _Tracker(0.0)
    t.feed({"ev": "stats", "w": 0, "consumers": 100, "rss_bytes": 10_000_000, "open_files": 120,
            "timers": 300, "late_s": 0.01, "t": 1.0})
    t.feed({"ev": "stats", "w": 0, "consumers": 200, "rss_bytes": 12_000_000, "open_files": 220,
            "timers": 500, "late_s": 0.2, "t": 2.0})
    t.feed({"ev": "stats", "w": 1, "consumers": 100, "rss_bytes": 9_000_000, "open_files": 110,
            "timers": 250, "late_s": 0.0, "t": 2.0})
    figures = t.worker_figures()
    assert figures["workers"] == 2
    assert figures["rss_bytes_max"] == 12_000_000
    assert figures["rss_bytes_per_consumer"] == 90_000.0  # worker 1: 9 MB for 100
    assert figures["timers_per_consumer"] == 2.5
    assert figures["reactor_late_s_max"] == 0.2
    assert _Tracker(0.0).worker_figures() == {}


def test_each_consumer_gets_the_configured_session_and_fetch_wait():
    from sluice_tools.loadtest.driver import worker_spec
    from sluice_tools.loadtest.worker import consumer_config

    cfg = LoadTestConfig("b:1", "t", consumers=4, processes=2, groups=2,
                         session_timeout_ms=12_000, fetch_max_wait_ms=5_000)
    members = plan_workers(cfg)[1]
    spec = worker_spec(cfg, 1, members)
    cid, group = members[0]
    config = consumer_config(spec, cid, group, security=None)
    assert (config.group_id, config.consumer_id) == (group, cid)
    assert config.session_timeout_ms == 12_000
    assert config.fetch_max_wait_ms == 5_000
    assert config.topics == {"t": 1}
    assert LoadTestConfig("b:1", "t", consumers=1).fetch_max_wait_ms == 500  # Kafka's default


def test_a_worker_reads_exactly_its_spec_and_leaves_the_commands_after_it():
    import os

    from sluice_tools.loadtest.driver import worker_spec_text
    from sluice_tools.loadtest.worker import read_spec

    # 50,000 members: far more than one command-line argument may hold
    spec = {"worker": 0, "members": [[f"lt-w0-c{i}", f"loadtest-g{i % 500}"]
                                     for i in range(50_000)]}
    r, w = os.pipe()
    try:
        text = (worker_spec_text(spec) + '{"cmd": "stop"}\n').encode()
        def write_all() -> None:
            view = memoryview(text)
            while view:
                view = view[os.write(w, view):]

        writer = threading.Thread(target=write_all)
        writer.start()  # the pipe holds less than the spec: write while it is read
        assert read_spec(r) == spec
        writer.join()
        assert os.read(r, 100) == b'{"cmd": "stop"}\n'
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("head", [b"", b"x\n", b"0\n", b"999999999999\n", b"12\n{}"])
def test_a_worker_refuses_a_spec_without_a_sane_length_or_cut_short(head):
    import os

    from sluice_tools.loadtest.worker import read_spec

    r, w = os.pipe()
    try:
        os.write(w, head)
        os.close(w)
        w = -1
        with pytest.raises(SystemExit, match="loadtest worker"):
            read_spec(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_worker_collects_then_freezes_its_heap_at_each_report():
    import gc
    import weakref

    from sluice_tools.loadtest.worker import _settle_heap

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    gc.unfreeze()
    try:
        garbage = weakref.ref(Cycle())  # reachable only from itself
        kept = Cycle()
        assert garbage() is not None
        _settle_heap()
        assert garbage() is None  # collected before the freeze
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # frozen: the collector skips it
        assert kept.me is kept
    finally:
        gc.unfreeze()
