"""Process settings the broker's service maker applies."""

from __future__ import annotations

import gc

import pytest
from twisted.python import usage

from broker_core import tap
from broker_core.security import cluster_secret


def test_a_broker_process_collects_garbage_less_often():
    before = gc.get_threshold()
    try:
        tap.tune_gc()
        assert gc.get_threshold() == tap.BROKER_GC_THRESHOLDS
        young, middle, old = tap.BROKER_GC_THRESHOLDS
        assert young > before[0] and young * middle * old > before[0] * before[1] * before[2]
    finally:
        gc.set_threshold(*before)


def test_the_quorum_options_set_their_keys(tmp_path):
    secret = str(tmp_path / "cluster.secret")
    cluster_secret.generate(secret)
    opts = tap.Options()
    opts.parseOptions(["--broker-id", "1", "--log-dir", "d", "--metadata", "quorum",
                       "--quorum-voters", "1@127.0.0.1:9093", "--quorum-listen",
                       "127.0.0.1:9093", "--quorum-data-dir", "q", "--cluster-id", "c",
                       "--cluster-secret-file", secret])
    cfg = opts.config
    assert (cfg.metadata_store, cfg.quorum_voters, cfg.quorum_listener, cfg.quorum_data_dir,
            cfg.cluster_id) == ("quorum", "1@127.0.0.1:9093", "127.0.0.1:9093", "q", "c")
    opts = tap.Options()
    opts.parseOptions(["--broker-id", "4", "--log-dir", "d", "--metadata", "quorum",
                       "--quorum-bootstrap-servers", "127.0.0.1:9093", "--quorum-listen",
                       "127.0.0.1:9096", "--set", f"cluster.secret.file={secret}"])
    cfg = opts.config
    assert (cfg.quorum_voters, cfg.quorum_bootstrap_servers) == (None, "127.0.0.1:9093")


def test_a_broker_without_the_cluster_secret_is_refused_with_how_to_make_one(tmp_path):
    with pytest.raises(usage.UsageError, match=r"cluster\.secret\.file.*sluice secret create FILE"):
        tap.Options().parseOptions(["--broker-id", "1", "--log-dir", "d",
                                    "--zookeeper", "127.0.0.1:2181"])
    loose = tmp_path / "loose.secret"
    loose.write_text("x" * 64)
    loose.chmod(0o644)
    with pytest.raises(usage.UsageError, match="accessible by other users"):
        tap.Options().parseOptions(["--broker-id", "1", "--log-dir", "d", "--zookeeper",
                                    "127.0.0.1:2181", "--cluster-secret-file", str(loose)])


def test_a_broker_with_an_open_zookeeper_or_metrics_secret_file_is_refused(tmp_path):
    # The broker reads its secret files before it starts: an unusable one refuses the start
    # with the file's own message, naming the key.
    secret = str(tmp_path / "cluster.secret")
    cluster_secret.generate(secret)
    loose = tmp_path / "loose"
    loose.write_text("sluice:" + "p" * 40)
    loose.chmod(0o644)
    argv = ["--broker-id", "1", "--log-dir", "d", "--zookeeper", "127.0.0.1:2181",
            "--cluster-secret-file", secret]
    for key in ("zookeeper.auth.file", "metrics.basic.auth.file"):
        with pytest.raises(usage.UsageError, match=f"{key}.*accessible by other users"):
            tap.Options().parseOptions([*argv, "--set", f"{key}={loose}"])
