"""Bad input fails fast with a message naming the option, or as Spark's Kafka source does."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.spark_data import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _read(spark, bootstrap, **options):
    r = spark.read.format("sluice").option("bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load().collect()


@pytest.fixture(scope="module")
def small(spark_cluster):
    create_topic(spark_cluster, "bad-small", 2)
    produce(spark_cluster.bootstrap, "bad-small", [(i % 2, None, b"%d" % i, None)
                                                   for i in range(20)])


@pytest.mark.parametrize("options, words", [
    ({"subscribe": "no-such-topic"}, ["option 'subscribe'", "no-such-topic",
                                      "UNKNOWN_TOPIC_OR_PARTITION"]),
    ({"assign": json.dumps({"bad-small": [7]})}, ["option 'assign'", "no partition 7"]),
    ({"subscribe": "bad-small", "assign": json.dumps({"bad-small": [0]})},
     ["exactly one of", "'subscribe' and 'assign'"]),
    ({"subscribe": "bad-small", "startingOffsets": '{"bad-small": {"0": 1,'},
     ["option 'startingOffsets'", "JSON"]),
    ({"subscribe": "bad-small", "startingOffsets": '{"bad-small": {"0": 1}}'},
     ["option 'startingOffsets'", "missing bad-small-1"]),
    ({"subscribe": "bad-small", "startingOffsets": '{"bad-small": {"0": 5, "1": 5}}',
      "endingOffsets": '{"bad-small": {"0": 2, "1": -1}}'},
     ["option 'endingOffsets'", "bad-small-0 ends at 2"]),
    ({"subscribe": "bad-small", "startingOffsets": "latest"},
     ["option 'startingOffsets'", "not allowed for batch"]),
])
def test_bad_options_fail_naming_the_option(spark, spark_cluster, small, options, words):
    with pytest.raises(Exception) as e:
        _read(spark, spark_cluster.bootstrap, **options)
    for w in words:
        assert w in str(e.value), str(e.value)[-2000:]


def test_unreachable_bootstrap_server_fails_naming_the_option(spark):
    with pytest.raises(Exception) as e:
        _read(spark, "127.0.0.1:1", subscribe="anything")
    assert "option 'bootstrap.servers'" in str(e.value)
    assert "127.0.0.1:1" in str(e.value)


@pytest.mark.parametrize("servers, options, says", [
    (None, {"subscribe": "no-such-topic"},
     "option 'subscribe': topic 'no-such-topic' does not exist (UNKNOWN_TOPIC_OR_PARTITION)"),
    ("127.0.0.1:1", {"subscribe": "anything"},
     "option 'bootstrap.servers': could not connect to any of: 127.0.0.1:1"),
])
def test_the_first_line_of_the_error_says_what_went_wrong(spark, spark_cluster, servers,
                                                          options, says):
    """A session built by hand (tests/spark/conftest.py), with register(spark): the first line
    was '[PYTHON_DATA_SOURCE_ERROR] ... Traceback (most recent call last):'."""
    with pytest.raises(Exception) as e:
        _read(spark, servers or spark_cluster.bootstrap, **options)
    first = str(e.value).splitlines()[0]
    assert says in first, str(e.value)[:2000]


def test_register_leaves_the_session_and_its_other_python_functions_alone(spark):
    """Only the data source's own workers hide tracebacks: the session's setting and the
    environment later UDFs are built with do not change."""
    from consumer_client.spark import HIDE_TRACEBACK_ENV, register

    register(spark)
    assert spark.conf.get("spark.sql.execution.pyspark.udf.hideTraceback.enabled") == "false"
    assert HIDE_TRACEBACK_ENV not in spark.sparkContext.environment


def test_offsets_deleted_by_retention(spark, spark_cluster):
    """failOnDataLoss true (default): the query fails and says how to go on; false: it reads
    what is left, from the log start."""
    from consumer_client.spark.reader import Cluster

    create_topic(spark_cluster, "bad-lossy", 1,
                 config={"segment.bytes": "2000", "retention.bytes": "4000"})
    produce(spark_cluster.bootstrap, "bad-lossy",
            [(0, None, b"%05d" % i + b"x" * 95, None) for i in range(400)], batch_messages=5)
    c = Cluster(spark_cluster.bootstrap)
    try:
        deadline = time.monotonic() + 60
        while c.earliest([("bad-lossy", 0)])[("bad-lossy", 0)] == 0:
            assert time.monotonic() < deadline, "retention deleted nothing in 60s"
            time.sleep(0.3)
        first = c.earliest([("bad-lossy", 0)])[("bad-lossy", 0)]
    finally:
        c.close()
    start = json.dumps({"bad-lossy": {"0": 0}})
    with pytest.raises(Exception) as e:
        _read(spark, spark_cluster.bootstrap, subscribe="bad-lossy", startingOffsets=start)
    assert "failOnDataLoss" in str(e.value) and "bad-lossy-0" in str(e.value)
    rows = _read(spark, spark_cluster.bootstrap, subscribe="bad-lossy", startingOffsets=start,
                 failOnDataLoss="false")
    offsets = sorted(r.offset for r in rows)
    assert offsets[0] >= first and offsets == list(range(offsets[0], 400))


def test_a_stream_of_a_missing_topic_fails_with_the_reason_on_the_first_line(spark,
                                                                            spark_cluster,
                                                                            tmp_path):
    """A stream's offsets are asked for in a driver-side Python worker, which Spark's own
    hideTraceback setting does not reach."""
    df = (spark.readStream.format("sluice").option("bootstrap.servers", spark_cluster.bootstrap)
          .option("subscribe", "no-such-stream-topic").load())
    with pytest.raises(Exception) as e:
        q = (df.writeStream.format("memory").queryName("missing_topic_stream")
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
        try:
            q.awaitTermination(120)
        finally:
            q.stop()
    first = str(e.value).splitlines()[0]
    assert ("option 'subscribe': topic 'no-such-stream-topic' does not exist "
            "(UNKNOWN_TOPIC_OR_PARTITION)") in first, str(e.value)[:3000]
