"""Batch reads with real PySpark (local[2]) against a real three-broker cluster."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from tests.support.spark_data import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PER_PARTITION = 500


def _records(partitions: int, per_partition: int, tag: str) -> list:
    out = []
    for i in range(per_partition):
        for p in range(partitions):
            key = None if i % 7 == 0 else b"k%d" % (i % 13)
            value = b"%s-p%d-%06d-" % (tag.encode(), p, i) + bytes([i % 256]) * (i % 50)
            headers = [("h", b"%d" % i)] if i % 5 == 0 else None
            out.append((p, key, value, headers))
    return out


@pytest.fixture(scope="module")
def six(spark_cluster):
    """Topic ``six``: 6 partitions, RF 3, PER_PARTITION records each (keys, null keys,
    headers, binary payloads)."""
    create_topic(spark_cluster, "six", 6)
    records = _records(6, PER_PARTITION, "six")
    produce(spark_cluster.bootstrap, "six", records, batch_messages=100)
    return records


def _load(spark, cluster, **options):
    r = spark.read.format("sluice").option("bootstrap.servers", cluster.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_of_six_partitions_returns_exactly_the_produced_rows(spark, spark_cluster, six):
    df = _load(spark, spark_cluster, subscribe="six")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rows = df.collect()
    assert len(rows) == 6 * PER_PARTITION
    by_partition: dict[int, list] = {}
    for r in rows:
        assert r.topic == "six"
        assert r.timestampType == 0
        by_partition.setdefault(r.partition, []).append(r)
    assert sorted(by_partition) == list(range(6))
    for p, got in by_partition.items():
        got.sort(key=lambda r: r.offset)
        assert [r.offset for r in got] == list(range(PER_PARTITION))
        want = [(k, v) for (pp, k, v, _h) in six if pp == p]
        assert [(None if r.key is None else bytes(r.key), bytes(r.value)) for r in got] == want
    # Aggregates run in the JVM over the Arrow batches, not in Python.
    agg = df.groupBy("partition").count().collect()
    assert {r.partition: r["count"] for r in agg} == {p: PER_PARTITION for p in range(6)}


def test_min_partitions_splits_ranges_without_changing_rows(spark, spark_cluster, six):
    df = _load(spark, spark_cluster, subscribe="six", minPartitions="15")
    assert df.rdd.getNumPartitions() >= 15
    offsets = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offsets == [(p, o) for p in range(6) for o in range(PER_PARTITION)]


def test_offsets_json_selects_ranges_and_headers_are_included(spark, spark_cluster, six):
    start = {"six": {str(p): (10 * p if p else -2) for p in range(6)}}
    end = {"six": {str(p): (-1 if p == 5 else 100 + p) for p in range(6)}}
    df = _load(spark, spark_cluster, subscribe="six", startingOffsets=json.dumps(start),
               endingOffsets=json.dumps(end), includeHeaders="true")
    rows = df.collect()
    got = {}
    for r in rows:
        got.setdefault(r.partition, []).append(r.offset)
    for p in range(6):
        lo = 10 * p
        hi = PER_PARTITION if p == 5 else 100 + p
        assert sorted(got[p]) == list(range(lo, hi)), p
    for r in rows:
        want = [("h", b"%d" % r.offset)] if r.offset % 5 == 0 else []
        assert [(h.key, bytes(h.value)) for h in r.headers] == want


def test_assign_and_subscribe_pattern(spark, spark_cluster, six):
    df = _load(spark, spark_cluster, assign=json.dumps({"six": [1, 4]}))
    assert sorted({r.partition for r in df.select("partition").collect()}) == [1, 4]
    assert df.count() == 2 * PER_PARTITION
    assert _load(spark, spark_cluster, subscribePattern="si.").count() == 6 * PER_PARTITION


def test_leader_change_during_a_batch_read_loses_and_duplicates_nothing(spark, spark_cluster):
    """The leader of the partitions being read is killed mid-read; the tasks find the new
    leaders and carry on from the offset they had reached."""
    from consumer_client.spark.options import Subscription
    from consumer_client.spark.reader import Cluster

    create_topic(spark_cluster, "moving", 2)
    n = 20_000
    records = [(i % 2, None, b"moving-%06d-" % i + b"x" * 90, None) for i in range(n)]
    # Small produce batches + a small fetch size: the read takes hundreds of fetches per
    # partition (~1.1 MB each).
    produce(spark_cluster.bootstrap, "moving", records, batch_messages=20)
    c = Cluster(spark_cluster.bootstrap)
    try:
        c.partitions_of(Subscription(topics=("moving",)), max_age_s=0)
        leader = c.leader(("moving", 0))
    finally:
        c.close()
    victim = spark_cluster.brokers[leader]
    survivors = ",".join(b.address for i, b in spark_cluster.brokers.items() if i != leader)

    killed_at: list[float] = []
    # The followers fetched everything before the acks=all produce was answered, so from here
    # on the leader's bytes out for the topic are what the readers got.
    sent_before = victim.metric("sluice_bytes_out_total", topic="moving")

    def kill_mid_read() -> None:
        # Kill once the leader has sent the readers about a quarter of a partition's data
        # (the read is far too quick for a fixed delay to land inside it reliably).
        deadline = time.monotonic() + 120
        while (victim.metric("sluice_bytes_out_total", topic="moving") - sent_before < 300_000
               and time.monotonic() < deadline):
            time.sleep(0.005)
        killed_at.append(time.monotonic())
        victim.kill(signal.SIGKILL)

    df = (spark.read.format("sluice").option("bootstrap.servers", survivors)
          .option("subscribe", "moving").option("kafka.max.partition.fetch.bytes", "1024")
          .option("kafka.request.timeout.ms", "5000").load())
    killer = threading.Thread(target=kill_mid_read)
    killer.start()
    try:
        rows = df.select("partition", "offset", "value").collect()
        finished = time.monotonic()
    finally:
        killer.join()
        victim.start()
        victim.wait_listening()
        spark_cluster.wait_registered()
    assert killed_at and killed_at[0] < finished, "the read ended before the leader was killed"
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    want = sorted((p, i // 2, v) for i, (p, _k, v, _h) in enumerate(records))
    assert len(got) == n
    assert got == want


def test_range_reader_fetches_ahead_and_an_early_stop_leaves_no_stray_answer(spark_cluster, six):
    """The range reader (what each Spark task runs) in many small fetches: the column-wise
    Arrow path and the consumer decoder's path give the same records, and a reader stopped
    while its next fetch is in flight closes that connection, so the next read on the same
    cluster view gets its own answers."""
    from consumer_client.spark.offsets import OffsetRange
    from consumer_client.spark.options import Subscription
    from consumer_client.spark.reader import Cluster, read_messages, read_range

    cluster = Cluster(spark_cluster.bootstrap)
    try:
        cluster.partitions_of(Subscription(topics=("six",)))
        rng = OffsetRange("six", 2, 10, PER_PARTITION - 5)
        want = [(k, v) for (p, k, v, _h) in six if p == 2][10:PER_PARTITION - 5]
        batches = list(read_range(cluster, rng, max_partition_fetch_bytes=2000))
        assert len(batches) >= 3  # one produced batch per fetch, each fetch sent ahead
        rows = [(k, v) for b in batches for k, v in zip(b.column("key").to_pylist(),
                                                       b.column("value").to_pylist(),
                                                       strict=True)]
        assert rows == want
        assert [o for b in batches for o in b.column("offset").to_pylist()] == list(
            range(10, PER_PARTITION - 5))
        messages = [m for chunk in read_messages(cluster, rng, max_partition_fetch_bytes=2000)
                    for m in chunk]
        assert [(m.key, m.value) for m in messages] == want

        leader = cluster.leader(("six", 2))
        it = read_range(cluster, rng, max_partition_fetch_bytes=2000)
        next(it)
        assert leader in cluster._conns
        it.close()  # the fetch sent ahead is unanswered: its connection must go
        assert leader not in cluster._conns
        again = [o for b in read_range(cluster, rng, max_partition_fetch_bytes=2000)
                 for o in b.column("offset").to_pylist()]
        assert again == list(range(10, PER_PARTITION - 5))
    finally:
        cluster.close()
