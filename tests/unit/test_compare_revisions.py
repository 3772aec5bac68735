"""bench/compare_revisions.py's pure parts: which figures it reads from a bench's output, and
the medians and ratios it reports. No benchmark runs here."""

from __future__ import annotations

import pytest

from bench.compare_revisions import FIGURES, parse_figures, summarize

REPLICATED = """\
(a) throughput: 1,000,000 x 100 B, acks=all, RF 3, 6 partitions in 0.99 s = 1,014,615 msg/s \
(96.8 MB/s), kcat -P
    sum of high watermarks: 1,000,000
"""

FAILOVER = """\
== controller: kill -9 broker 1 (controller: 1); it leads 3,333 of 10,000 partitions
session expired 10.02 s after the kill (session timeout 10000 ms)
new controller registered 0.06 s after expiry: {"version":1,"brokerid":2,"timestamp":"1"}
partitions moved: 3,333

summary (seconds from the victim's session expiry):
  kill follower broker    3,334 partitions moved: leaders in Metadata  0.04 s, all accepted a \
produce (probe)  0.11 s, controller busy  1.58 s; probe on the healthy cluster 0.28 s; \
librdkafka round after / before the kill 0.47 / 3.79 s
  kill controller         3,333 partitions moved: leaders in Metadata  1.23 s, all accepted a \
produce (probe)  1.60 s, controller busy 11.92 s; probe on the healthy cluster 0.41 s; \
librdkafka round after / before the kill 1.59 / 15.12 s
"""


def test_the_kcat_throughput_is_the_replicated_produce_figure():
    assert parse_figures("replicated-produce", REPLICATED) == {"kcat acks=all": 1_014_615.0}


def test_the_failover_figures_come_from_its_summary_and_the_new_controller_line():
    assert parse_figures("failover", FAILOVER) == {
        "follower kill: leaders in Metadata": 0.04,
        "follower kill: all accepted": 0.11,
        "follower kill: controller busy": 1.58,
        "controller kill: leaders in Metadata": 1.23,
        "controller kill: all accepted": 1.60,
        "controller kill: controller busy": 11.92,
        "controller kill: new controller": 0.06,
        "follower kill: partitions moved": 3_334,
        "controller kill: partitions moved": 3_333,
        # the times per 1,000 partitions moved: runs that moved different counts compare
        "follower kill: leaders in Metadata per 1,000 moved": pytest.approx(0.04 / 3.334),
        "follower kill: all accepted per 1,000 moved": pytest.approx(0.11 / 3.334),
        "controller kill: leaders in Metadata per 1,000 moved": pytest.approx(1.23 / 3.333),
        "controller kill: all accepted per 1,000 moved": pytest.approx(1.60 / 3.333),
    }
    assert set(parse_figures("failover", FAILOVER)) == {f.name for f in
                                                        FIGURES["failover"].figures}


def test_a_run_that_stopped_early_yields_only_what_it_printed():
    # Only the first failover ran (no summary yet, no controller kill): nothing is guessed.
    partial = FAILOVER.split("summary")[0].replace("new controller registered", "new leader")
    assert parse_figures("failover", partial) == {}
    # No count moved, no time per partition moved: a derived figure needs both of its parts.
    no_counts = FAILOVER.replace("partitions moved: leaders", "moved: leaders")
    assert not any("moved" in name for name in parse_figures("failover", no_counts))
    assert parse_figures("replicated-produce", "kcat: timed out\n") == {}


def test_the_figure_is_read_at_the_start_of_its_line_only():
    # A line that merely quotes the pattern further on (a log line echoing it) is not a figure.
    assert parse_figures("replicated-produce", "note: " + REPLICATED.splitlines()[0]) == {}


def test_medians_per_revision_and_the_ratio_of_the_medians():
    old = [{"kcat acks=all": 1_000.0}, {"kcat acks=all": 600.0}, {"kcat acks=all": 800.0}]
    new = [{"kcat acks=all": 700.0}, {"kcat acks=all": 1_400.0}, {"kcat acks=all": 900.0},
           {"kcat acks=all": 100.0}]
    s = summarize("replicated-produce", old, new)
    assert s.old == {"kcat acks=all": 800.0}
    assert s.new == {"kcat acks=all": 800.0}  # even count: the mean of the middle two
    assert s.ratio == {"kcat acks=all": pytest.approx(1.0)}


def test_a_figure_missing_on_one_side_has_no_ratio():
    old = [{"follower kill: all accepted": 0.5}]
    new = [{"follower kill: all accepted": 0.25, "controller kill: all accepted": 1.5}]
    s = summarize("failover", old, new)
    assert s.ratio["follower kill: all accepted"] == pytest.approx(0.5)
    assert s.old["controller kill: all accepted"] is None
    assert s.new["controller kill: all accepted"] == 1.5
    assert s.ratio["controller kill: all accepted"] is None
    assert s.ratio["controller kill: new controller"] is None  # no run printed it


def test_an_old_median_of_zero_gives_no_ratio_rather_than_a_division_error():
    s = summarize("failover", [{"follower kill: leaders in Metadata": 0.0}],
                  [{"follower kill: leaders in Metadata": 0.04}])
    assert s.ratio["follower kill: leaders in Metadata"] is None
