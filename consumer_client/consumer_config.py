"""The consumer's typed configuration, with the names Kafka's ZooKeeper consumer and the design use.

Build it with keyword arguments named like the attributes (``ConsumerConfig.create(
bootstrap_servers="h:9092", group_id="g", topics={"events": 2})``) or from Kafka keys
(``ConsumerConfig.from_mapping({"bootstrap.servers": ..., "group.id": ...})``). Every value is
checked once, here; a bad one raises :class:`~broker_core.config.parsing.ConfigError` naming
the key. ``docs/consumer.md`` lists every key.

The subscription is the design's *topic count*: ``topics`` maps a topic to its number of streams
(``pattern="static"``), or a regular expression to the number of streams shared by every topic
it matches (``pattern="white_list"``) or does not match (``pattern="black_list"``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_core.backoff import exponential_backoff
from broker_core.config.parsing import (
    INT_MAX,
    ConfigError,
    ConfigKey,
    boolean,
    integer,
    optional_text,
    parse_keys,
    text,
)
from consumer_client import security as client_security
from consumer_client.connection import parse_servers
from consumer_client.security import ClientSecurity

PATTERNS = ("static", "white_list", "black_list")
RESET_POLICIES = {"smallest": "earliest", "earliest": "earliest",
                  "largest": "latest", "latest": "latest"}


def _servers(key: str, raw: str) -> str:
    try:
        parse_servers(raw)
    except ValueError as e:
        raise ConfigError(f"invalid value {raw!r} for {key!r}: {e}", key) from None
    return raw.strip()


def _reset(key: str, raw: str) -> str:
    value = raw.strip().lower()
    if value not in RESET_POLICIES:
        raise ConfigError(f"invalid value {raw!r} for {key!r}: expected smallest, earliest, "
                          "largest or latest", key)
    return value


def _pattern(key: str, raw: str) -> str:
    value = raw.strip().lower().replace("whitelist", "white_list").replace(
        "blacklist", "black_list")
    if value not in PATTERNS:
        raise ConfigError(f"invalid value {raw!r} for {key!r}: expected one of "
                          f"{', '.join(PATTERNS)}", key)
    return value


def _topic_count(key: str, raw: str) -> dict[str, int]:
    """``{"topic": streams}`` as JSON, or ``topic:streams,topic2`` (one stream when omitted)."""
    value = raw.strip()
    out: dict[str, int] = {}
    if value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError as e:
            raise ConfigError(f"invalid value for {key!r}: not JSON ({e})", key) from None
        items = list(parsed.items())
    else:
        items = []
        for part in value.split(","):
            name, _, n = part.strip().partition(":")
            items.append((name.strip(), n.strip() or "1"))
    for name, n in items:
        try:
            count = int(n)
        except (TypeError, ValueError):
            count = 0
        if not name or count < 1 or count > 1024:
            raise ConfigError(f"invalid value {raw!r} for {key!r}: expected topic:streams "
                              "pairs with 1..1024 streams each", key)
        out[name] = count
    if not out:
        raise ConfigError(f"invalid value {raw!r} for {key!r}: no topic given", key)
    return out


#: Every consumer key: (Kafka name, attribute, parser, default text, required).
CONSUMER_KEYS: dict[str, ConfigKey] = {e[0]: ConfigKey(*e) for e in (
    ("bootstrap.servers", "bootstrap_servers", _servers, None, True),
    ("group.id", "group_id", text, None, True),
    ("consumer.id", "consumer_id", optional_text, None),
    ("client.id", "client_id", optional_text, None),
    # The topic count: {topic or regex: number of streams}.
    ("topics", "topics", _topic_count, None, True),
    ("topic.pattern", "pattern", _pattern, "static"),
    ("auto.commit.enable", "auto_commit", boolean, "true"),
    ("auto.offset.reset", "auto_offset_reset", _reset, "largest"),
    ("session.timeout.ms", "session_timeout_ms", integer(100, INT_MAX), "30000"),
    ("fetch.max.bytes", "fetch_max_bytes", integer(1024, INT_MAX), "52428800"),
    ("max.partition.fetch.bytes", "max_partition_fetch_bytes", integer(1024, INT_MAX),
     "1048576"),
    ("fetch.max.wait.ms", "fetch_max_wait_ms", integer(0, INT_MAX), "500"),
    ("fetch.min.bytes", "fetch_min_bytes", integer(1, INT_MAX), "1"),
    # Kafka's ZooKeeper consumer: chunks (one partition's data from one fetch) a stream may
    # hold before its partitions are not fetched any more (backpressure).
    ("queued.max.message.chunks", "queued_max_chunks", integer(1, INT_MAX), "4"),
    ("request.timeout.ms", "request_timeout_ms", integer(1, INT_MAX), "30000"),
    ("retry.backoff.ms", "retry_backoff_ms", integer(0, INT_MAX), "100"),
    ("reconnect.backoff.max.ms", "reconnect_backoff_max_ms", integer(0, INT_MAX), "2000"),
    # How long close() waits for the Ping that proves the final offsets arrived.
    ("shutdown.timeout.ms", "shutdown_timeout_ms", integer(0, INT_MAX), "30000"),
    # Failed fetch rounds of one partition (unknown topic, no leader, ...) before the consumer
    # gives up on it and reconnects to make the coordinator rebalance.
    ("fetch.max.partition.failures", "fetch_max_partition_failures", integer(1, INT_MAX),
     "50"),
    ("check.crcs", "check_crcs", boolean, "true"),
    # How long the consumer may stay unregistered (no broker reachable, no coordinator) or
    # subscribed to a topic that does not exist before poll()/get() raise it: a blip shorter
    # than this never reaches the application (Kafka's name for its consumer's API bound).
    ("default.api.timeout.ms", "default_api_timeout_ms", integer(1, INT_MAX), "60000"),
)}

_ALIASES = {"zookeeper.session.timeout.ms": "session.timeout.ms",
            "enable.auto.commit": "auto.commit.enable",
            "topic.count": "topics"}


@dataclass(frozen=True)
class ConsumerConfig:
    """A checked consumer configuration. Invariants: ``consumer_id`` is set (generated when not
    given: ``<group>_<host>-<pid>-<random>``, like Kafka's ZooKeeper consumer), ``topics`` is
    non-empty with 1..1024 streams each, and a white/black list pattern compiles."""

    bootstrap_servers: str
    group_id: str
    consumer_id: str
    client_id: str
    topics: dict[str, int]
    pattern: str
    auto_commit: bool
    auto_offset_reset: str
    session_timeout_ms: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    queued_max_chunks: int
    request_timeout_ms: int
    retry_backoff_ms: int
    reconnect_backoff_max_ms: int
    shutdown_timeout_ms: int
    fetch_max_partition_failures: int
    check_crcs: bool
    default_api_timeout_ms: int
    #: ``security.protocol``, ``sasl.*``, ``ssl.*`` (:mod:`consumer_client.security`).
    security: ClientSecurity = field(default_factory=ClientSecurity)
    _regex: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> ConsumerConfig:
        """Kafka keys -> values (text, numbers, bools; ``topics`` may also be a dict)."""
        values = {_ALIASES.get(k, k): v for k, v in values.items()}
        topics = values.get("topics")
        if isinstance(topics, Mapping):
            values = {**values, "topics": json.dumps(dict(topics))}
        elif isinstance(topics, list | tuple):
            values = {**values, "topics": ",".join(topics)}
        secure, values = client_security.split(values)
        security = ClientSecurity.from_mapping(secure)
        attrs = parse_keys(CONSUMER_KEYS, values, "consumer config")
        if attrs["consumer_id"] is None:
            attrs["consumer_id"] = (f"{attrs['group_id']}_{socket.gethostname()}-{os.getpid()}-"
                                    f"{uuid.uuid4().hex[:8]}")
        if attrs["client_id"] is None:
            attrs["client_id"] = attrs["consumer_id"]
        regex = None
        if attrs["pattern"] != "static":
            if len(attrs["topics"]) != 1:
                raise ConfigError("a white_list/black_list subscription takes exactly one "
                                  "regular expression in 'topics'", "topics")
            expr = next(iter(attrs["topics"]))
            try:
                regex = re.compile(expr)
            except re.error as e:
                raise ConfigError(f"invalid regular expression {expr!r} in 'topics': {e}",
                                  "topics") from None
        if attrs["max_partition_fetch_bytes"] > attrs["fetch_max_bytes"]:
            raise ConfigError(
                f"max.partition.fetch.bytes ({attrs['max_partition_fetch_bytes']}) is above "
                f"fetch.max.bytes ({attrs['fetch_max_bytes']})", "max.partition.fetch.bytes")
        return cls(**attrs, security=security, _regex=regex)

    @classmethod
    def create(cls, **kwargs: Any) -> ConsumerConfig:
        """Keyword form: attribute names (``group_id=...``) or Kafka names with ``_`` for ``.``."""
        by_attr = {k.attr: k.name for k in CONSUMER_KEYS.values()}
        values: dict[str, object] = {}
        for k, v in kwargs.items():
            name = by_attr.get(k, k.replace("_", "."))
            values[name] = v
        return cls.from_mapping(values)

    # -- derived ------------------------------------------------------------------------------

    @property
    def reset_to(self) -> str:
        """``earliest`` or ``latest``: where to start a partition with no committed offset."""
        return RESET_POLICIES[self.auto_offset_reset]

    def retry_wait_s(self, retry: int) -> float:
        """The wait in seconds before retry number ``retry`` (1 for the first) of a failed
        step: ``retry.backoff.ms`` doubling up to ``reconnect.backoff.max.ms`` (never below
        ``retry.backoff.ms``)."""
        return exponential_backoff(retry, self.retry_backoff_ms,
                                   max(self.reconnect_backoff_max_ms, self.retry_backoff_ms)
                                   ) / 1000.0

    def topic_count_json(self) -> str:
        """The RegisterConsumer ``topic_count`` (Kafka's ZooKeeper-consumer JSON)."""
        return json.dumps({"version": 1, "pattern": self.pattern, "subscription": self.topics},
                          sort_keys=True)

    def thread_ids(self, topic: str | None = None) -> list[str]:
        """Stream ("consumer thread") ids, ``<consumer_id>-<n>``; for a static subscription,
        those of ``topic``."""
        count = self.topics[topic] if topic is not None else next(iter(self.topics.values()))
        return [f"{self.consumer_id}-{n}" for n in range(count)]

    def matches(self, topic: str) -> bool:
        """Whether the subscription covers ``topic``."""
        if self.pattern == "static":
            return topic in self.topics
        hit = self._regex.fullmatch(topic) is not None
        return hit if self.pattern == "white_list" else not hit
