"""Process settings the broker's service maker applies."""

from __future__ import annotations

import gc

from broker_core import tap


def test_a_broker_process_collects_garbage_less_often():
    before = gc.get_threshold()
    try:
        tap.tune_gc()
        assert gc.get_threshold() == tap.BROKER_GC_THRESHOLDS
        young, middle, old = tap.BROKER_GC_THRESHOLDS
        assert young > before[0] and young * middle * old > before[0] * before[1] * before[2]
    finally:
        gc.set_threshold(*before)


def test_the_quorum_options_set_their_keys():
    opts = tap.Options()
    opts.parseOptions(["--broker-id", "1", "--log-dir", "d", "--metadata", "quorum",
                       "--quorum-voters", "1@127.0.0.1:9093", "--quorum-listen",
                       "127.0.0.1:9093", "--quorum-data-dir", "q", "--cluster-id", "c"])
    cfg = opts.config
    assert (cfg.metadata_store, cfg.quorum_voters, cfg.quorum_listener, cfg.quorum_data_dir,
            cfg.cluster_id) == ("quorum", "1@127.0.0.1:9093", "127.0.0.1:9093", "q", "c")
    opts = tap.Options()
    opts.parseOptions(["--broker-id", "4", "--log-dir", "d", "--metadata", "quorum",
                       "--quorum-bootstrap-servers", "127.0.0.1:9093", "--quorum-listen",
                       "127.0.0.1:9096"])
    cfg = opts.config
    assert (cfg.quorum_voters, cfg.quorum_bootstrap_servers) == (None, "127.0.0.1:9093")
