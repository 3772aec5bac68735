"""The ``sluice`` data source: Spark's Kafka source and sink, in Python, over Sluice's client.

- :class:`SluiceDataSource` is what ``spark.dataSource.register`` takes (format ``"sluice"``);
- :class:`SluiceBatchReader` plans one task per offset range (split by ``minPartitions``) and
  reads it with :func:`~consumer_client.spark.reader.read_range` in Arrow batches;
- :class:`SluiceStreamReader` keeps Spark-Kafka's JSON offsets in the checkpoint, applies
  ``maxOffsetsPerTrigger`` as a read limit, finds new partitions and answers ``latestOffset``
  with one ListOffsets per leader over connections it keeps open;
- the writers live in :mod:`consumer_client.spark.sink`.

Everything a task needs travels to the executors by pickle, so readers hold only options and
plain data; connections are opened inside ``read``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from consumer_client.spark.offsets import (
    EARLIEST,
    OffsetRange,
    PartitionOffsets,
    batch_ranges,
    offsets_from_json_dict,
    offsets_to_json_dict,
    rate_limit,
    resolve,
    split_ranges,
)
from consumer_client.spark.options import (
    OptionError,
    ReadOptions,
    parse_read_options,
    parse_write_options,
)
from consumer_client.spark.reader import (
    DATA_LOSS_HINT,
    Cluster,
    DataLossError,
    SluiceSourceError,
    read_range,
)

try:  # pyspark >= 4.2: read limits (maxOffsetsPerTrigger) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older pyspark: no admission control
    ReadLimit = object  # type: ignore[misc,assignment]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc,assignment]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

log = logging.getLogger("sluice.spark")

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"


class RangePartition(InputPartition):
    """One Spark task's work: offsets ``[start, end)`` of ``topic``-``partition``."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.range = OffsetRange(topic, partition, start, end)

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def _cluster(opts: ReadOptions) -> Cluster:
    return Cluster(opts.bootstrap_servers, request_timeout_s=opts.request_timeout_ms / 1000,
                   metadata_max_age_s=opts.metadata_max_age_ms / 1000, security=opts.security)


def _read(opts: ReadOptions, partition: InputPartition) -> Iterator[Any]:
    cluster = _cluster(opts)
    try:
        yield from read_range(cluster, partition.range,  # type: ignore[attr-defined]
                              fail_on_data_loss=opts.fail_on_data_loss,
                              include_headers=opts.include_headers,
                              max_partition_fetch_bytes=opts.max_partition_fetch_bytes,
                              poll_timeout_s=opts.poll_timeout_ms / 1000)
    finally:
        cluster.close()


def _check_starts(start: PartitionOffsets, earliest: PartitionOffsets, latest: PartitionOffsets,
                  fail_on_data_loss: bool) -> PartitionOffsets:
    """Specific starting offsets against the log: below the log start is lost data (fail, or
    start at the log start); past the end fails (or reads nothing)."""
    out = dict(start)
    for tp, s in start.items():
        if s < earliest[tp]:
            if fail_on_data_loss:
                raise DataLossError(f"option 'startingOffsets': offset {s} of {tp[0]}-{tp[1]} "
                                    f"is gone, the partition starts at {earliest[tp]}. "
                                    f"{DATA_LOSS_HINT}")
            log.warning("startingOffsets %d of %s-%d is gone; starting at %d", s, tp[0], tp[1],
                        earliest[tp])
            out[tp] = earliest[tp]
        elif s > latest[tp]:
            if fail_on_data_loss:
                raise DataLossError(f"option 'startingOffsets': offset {s} of {tp[0]}-{tp[1]} "
                                    f"is past the partition's end {latest[tp]}. "
                                    f"{DATA_LOSS_HINT}")
            out[tp] = latest[tp]
    return out


