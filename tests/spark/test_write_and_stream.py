"""The sink (batch and streaming) and the streaming source with a checkpoint, with real PySpark
(local[2]) against a real three-broker cluster."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.support.spark_data import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _batch(spark, cluster, topic, **options):
    r = (spark.read.format("sluice").option("bootstrap.servers", cluster.bootstrap)
         .option("subscribe", topic))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_writer_round_trips_a_dataframe_through_a_topic(spark, spark_cluster):
    create_topic(spark_cluster, "w-out", 4)
    data = [(None if i % 4 == 0 else b"key-%d" % (i % 9), b"value-%05d" % i,
             [("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else [])
            for i in range(2000)]
    df = spark.createDataFrame(
        data, "key binary, value binary, headers array<struct<key: string, value: binary>>")
    (df.repartition(3).write.format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
     .option("topic", "w-out").mode("append").save())
    back = _batch(spark, spark_cluster, "w-out", includeHeaders="true").collect()

    def norm(key, value, headers):
        return (None if key is None else bytes(key), bytes(value),
                tuple((h[0], None if h[1] is None else bytes(h[1])) for h in headers))
    assert Counter(norm(r.key, r.value, r.headers) for r in back) == \
        Counter(norm(*d) for d in data)
    # Keyed records land by key (murmur2): one partition per key.
    parts_of_key: dict[bytes, set[int]] = {}
    for r in back:
        if r.key is not None:
            parts_of_key.setdefault(bytes(r.key), set()).add(r.partition)
    assert all(len(ps) == 1 for ps in parts_of_key.values())


def test_writer_takes_string_columns_and_a_topic_column(spark, spark_cluster):
    create_topic(spark_cluster, "w-a", 2)
    create_topic(spark_cluster, "w-b", 2)
    df = spark.createDataFrame([("w-a" if i % 2 else "w-b", f"k{i}", f"v{i}") for i in range(100)],
                               "topic string, key string, value string")
    (df.write.format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
     .mode("append").save())
    a = {bytes(r.value).decode() for r in _batch(spark, spark_cluster, "w-a").collect()}
    b = {bytes(r.value).decode() for r in _batch(spark, spark_cluster, "w-b").collect()}
    assert a == {f"v{i}" for i in range(100) if i % 2}
    assert b == {f"v{i}" for i in range(100) if not i % 2}


def test_a_failed_write_task_names_the_partition_and_the_broker_error(spark, spark_cluster):
    create_topic(spark_cluster, "w-small", 1, config={"max.message.bytes": "300"})
    df = spark.createDataFrame([(b"x" * 2000,)], "value binary")
    with pytest.raises(Exception) as e:
        (df.write.format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
         .option("topic", "w-small").mode("append").save())
    msg = str(e.value)
    assert "topic 'w-small' partition 0" in msg, msg[-3000:]
    assert "MESSAGE_TOO_LARGE" in msg, msg[-3000:]
    assert "leader broker" in msg


def test_writer_without_a_topic_fails_naming_the_option(spark, spark_cluster):
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="option 'topic'"):
        (df.write.format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
         .mode("append").save())
    with pytest.raises(Exception, match="use mode\\('append'\\)"):
        (df.write.format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
         .option("topic", "x").mode("overwrite").save())


def _wait(cond, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def test_streaming_query_restarted_from_its_checkpoint_writes_every_message_once(
        spark, spark_cluster, tmp_path):
    from sluice_tools.admin import AdminClient

    create_topic(spark_cluster, "s-in", 3)
    first = [(i % 3, None, b"first-%05d" % i, None) for i in range(1800)]
    produce(spark_cluster.bootstrap, "s-in", first, batch_messages=50)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def start():
        df = (spark.readStream.format("sluice")
              .option("bootstrap.servers", spark_cluster.bootstrap).option("subscribe", "s-in")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200")
              .load())
        return (df.selectExpr("partition", "offset", "value").writeStream.format("parquet")
                .option("path", out).option("checkpointLocation", ckpt)
                .trigger(processingTime="200 milliseconds").start())

    def committed() -> int:
        try:
            return spark.read.parquet(out).count()
        except Exception:  # noqa: BLE001 - no file committed yet
            return 0

    q = start()
    try:
        _wait(lambda: q.lastProgress is not None and q.lastProgress["batchId"] >= 2,
              what="three micro-batches")
        # maxOffsetsPerTrigger: no batch read more than its share.
        assert all(p["numInputRows"] <= 200 + 3 for p in q.recentProgress)
    finally:
        q.stop()
    mid = committed()
    assert 0 < mid < len(first), "stopped mid-stream"

    q = start()
    try:
        # While it runs: more records, and a new partition that must be picked up.
        AdminClient(bootstrap_servers=spark_cluster.bootstrap).add_partitions("s-in", 4)
        second = [(i % 4, None, b"second-%05d" % i, None) for i in range(400)]
        _wait(lambda: _has_leader(spark_cluster, ("s-in", 3)), what="the new partition's leader")
        produce(spark_cluster.bootstrap, "s-in", second, batch_messages=50)
        total = len(first) + len(second)
        _wait(lambda: committed() >= total, what=f"{total} rows in the Parquet output")
        q.processAllAvailable()
    finally:
        q.stop()
    rows = spark.read.parquet(out).collect()
    keys = Counter((r.partition, r.offset) for r in rows)
    assert [k for k, n in keys.items() if n > 1] == []
    assert sorted(bytes(r.value) for r in rows) == sorted(v for _p, _k, v, _h in first + second)
    assert {r.partition for r in rows} == {0, 1, 2, 3}


def _has_leader(cluster, tp) -> bool:
    from consumer_client.spark.options import Subscription
    from consumer_client.spark.reader import Cluster

    c = Cluster(cluster.bootstrap)
    try:
        c.partitions_of(Subscription(topics=(tp[0],)), max_age_s=0)
        return c.leader(tp) is not None
    finally:
        c.close()


def test_stream_to_topic_with_available_now(spark, spark_cluster, tmp_path):
    create_topic(spark_cluster, "s-src", 2)
    create_topic(spark_cluster, "s-dst", 2)
    src = [(i % 2, b"k%d" % (i % 5), b"src-%04d" % i, None) for i in range(500)]
    produce(spark_cluster.bootstrap, "s-src", src)
    df = (spark.readStream.format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
          .option("subscribe", "s-src").option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "100").load())
    q = (df.selectExpr("key", "upper(cast(value as string)) as value").writeStream
         .format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
         .option("topic", "s-dst").option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive
    got = Counter((bytes(r.key), bytes(r.value)) for r in _batch(spark, spark_cluster,
                                                                  "s-dst").collect())
    assert got == Counter((k, v.upper()) for _p, k, v, _h in src)
