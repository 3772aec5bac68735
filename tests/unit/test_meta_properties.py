"""``meta.properties``: a log directory names its broker and cluster, and a broker refuses one
that names another (broker_core/log/meta_properties.py)."""

from __future__ import annotations

import pytest

from broker_core.log import meta_properties as mp


def test_a_new_directory_is_claimed_with_both_ids(tmp_path):
    got = mp.check_and_claim(tmp_path, 3, "abc")
    assert got == mp.MetaProperties(3, "abc")
    assert mp.read(tmp_path) == got
    text = (tmp_path / "meta.properties").read_text()
    assert "broker.id=3\n" in text and "cluster.id=abc\n" in text and "version=0\n" in text


def test_claiming_again_with_the_same_ids_changes_nothing(tmp_path):
    mp.check_and_claim(tmp_path, 3, "abc")
    before = (tmp_path / "meta.properties").stat().st_mtime_ns
    assert mp.check_and_claim(tmp_path, 3, "abc") == mp.MetaProperties(3, "abc")
    assert (tmp_path / "meta.properties").stat().st_mtime_ns == before


def test_an_unknown_cluster_checks_the_broker_only_and_keeps_a_known_cluster(tmp_path):
    assert mp.check_and_claim(tmp_path, 3, None) == mp.MetaProperties(3, None)
    assert "cluster.id" not in (tmp_path / "meta.properties").read_text()
    assert mp.check_and_claim(tmp_path, 3, "abc") == mp.MetaProperties(3, "abc")
    # Not knowing the cluster (the ZooKeeper-mode check before the store answers) keeps it.
    assert mp.check_and_claim(tmp_path, 3, None) == mp.MetaProperties(3, "abc")
    assert mp.read(tmp_path) == mp.MetaProperties(3, "abc")


def test_another_brokers_directory_is_refused_and_left_alone(tmp_path):
    mp.check_and_claim(tmp_path, 1, "abc")
    with pytest.raises(mp.MetaPropertiesError, match="belongs to broker 1, but this is broker 2"):
        mp.check_and_claim(tmp_path, 2, "abc")
    assert mp.read(tmp_path) == mp.MetaProperties(1, "abc")


def test_another_clusters_directory_is_refused_and_left_alone(tmp_path):
    mp.check_and_claim(tmp_path, 1, "old-cluster")
    with pytest.raises(mp.MetaPropertiesError,
                       match="belongs to cluster old-cluster, but the broker is joining "
                             "cluster new-cluster"):
        mp.check_and_claim(tmp_path, 1, "new-cluster")
    assert mp.read(tmp_path) == mp.MetaProperties(1, "old-cluster")


def test_kafka_written_file_with_comments_and_spaces_is_read(tmp_path):
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Nov 24 10:00:00 UTC 2026\nversion=0\n broker.id = 7\ncluster.id=Xy_z\n\n")
    assert mp.read(tmp_path) == mp.MetaProperties(7, "Xy_z")


@pytest.mark.parametrize("text, problem", [
    ("version=1\nbroker.id=1\n", "unsupported version '1'"),
    ("broker.id=1\n", "unsupported version None"),
    ("version=0\nbroker.id=one\n", "broker.id 'one' is not an integer"),
    ("version=0\nbroker.id\n", "expected key=value"),
])
def test_a_bad_file_is_a_clear_error_naming_it(tmp_path, text, problem):
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(mp.MetaPropertiesError, match=problem) as e:
        mp.check_and_claim(tmp_path, 1, "abc")
    assert str(tmp_path / "meta.properties") in str(e.value)
    assert (tmp_path / "meta.properties").read_text() == text  # nothing overwritten