class SluiceBatchReader(DataSourceReader):
    """``spark.read.format("sluice")``: offsets are resolved once, when Spark plans the query."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        cluster = _cluster(opts)
        try:
            tps = cluster.partitions_of(opts.subscription)
            earliest = cluster.earliest(tps)
            latest = cluster.latest(tps)
            start = resolve("startingOffsets", opts.starting, tps,
                            lambda ps: {tp: earliest[tp] for tp in ps},
                            lambda ps: {tp: latest[tp] for tp in ps}, allow_latest=False)
            end = resolve("endingOffsets", opts.ending, tps,
                          lambda ps: {tp: earliest[tp] for tp in ps},
                          lambda ps: {tp: latest[tp] for tp in ps}, allow_earliest=False)
        finally:
            cluster.close()
        if opts.starting.kind == "specific":
            start = _check_starts(start, earliest, latest, opts.fail_on_data_loss)
        ranges = split_ranges(batch_ranges(start, end), opts.min_partitions)
        return [RangePartition(*r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, partition)


class SluiceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("sluice")``.

    Offsets are Spark-Kafka's ``{"topic": {"partition": next offset}}``. The instance lives on
    the driver for the whole query and keeps its :class:`Cluster` (metadata and one connection
    per broker) between calls, so an idle query's frequent ``latestOffset`` calls cost one
    ListOffsets per leader and a Metadata request at most every ``kafka.metadata.max.age.ms``.
    Partitions that appear while the query runs are read from their earliest offset.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._cluster_: Cluster | None = None
        self._latest: PartitionOffsets | None = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow's end

    def __getstate__(self) -> dict:
        # Executors get the options only; sockets do not pickle.
        return {"opts": self.opts, "_cluster_": None, "_latest": None, "_target": None}

    @property
    def _cluster(self) -> Cluster:
        if self._cluster_ is None:
            self._cluster_ = _cluster(self.opts)
        return self._cluster_

    def initialOffset(self) -> dict:
        c = self._cluster
        tps = c.partitions_of(self.opts.subscription, max_age_s=0)
        start = resolve("startingOffsets", self.opts.starting, tps, c.earliest, c.latest)
        if self.opts.starting.kind == "specific":
            start = _check_starts(start, c.earliest(tps), c.latest(tps),
                                  self.opts.fail_on_data_loss)
        return offsets_to_json_dict(start)

    def getDefaultReadLimit(self) -> Any:
        n = self.opts.max_offsets_per_trigger
        if n is not None and ReadMaxRows is not None:
            return ReadMaxRows(n)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        c = self._cluster
        self._target = c.latest(c.partitions_of(self.opts.subscription, max_age_s=0))

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        c = self._cluster
        tps = c.partitions_of(self.opts.subscription)
        latest = c.latest(tps)
        self._latest = latest
        if self._target is not None:
            # Trigger.AvailableNow: nothing past what existed when the query started, and no
            # partition that appeared since.
            latest = {tp: min(o, self._target[tp]) for tp, o in latest.items()
                      if tp in self._target}
        if start is None or ReadMaxRows is None or not isinstance(limit, ReadMaxRows):
            return offsets_to_json_dict(latest)
        begin = offsets_from_json_dict("checkpoint", start) if start else {}
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin = {**begin, **c.earliest(new)}
        return offsets_to_json_dict(rate_limit(begin, latest, limit.max_rows))

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else offsets_to_json_dict(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json_dict("checkpoint", start) if start else {}
        until = offsets_from_json_dict("checkpoint", end) if end else {}
        fail = self.opts.fail_on_data_loss
        gone = sorted(set(begin) - set(until))
        if gone:
            msg = (f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} disappeared (topic "
                   "deleted?)")
            if fail:
                raise DataLossError(f"{msg}. {DATA_LOSS_HINT}")
            log.warning("%s; no longer read (failOnDataLoss=false)", msg)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin = {**begin, **self._cluster.earliest(new)}
        ranges = []
        for tp in sorted(until):
            s, e = begin[tp], until[tp]
            if e < s:
                msg = (f"{tp[0]}-{tp[1]}'s offset went back from {s} to {e} (topic re-created "
                       "or log truncated)")
                if fail:
                    raise DataLossError(f"{msg}. {DATA_LOSS_HINT}")
                log.warning("%s; skipped (failOnDataLoss=false)", msg)
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return [RangePartition(*r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        # Like Spark's Kafka source: progress lives in the checkpoint, nothing is committed to
        # the cluster.
        pass

    def stop(self) -> None:
        if self._cluster_ is not None:
            self._cluster_.close()
            self._cluster_ = None


class SluiceDataSource(DataSource):
    """Format ``"sluice"``: Spark's Kafka source and sink options (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "sluice"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return SCHEMA_DDL + (HEADERS_DDL if include else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return SluiceBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SluiceStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from consumer_client.spark.sink import SluiceWriter

        if overwrite:
            # As Spark's Kafka sink: records are appended to a topic, never replace it.
            raise OptionError("mode", "save mode 'overwrite' is not supported by 'sluice': "
                              "records are appended to the topic; use mode('append')")
        return SluiceWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from consumer_client.spark.sink import SluiceStreamWriter

        return SluiceStreamWriter(parse_write_options(self.options), schema)


__all__ = ["SluiceDataSource", "SluiceBatchReader", "SluiceStreamReader", "RangePartition",
           "SluiceSourceError", "DataLossError", "EARLIEST"]
