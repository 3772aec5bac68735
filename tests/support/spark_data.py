"""Topics and records for the Spark data source tests, made through a broker.
"""

from __future__ import annotations

import time


def create_topic(cluster, name: str, partitions: int, config: dict[str, str] | None = None,
                 replication_factor: int = 3) -> None:
    """Create ``name`` and wait until every partition has a leader."""
    from consumer_client.spark.options import Subscription
    from consumer_client.spark.reader import Cluster
    from sluice_tools.admin import AdminClient

    AdminClient(bootstrap_servers=cluster.bootstrap).create_topic(
        name, partitions, replication_factor, config)
    c = Cluster(cluster.bootstrap)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                tps = c.partitions_of(Subscription(topics=(name,)), max_age_s=0)
                if len(tps) == partitions and all(c.leader(tp) is not None for tp in tps):
                    c.latest(tps)
                    return
            except Exception:  # noqa: BLE001 - not there yet
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} has no leaders after 30s")
            time.sleep(0.2)
    finally:
        c.close()


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes,
                                                             list | None]],
            batch_messages: int = 1000) -> None:
    """Produce ``(partition, key, value, headers)`` records with confluent-kafka, acks=all,
    each partition's records in list order; fails on any delivery error."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def report(err, msg):  # noqa: ANN001 - confluent-kafka's callback signature
        if err is not None:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.num.messages": batch_messages, "enable.idempotence": False,
                  "max.in.flight.requests.per.connection": 1})
    for partition, key, value, headers in records:
        while True:
            try:
                p.produce(topic, value=value, key=key, partition=partition, headers=headers,
                          on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "records still undelivered after 60s"
    assert not errors, errors[:5]


