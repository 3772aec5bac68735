"""The data source's options: parsed and checked once, on the driver (pure: no I/O, no pyspark).

Names and defaults follow Spark's Kafka source
(https://spark.apache.org/docs/latest/streaming/structured-streaming-kafka-integration.html) so a
job moves from ``format("kafka")`` to ``format("sluice")`` by changing the format name; Spark's
``kafka.``-prefixed spelling of the bootstrap servers is accepted too, and so are the client
security keys (:mod:`consumer_client.security`: ``security.protocol``, ``sasl.*``, ``ssl.*``),
plain or ``kafka.``-prefixed as Spark's Kafka source takes them. Keys are matched without
regard to case (Spark hands them over case-insensitively). Every error is an
:class:`OptionError` whose message names the option (and never quotes a password).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker_core.config.parsing import ConfigError
from consumer_client.connection import parse_servers
from consumer_client.security import ClientSecurity, is_security_key
from consumer_client.spark.offsets import OffsetError, OffsetSpec, parse_assign, parse_offset_spec


class OptionError(ValueError):
    """A missing, conflicting or malformed option; ``option`` is its name."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(name, f"option {name!r} must be 'true' or 'false', got {raw!r}")


def _int(opts: dict[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(name, f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(name, f"option {name!r} must be at least {minimum}, got {value}")
    return value


def _servers(opts: dict[str, str]) -> str:
    raw = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not raw:
        raise OptionError("bootstrap.servers", "option 'bootstrap.servers' is required "
                          "(host:port[,host:port...])")
    try:
        parse_servers(raw)
    except ValueError as e:
        raise OptionError("bootstrap.servers", f"option 'bootstrap.servers': {e}") from None
    return raw


def _security_options(opts: dict[str, str]) -> dict[str, str]:
    """The security keys among ``opts`` (``kafka.`` prefix removed), by Kafka name."""
    out: dict[str, str] = {}
    for k, v in opts.items():
        name = k[len("kafka."):] if k.startswith("kafka.") else k
        if not is_security_key(name):
            continue
        if name in out and out[name] != v:
            raise OptionError(k, f"options '{name}' and 'kafka.{name}' are both given, with "
                              "different values")
        out[name] = v
    return out


def _security(opts: dict[str, str]) -> ClientSecurity:
    try:
        return ClientSecurity.from_mapping(_security_options(opts))
    except ConfigError as e:
        raise OptionError(e.key or "security.protocol", f"option {e.key!r}: {e}") from None


@dataclass(frozen=True)
class Subscription:
    """Exactly one of ``topics`` (``subscribe``), ``pattern`` (``subscribePattern``) or
    ``assign`` (``assign``: topic -> partitions)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict[str, list[int]] = field(default_factory=dict)

    @property
    def option(self) -> str:
        return "subscribe" if self.topics else "subscribePattern" if self.pattern else "assign"


@dataclass(frozen=True)
class ReadOptions:
    """A reader's options (batch or streaming); see the module docstring. Picklable: it travels
    to the executors inside the reader."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    # Per-partition bytes per Fetch (kafka.max.partition.fetch.bytes); bigger than a Kafka
    # consumer's 1 MiB default because a task reads one partition only and wants few round trips.
    max_partition_fetch_bytes: int
    # How long a task keeps trying to read its range without progress (leader changes, an
    # unreachable leader) before it fails: Spark's kafkaConsumer.pollTimeoutMs.
    poll_timeout_ms: int
    request_timeout_ms: int
    # How often the driver re-reads metadata to find new partitions (streaming).
    metadata_max_age_ms: int
    # How every connection gets past TLS and SASL (security.protocol, sasl.*, ssl.*).
    security: ClientSecurity = field(default_factory=ClientSecurity)


def _subscription(opts: Mapping[str, str]) -> Subscription:
    """The topics to read: exactly one of ``subscribe``, ``subscribePattern`` and ``assign``
    (keys of ``opts`` lower-cased)."""
    given = [name for name in ("subscribe", "subscribePattern", "assign")
             if opts.get(name.lower(), "").strip()]
    if len(given) != 1:
        both = " and ".join(repr(g) for g in given) if given else "none"
        raise OptionError(given[0] if given else "subscribe",
                          "exactly one of the options 'subscribe', 'subscribePattern' and "
                          f"'assign' must be given (got {both})")
    name = given[0]
    raw = opts[name.lower()].strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError(name, f"option 'subscribe' names no topic: {raw!r}")
        sub = Subscription(topics=topics)
    elif name == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(name, f"option 'subscribePattern': bad regular expression "
                              f"{raw!r} ({e})") from None
        sub = Subscription(pattern=raw)
    else:
        try:
            sub = Subscription(assign=parse_assign("assign", raw))
        except OffsetError as e:
            raise OptionError("assign", str(e)) from None
    return sub


def _check_batch_offsets(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Refuse what Spark refuses in a batch query: starting at latest, ending at earliest,
    or a partition ending before it starts."""
    if starting.kind == "latest":
        raise OptionError("startingOffsets", "option 'startingOffsets': 'latest' is not "
                          "allowed for batch queries")
    if ending.kind == "earliest":
        raise OptionError("endingOffsets", "option 'endingOffsets': 'earliest' is not "
                          "allowed for batch queries")
    if starting.kind == "specific" and -1 in starting.offsets.values():
        raise OptionError("startingOffsets", "option 'startingOffsets': -1 (latest) is not "
                          "allowed for batch queries")
    if ending.kind == "specific" and -2 in ending.offsets.values():
        raise OptionError("endingOffsets", "option 'endingOffsets': -2 (earliest) is not "
                          "allowed for batch queries")
    if starting.kind == "specific" and ending.kind == "specific":
        for tp, s in starting.offsets.items():
            e = ending.offsets.get(tp)
            if e is not None and s >= 0 and e >= 0 and e < s:
                raise OptionError("endingOffsets", f"option 'endingOffsets': {tp[0]}-{tp[1]} "
                                  f"ends at {e}, before its startingOffsets {s}")


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check ``options`` for a batch (``streaming=False``) or streaming reader."""
    opts = _lower(options)
    servers = _servers(opts)
    sub = _subscription(opts)
    try:
        starting = parse_offset_spec("startingOffsets", opts["startingoffsets"]) \
            if "startingoffsets" in opts else \
            (OffsetSpec.latest() if streaming else OffsetSpec.earliest())
    except OffsetError as e:
        raise OptionError("startingOffsets", str(e)) from None
    if "endingoffsets" in opts:
        if streaming:
            raise OptionError("endingOffsets", "option 'endingOffsets' is not valid in "
                              "streaming queries")
        try:
            ending = parse_offset_spec("endingOffsets", opts["endingoffsets"])
        except OffsetError as e:
            raise OptionError("endingOffsets", str(e)) from None
    else:
        ending = OffsetSpec.latest()
    if not streaming:
        _check_batch_offsets(starting, ending)
    max_trigger = _int(opts, "maxOffsetsPerTrigger", None)
    if max_trigger is not None and not streaming:
        max_trigger = None  # Spark ignores it for batch queries
    return ReadOptions(
        bootstrap_servers=servers,
        subscription=sub,
        starting=starting,
        ending=ending,
        min_partitions=_int(opts, "minPartitions", None),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=max_trigger,
        max_partition_fetch_bytes=_int(opts, "kafka.max.partition.fetch.bytes", 4 << 20) or 0,
        poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000) or 0,
        request_timeout_ms=_int(opts, "kafka.request.timeout.ms", 30_000) or 0,
        metadata_max_age_ms=_int(opts, "kafka.metadata.max.age.ms", 1_000, minimum=0) or 0,
        security=_security(opts),
    )


@dataclass(frozen=True)
class WriteOptions:
    """A writer's options: the bootstrap servers, the default ``topic`` (None: every row must
    carry one) and producer settings (``kafka.``-prefixed options, prefix removed;
    ``acks`` defaults to ``all``)."""

    bootstrap_servers: str
    topic: str | None
    producer: dict[str, str]


# Producer keys a writer task may not override: it owns the connection and the client id.
_FIXED = {"bootstrap.servers"}


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    servers = _servers(opts)
    topic = opts.get("topic", "").strip() or None
    producer = {"acks": "all", "client.id": "sluice-spark-writer"}
    for k, v in opts.items():
        if k.startswith("kafka.") and k[len("kafka."):] not in _FIXED:
            producer[k[len("kafka."):]] = v
    producer.update(_security_options(opts))  # the plain spelling too
    _security(opts)  # its errors name the option as given
    # Checked here, on the driver, so a bad key fails the query before any task starts.
    from consumer_client.producer_config import ProducerConfig
    try:
        ProducerConfig.from_kwargs({**producer, "bootstrap.servers": servers})
    except ConfigError as e:
        raise OptionError(f"kafka.{e.key}", f"option 'kafka.{e.key}': {e}") from None
    return WriteOptions(servers, topic, producer)
