"""One member of a Kafka consumer group (Kafka's classic protocol) with a real Kafka client:
confluent-kafka, kafka-python or aiokafka. It subscribes to one topic, reads from the earliest
offset, and commits synchronously after every poll that returned messages.

:func:`run_member` is the loop; a test runs it in a thread, or in a process of its own to kill
it with SIGKILL (a killed member sends no LeaveGroup: the coordinator must expire it)::

    python -m tests.support.kafka_group_member CLIENT BOOTSTRAP TOPIC GROUP [CONF_JSON]

The process writes one JSON line to stdout, flushed, after every poll that consumed something
or changed its assignment: ``{"assigned": [partition, ...], "got": [[partition, offset,
value], ...]}`` (values as text: the tests write ASCII). It runs until it is killed.

``conf`` takes Kafka's property names (``session.timeout.ms``, ``client.id``, ...) and
overrides the defaults below; for kafka-python and aiokafka the dots become underscores.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping

#: The member's session timeout unless ``conf`` says otherwise; the broker's minimum
#: (``group.min.session.timeout.ms``) must not be above it.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
POLL_S = 0.2

CLIENTS = ("confluent", "kafka-python", "aiokafka")

#: ``report(got, assigned)`` after each poll: the (partition, offset, value) it returned and the
#: consumer's assignment then.
Report = Callable[[list[tuple[int, int, bytes]], set[int]], None]
#: ``on_rebalance("assign" | "revoke", partitions)``: confluent-kafka's rebalance callbacks.
OnRebalance = Callable[[str, frozenset[int]], None]


def run_member(client: str, bootstrap: str, topic: str, group: str, *,
               conf: Mapping[str, object] | None = None, report: Report,
               stopped: Callable[[], bool], on_rebalance: OnRebalance | None = None) -> None:
    """Consume as one member of ``group`` until ``stopped()``, then close the consumer (which
    sends LeaveGroup). A commit refused because the group moved on (a rebalance, a coordinator
    not found yet) is not an error: the client rejoins and what was not committed is read
    again, as any application sees it. Any other error propagates."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; one of {CLIENTS}")
    conf = dict(conf or {})
    if client == "confluent":
        _run_confluent(bootstrap, topic, group, conf, report, stopped, on_rebalance)
    elif client == "kafka-python":
        _run_kafka_python(bootstrap, topic, group, conf, report, stopped)
    else:
        asyncio.run(_run_aiokafka(bootstrap, topic, group, conf, report, stopped))


def _python_client_conf(group: str, conf: Mapping[str, object]) -> dict[str, object]:
    """kafka-python's and aiokafka's keyword arguments (they share the names)."""
    return {"group_id": group, "enable_auto_commit": False, "auto_offset_reset": "earliest",
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            **{k.replace(".", "_"): v for k, v in conf.items()}}


def _run_confluent(bootstrap: str, topic: str, group: str, conf: dict[str, object],
                   report: Report, stopped: Callable[[], bool],
                   on_rebalance: OnRebalance | None) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": SESSION_TIMEOUT_MS,
                  "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, **conf})
    callbacks = {}
    if on_rebalance is not None:
        def record(kind: str):
            return lambda _c, partitions: on_rebalance(
                kind, frozenset(tp.partition for tp in partitions))
        callbacks = {"on_assign": record("assign"), "on_revoke": record("revoke")}
    c.subscribe([topic], **callbacks)
    moved_on = (KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                KafkaError.REBALANCE_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                KafkaError.NOT_COORDINATOR)
    try:
        while not stopped():
            msgs = c.consume(num_messages=100, timeout=POLL_S)
            got = []
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"consumer error: {m.error()}")
                got.append((m.partition(), m.offset(), m.value()))
            if msgs:
                try:
                    c.commit(asynchronous=False)
                except KafkaException as e:
                    err = e.args[0]
                    if not err.retriable() and err.code() not in moved_on:
                        raise
            report(got, {tp.partition for tp in c.assignment()})
    finally:
        c.close()


def _run_kafka_python(bootstrap: str, topic: str, group: str, conf: dict[str, object],
                      report: Report, stopped: Callable[[], bool]) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","),
                      **_python_client_conf(group, conf))
    try:
        while not stopped():
            batches = c.poll(timeout_ms=int(POLL_S * 1000))
            got = [(tp.partition, r.offset, r.value)
                   for tp, records in batches.items() for r in records]
            if batches:
                try:
                    c.commit()
                except (CommitFailedError, RebalanceInProgressError):
                    pass  # the group moved on: the client rejoins
            report(got, {tp.partition for tp in c.assignment()})
    finally:
        c.close()


async def _run_aiokafka(bootstrap: str, topic: str, group: str, conf: dict[str, object],
                        report: Report, stopped: Callable[[], bool]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import CommitFailedError, RebalanceInProgressError

    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                         **_python_client_conf(group, conf))
    await c.start()
    try:
        while not stopped():
            batches = await c.getmany(timeout_ms=int(POLL_S * 1000))
            got = [(tp.partition, r.offset, r.value)
                   for tp, records in batches.items() for r in records]
            if batches:
                try:
                    await c.commit()
                except (CommitFailedError, RebalanceInProgressError):
                    pass  # the group moved on: the client rejoins
            report(got, {tp.partition for tp in c.assignment()})
    finally:
        await c.stop()


def main(argv: list[str]) -> int:
    client, bootstrap, topic, group = argv[1:5]
    conf = json.loads(argv[5]) if len(argv) > 5 else {}
    last: list[set[int] | None] = [None]

    def report(got: list[tuple[int, int, bytes]], assigned: set[int]) -> None:
        if not got and assigned == last[0]:
            return
        last[0] = assigned
        line = {"assigned": sorted(assigned),
                "got": [[p, o, v.decode("ascii")] for p, o, v in got]}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    run_member(client, bootstrap, topic, group, conf=conf, report=report,
               stopped=lambda: False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
