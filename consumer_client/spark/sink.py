"""The ``sluice`` sink: ``df.write.format("sluice")`` and ``writeStream``, as Spark's Kafka sink.

Columns: ``value`` (binary or string, required), ``key`` (binary or string, optional),
``topic`` (string; required unless the ``topic`` option is set, which then wins, as in Spark),
``partition`` (int, optional: otherwise the key's murmur2 partition, as Kafka's default
partitioner) and ``headers`` (``array<struct<key: string, value: binary>>``, optional).

Each Spark task sends its rows with one :class:`~consumer_client.blocking_producer.BlockingProducer`
(``acks=all`` unless ``kafka.acks`` says otherwise), waits until every record is acknowledged and
fails if any was not, with the producer's error (topic, partition, leader broker, Kafka error).
Delivery is at least once: a retried task sends its rows again, as with Spark's Kafka sink.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from consumer_client.spark.options import OptionError, WriteOptions

log = logging.getLogger("sluice.spark")

_BYTES_TYPES = (BinaryType, StringType)


class SluiceSinkError(Exception):
    """A write task could not deliver its rows; the message names the partition and the error."""


@dataclass
class SluiceCommitMessage(WriterCommitMessage):
    """What one write task delivered: record count per ``(topic, partition)``."""

    records: dict[tuple[str, int], int]


def check_schema(schema: StructType, opts: WriteOptions) -> None:
    """Fail on the driver, before any task runs, for columns the sink cannot write."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("value", "the DataFrame written to 'sluice' needs a 'value' column "
                          f"(binary or string); it has {', '.join(fields) or 'no columns'}")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], _BYTES_TYPES):
            raise OptionError(name, f"column {name!r} must be binary or string, not "
                              f"{fields[name].simpleString()}")
    if opts.topic is None:
        if "topic" not in fields:
            raise OptionError("topic", "no topic to write to: set the option 'topic' or give "
                              "the DataFrame a 'topic' column")
        if not isinstance(fields["topic"], StringType):
            raise OptionError("topic", f"column 'topic' must be a string, not "
                              f"{fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("partition", "column 'partition' must be an int, not "
                          f"{fields['partition'].simpleString()}")


def _bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)  # bytearray from older pyspark


def write_rows(opts: WriteOptions, rows: Iterator[Any]) -> SluiceCommitMessage:
    """Send ``rows`` and wait for every acknowledgement (see the module docstring)."""
    from consumer_client.blocking_producer import BlockingProducer

    producer = BlockingProducer({**opts.producer, "bootstrap.servers": opts.bootstrap_servers})
    lock = threading.Lock()
    errors: list[BaseException] = []
    delivered: dict[tuple[str, int], int] = {}

    def done(fut: Any) -> None:
        # On the producer's reactor thread: record, never block.
        e = fut.exception(0)
        with lock:
            if e is not None:
                errors.append(e)
            else:
                md = fut.get(0)
                tp = (md.topic, md.partition)
                delivered[tp] = delivered.get(tp, 0) + 1

    fixed_topic = opts.topic
    sent = 0
    try:
        for row in rows:
            d = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = fixed_topic or d.get("topic")
            if not topic:
                raise SluiceSinkError(f"row {sent} has no topic: set the option 'topic' or fill "
                                      "the 'topic' column")
            headers = d.get("headers")
            if headers:
                headers = [(h["key"], _bytes(h["value"])) for h in headers]
            producer.send(topic, _bytes(d.get("value")), key=_bytes(d.get("key")),
                          partition=d.get("partition"),
                          headers=headers or None).add_done_callback(done)
            sent += 1
            if errors:
                break  # no point sending more: the task fails anyway
        producer.flush()
    finally:
        producer.close()
    if errors:
        first = errors[0]
        more = f" ({len(errors) - 1} more records failed)" if len(errors) > 1 else ""
        raise SluiceSinkError(f"{first}{more}") from first
    log.info("write task delivered %d records", sent)
    return SluiceCommitMessage(delivered)


class SluiceWriter(DataSourceWriter):
    """``df.write.format("sluice")``: each task produces its rows; nothing to do on commit (the
    records are in the topic once every task has succeeded)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SluiceCommitMessage:
        return write_rows(self.opts, iterator)


class SluiceStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("sluice")``: each micro-batch's tasks produce their rows; at
    least once (a batch replayed after a failure is produced again)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> SluiceCommitMessage:
        return write_rows(self.opts, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass

    def abort(self, messages: list[Any], batchId: int) -> None:
        pass
