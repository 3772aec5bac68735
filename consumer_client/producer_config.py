"""The producer's configuration: Kafka's producer keys, typed and checked once.

Built with the broker's config machinery (:mod:`broker_core.config.parsing`): an unknown key, a
missing ``bootstrap.servers`` or a bad value raises
:class:`~broker_core.config.parsing.ConfigError` naming the key. Defaults are Kafka's (4.x)
where Sluice has the setting; ``docs/producer.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_core.config.parsing import (
    INT_MAX,
    ConfigError,
    ConfigKey,
    boolean,
    integer,
    parse_keys,
    text,
)
from broker_core.wire.records import Compression
from consumer_client import security as client_security
from consumer_client.partitioner import DefaultPartitioner, IPartitioner
from consumer_client.security import ClientSecurity


def acks(key: str, raw: str) -> int:
    """``all`` / ``-1``, ``1`` or ``0`` (Kafka's spellings) -> -1, 1 or 0."""
    value = raw.strip().lower()
    if value in ("all", "-1"):
        return -1
    if value in ("0", "1"):
        return int(value)
    raise ConfigError(f"invalid value {raw!r} for {key!r}: expected all, -1, 0 or 1", key)


def compression(key: str, raw: str) -> Compression:
    value = raw.strip().lower()
    try:
        return Compression[value.upper()]
    except KeyError:
        raise ConfigError(f"invalid value {raw!r} for {key!r}: expected none, gzip, snappy, "
                          "lz4 or zstd", key) from None


def _keys(*entries: tuple[Any, ...]) -> dict[str, ConfigKey]:
    return {e[0]: ConfigKey(*e) for e in entries}


#: Every producer key: (Kafka name, attribute, parser, default text, required).
PRODUCER_KEYS: dict[str, ConfigKey] = _keys(
    ("bootstrap.servers", "bootstrap_servers", text, None, True),
    ("client.id", "client_id", text, "sluice-producer"),
    ("acks", "acks", acks, "all"),
    ("batch.size", "batch_size", integer(1, INT_MAX), "16384"),
    # Kafka 4.0 moved the default from 0 to 5 ms (KIP-1030): a little waiting buys much fuller
    # batches, which for a Python producer is most of the throughput.
    ("linger.ms", "linger_ms", integer(0, INT_MAX), "5"),
    ("buffer.memory", "buffer_memory", integer(1), "33554432"),
    ("max.request.size", "max_request_size", integer(1, INT_MAX), "1048576"),
    ("compression.type", "compression_type", compression, "none"),
    ("retries", "retries", integer(0, INT_MAX), str(INT_MAX)),
    ("retry.backoff.ms", "retry_backoff_ms", integer(0), "100"),
    ("request.timeout.ms", "request_timeout_ms", integer(1, INT_MAX), "30000"),
    ("delivery.timeout.ms", "delivery_timeout_ms", integer(1, INT_MAX), "120000"),
    ("max.block.ms", "max_block_ms", integer(0), "60000"),
    ("metadata.max.age.ms", "metadata_max_age_ms", integer(0), "300000"),
    ("max.in.flight.requests.per.connection", "max_in_flight_requests_per_connection",
     integer(1, INT_MAX), "5"),
    # Off by default (Kafka's default is on): this producer's retries stay at least once unless
    # asked (docs/producer.md, Idempotence). Needs acks=all.
    ("enable.idempotence", "enable_idempotence", boolean, "false"),
)


@dataclass(frozen=True)
class ProducerConfig:
    """A producer's configuration: one typed attribute per Kafka key (dots as underscores).

    Invariants (checked by :meth:`from_mapping`): ``delivery.timeout.ms >= linger.ms +
    request.timeout.ms`` (Kafka's rule: a batch must get at least one full attempt), and
    ``partitioner`` provides :class:`IPartitioner`.
    """

    bootstrap_servers: str
    client_id: str
    acks: int
    batch_size: int
    linger_ms: int
    buffer_memory: int
    max_request_size: int
    compression_type: Compression
    retries: int
    retry_backoff_ms: int
    request_timeout_ms: int
    delivery_timeout_ms: int
    max_block_ms: int
    metadata_max_age_ms: int
    max_in_flight_requests_per_connection: int
    enable_idempotence: bool = False
    partitioner: Any = None
    #: ``security.protocol``, ``sasl.*``, ``ssl.*`` (:mod:`consumer_client.security`).
    security: ClientSecurity = field(default_factory=ClientSecurity)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> ProducerConfig:
        """Build from Kafka keys (``{"bootstrap.servers": "h:9092", "acks": "all"}``); the key
        ``partitioner`` may hold an :class:`IPartitioner` provider. Raises ConfigError."""
        values = dict(values)
        partitioner = values.pop("partitioner", None)
        secure, values = client_security.split(values)
        security = ClientSecurity.from_mapping(secure)
        attrs = parse_keys(PRODUCER_KEYS, values, kind="producer config")
        if partitioner is None:
            partitioner = DefaultPartitioner()
        elif not IPartitioner.providedBy(partitioner):
            raise ConfigError(f"invalid value {partitioner!r} for 'partitioner': expected an "
                              "object providing IPartitioner", "partitioner")
        floor = attrs["linger_ms"] + attrs["request_timeout_ms"]
        if attrs["delivery_timeout_ms"] < floor:
            raise ConfigError(
                f"delivery.timeout.ms ({attrs['delivery_timeout_ms']}) must be at least "
                f"linger.ms + request.timeout.ms ({floor})", "delivery.timeout.ms")
        if attrs["enable_idempotence"] and attrs["acks"] != -1:
            raise ConfigError("enable.idempotence needs acks=all: a batch acknowledged by the "
                              "leader alone may be lost in a failover, and its retry would "
                              "then be out of sequence", "acks")
        return cls(partitioner=partitioner, security=security, **attrs)

    @classmethod
    def from_kwargs(cls, config: Mapping[str, object] | None = None,
                    **kwargs: object) -> ProducerConfig:
        """``config`` (Kafka keys) plus keyword arguments with underscores
        (``linger_ms=10``), the latter winning."""
        values = dict(config or {})
        for k, v in kwargs.items():
            values[k if k == "partitioner" else k.replace("_", ".")] = v
        return cls.from_mapping(values)
