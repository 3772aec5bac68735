"""Example pipeline: events -> a streaming Spark job -> per-user, per-minute totals in Parquet
and in a topic. Run it with ``examples/spark_pipeline.sh`` (see docs/spark.md).

1. produces ``--events`` JSON events (``{"user": ..., "amount": ...}``, keyed by user, record
   timestamps spread over the last few minutes) into ``pipeline-events`` with Sluice's
   BlockingProducer, then one end-of-input marker whose timestamp moves the watermark past
   every minute of real events;
2. runs a streaming query over ``format("sluice")``: parse the JSON, a 1-minute watermark on
   the record timestamp, count and sum per user and minute; written twice, in append mode
   (each window once, when the watermark has passed it): to Parquet and, as JSON, to the topic
   ``pipeline-totals`` with ``format("sluice")``. The queries run until they have processed
   everything available and closed every window (``processAllAvailable``), then stop; each run
   starts after the events of earlier runs, with fresh checkpoints. The marker's own window
   is never closed, so it never reaches the outputs (a filter would not do: Spark pushes it
   below the watermark, which would then never see the marker);
3. reads both outputs back and checks that they agree with what was produced.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EVENTS, TOTALS = "pipeline-events", "pipeline-totals"
MARKER = "__end_of_input__"


def ensure_topics(bootstrap: str) -> None:
    from sluice_tools.admin import AdminClient, AdminError

    admin = AdminClient(bootstrap_servers=bootstrap)
    existing = set(admin.list_topics())
    for name, partitions in ((EVENTS, 6), (TOTALS, 3)):
        if name not in existing:
            try:
                admin.create_topic(name, partitions, 3)
            except AdminError as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise
    time.sleep(1.0)  # let the new partitions elect leaders


def produce_events(bootstrap: str, n: int, users: int, minutes: int) -> dict:
    """Produce the events; returns ``{(user, minute_start_ms): (count, amount)}``."""
    from consumer_client.blocking_producer import BlockingProducer

    rng = random.Random(42)
    now = int(time.time() * 1000)
    start = now - minutes * 60_000
    expected: dict[tuple[str, int], list[int]] = {}
    with BlockingProducer({"bootstrap.servers": bootstrap, "acks": "all",
                           "linger.ms": 10}) as producer:
        futures = []
        for _ in range(n):
            user = f"user-{rng.randrange(users):03d}"
            amount = rng.randrange(1, 1000)
            ts = rng.randrange(start, now)
            value = json.dumps({"user": user, "amount": amount}).encode()
            futures.append(producer.send(EVENTS, value, key=user.encode(), timestamp=ts))
            acc = expected.setdefault((user, ts - ts % 60_000), [0, 0])
            acc[0] += 1
            acc[1] += amount
        # Event time only moves forward with events: this one, 5 minutes ahead, closes every
        # window of the real events (its own window stays open, so it is never written).
        marker = json.dumps({"user": MARKER, "amount": 0}).encode()
        futures += [producer.send(EVENTS, marker, key=MARKER.encode(), partition=p,
                                  timestamp=now + 300_000) for p in range(6)]
        producer.flush()
        for f in futures:
            f.get(timeout=60)
    return {k: (c, a) for k, (c, a) in expected.items()}


def run_pipeline(spark, bootstrap: str, work: Path, starting_offsets: str) -> None:
    from pyspark.sql import functions as F

    events = (spark.readStream.format("sluice")
              .option("bootstrap.servers", bootstrap)
              .option("subscribe", EVENTS)
              .option("startingOffsets", starting_offsets)
              .option("maxOffsetsPerTrigger", "20000")
              .load())
    parsed = (events
              .select(F.col("timestamp"),
                      F.from_json(F.col("value").cast("string"),
                                  "user string, amount long").alias("e"))
              .withWatermark("timestamp", "1 minute"))
    totals = (parsed.groupBy(F.col("e.user").alias("user"),
                             F.window("timestamp", "1 minute").alias("w"))
              .agg(F.count("*").alias("events"), F.sum("e.amount").alias("amount"))
              .select("user", F.col("w.start").alias("minute"), "events", "amount"))

    to_parquet = (totals.writeStream.format("parquet").outputMode("append")
                  .option("path", str(work / "totals.parquet"))
                  .option("checkpointLocation", str(work / "checkpoints" / "parquet"))
                  .trigger(processingTime="1 second").start())
    to_topic = (totals.select(F.col("user").cast("binary").alias("key"),
                              F.to_json(F.struct("user", "minute", "events", "amount"))
                              .alias("value"))
                .writeStream.format("sluice").outputMode("append")
                .option("bootstrap.servers", bootstrap)
                .option("topic", TOTALS)
                .option("checkpointLocation", str(work / "checkpoints" / "topic"))
                .trigger(processingTime="1 second").start())
    try:
        for q in (to_parquet, to_topic):
            # Returns once a trigger finds no new data and no window left to close: the
            # batch after the one that moved the watermark has written the last windows.
            q.processAllAvailable()
    finally:
        for q in (to_parquet, to_topic):
            q.stop()


def check(spark, bootstrap: str, work: Path, expected: dict, starting_offsets: str) -> None:
    from pyspark.sql import functions as F

    parquet = spark.read.parquet(str(work / "totals.parquet"))
    got_parquet = {(r.user, int(r.minute.timestamp() * 1000)): (r.events, r.amount)
                   for r in parquet.collect()}
    topic = (spark.read.format("sluice").option("bootstrap.servers", bootstrap)
             .option("subscribe", TOTALS).option("startingOffsets", starting_offsets).load()
             .select(F.from_json(F.col("value").cast("string"),
                                 "user string, minute timestamp, events long, amount long")
                     .alias("t")).select("t.*"))
    got_topic = {(r.user, int(r.minute.timestamp() * 1000)): (r.events, r.amount)
                 for r in topic.collect()}
    print(f"produced {sum(c for c, _ in expected.values())} events in {len(expected)} "
          "(user, minute) windows")
    print(f"Parquet {work / 'totals.parquet'}: {len(got_parquet)} windows, "
          f"{sum(c for c, _ in got_parquet.values())} events")
    print(f"topic {TOTALS}: {len(got_topic)} windows, {sum(c for c, _ in got_topic.values())} "
          "events")
    parquet.orderBy(F.desc("amount")).show(5, truncate=False)
    ok = got_parquet == expected and got_topic == expected
    print("outputs match the produced events" if ok else "MISMATCH between outputs and events")
    if not ok:
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", default="127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--minutes", type=int, default=5)
    ap.add_argument("--work-dir", default=str(ROOT / "run" / "spark-pipeline"),
                    help="Parquet output and checkpoints (removed first)")
    args = ap.parse_args()

    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        ensure_topics(args.bootstrap_servers)
    except OSError as e:  # no broker reachable: say so first, not after a traceback
        sys.exit(f"spark_pipeline: cannot reach the cluster at {args.bootstrap_servers}: {e}")
    from consumer_client.spark import session

    spark = session("sluice-pipeline", **{"spark.ui.enabled": "false",
                                          "spark.sql.shuffle.partitions": "4",
                                          "spark.sql.session.timeZone": "UTC"})
    spark.sparkContext.setLogLevel("WARN")
    try:
        # Earlier runs left events and totals in the topics: this run starts after them.
        events_from = end_offsets(args.bootstrap_servers, EVENTS)
        totals_from = end_offsets(args.bootstrap_servers, TOTALS)
        expected = produce_events(args.bootstrap_servers, args.events, args.users, args.minutes)
        t0 = time.monotonic()
        run_pipeline(spark, args.bootstrap_servers, work, events_from)
        print(f"streaming job done in {time.monotonic() - t0:.1f}s")
        check(spark, args.bootstrap_servers, work, expected, totals_from)
    finally:
        spark.stop()


def end_offsets(bootstrap: str, topic: str) -> str:
    """``startingOffsets`` JSON for "after everything in ``topic`` now"."""
    from consumer_client.spark.offsets import offsets_to_json_dict
    from consumer_client.spark.options import Subscription
    from consumer_client.spark.reader import Cluster

    cluster = Cluster(bootstrap)
    try:
        return json.dumps(offsets_to_json_dict(
            cluster.latest(cluster.partitions_of(Subscription(topics=(topic,))))))
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
