"""Changes to dynamic configs as metadata-store writes: the one implementation behind
AlterConfigs / IncrementalAlterConfigs (:mod:`broker_core.server.config_admin`).

Where dynamic configs live (Kafka's layout, the same in both metadata modes):

- a topic's overrides in ``/config/topics/[topic]`` (the node CreateTopics writes);
- a broker's dynamic configs in ``/config/brokers/[id]``, the cluster-wide dynamic broker
  defaults in ``/config/brokers/<default>``; both ``{"version": 1, "config": {...}}``.

Every broker watches these nodes and applies a change while it runs (``broker_core.broker``).

What may change:

- topic keys: every key of :data:`broker_core.config.topic_keys.TOPIC_CONFIG_KEYS`, checked as
  CreateTopics checks them (:func:`broker_core.config.topic_keys.check_topic_value`);
- broker keys: only :data:`DYNAMIC_BROKER_KEYS`, the broker-level defaults of topic keys, which
  a running broker applies to its logs and produce checks at once. Any other broker key is
  read at start only (listeners, directories, security, the metadata store, timings of
  running services): setting one is refused with POLICY_VIOLATION naming the key.

:func:`apply_full` (AlterConfigs: the request's set replaces the stored one) and
:func:`apply_incremental` (SET, DELETE, APPEND, SUBTRACT) are pure; they raise
:class:`ConfigChangeError` with the error code and a message naming the key.
:func:`alter_entity` does the conditional read-modify-write. Invariant: a refused change writes
nothing; a change is written whole or not at all.

The nodes are not trusted (another tool may write them): :func:`read_entity` reads an
unreadable node as no configs, keeping its version, so AlterConfigs replaces it,
IncrementalAlterConfigs starts from nothing, and DescribeConfigs still answers; the operator can
always repair a node through the API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.config.broker_config import BROKER_KEYS
from broker_core.config.parsing import (
    INT_MAX,
    ConfigError,
    config_type_of,
    parse_decimal,
    unknown_key_message,
)
from broker_core.config.topic_keys import TOPIC_CONFIG_KEYS, check_topic_value
from broker_core.metadata import BadVersion, NodeExists, NoNode
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.describe_configs import ConfigType, ResourceType
from broker_core.wire.messages.incremental_alter_configs import OpType

log = Logger(namespace="sluice.config")

#: Broker keys AlterConfigs may change, per broker or cluster-wide: each is the broker-level
#: default of a topic key, applied by a running broker to the logs of topics without their own
#: override (and, for the last two, to produce checks and leader elections) at once.
DYNAMIC_BROKER_KEYS: tuple[str, ...] = (
    "log.retention.ms", "log.retention.bytes", "log.segment.bytes", "log.roll.ms",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.index.interval.bytes",
    "message.max.bytes", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "min.insync.replicas", "unclean.leader.election.enable",
)
#: The resource name of the cluster-wide dynamic broker defaults, and its node's name.
DEFAULT_BROKER = "<default>"
#: Most resources one request may name: each is a store read and write.
MAX_RESOURCES = 1000
#: How often a read-modify-write is tried when another admin writes the node in between.
MAX_WRITE_ATTEMPTS = 5


class ConfigChangeError(Exception):
    """A resource's change is refused: ``code`` and the message go into its result."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Change:
    """One entry of a request: ``op`` is SET for AlterConfigs."""

    name: str
    value: str | None
    op: int = OpType.SET


def _invalid(message: str) -> ConfigChangeError:
    return ConfigChangeError(ErrorCode.INVALID_CONFIG, message)


def _no_duplicates(changes: Iterable[Change]) -> None:
    seen: set[str] = set()
    for c in changes:
        if c.name in seen:
            raise ConfigChangeError(ErrorCode.INVALID_REQUEST,
                                    f"config key {c.name!r} is named twice in one resource")
        seen.add(c.name)


# -- checks per entity kind ------------------------------------------------------------------------


@dataclass(frozen=True)
class EntityKind:
    """How the keys of one kind of resource are checked."""

    check: Callable[[str, str], str]
    config_type: Callable[[str], ConfigType]


def _check_topic(key: str, value: str) -> str:
    try:
        return check_topic_value(key, value)
    except ConfigError as e:
        raise _invalid(str(e)) from None


def _check_broker(key: str, value: str) -> str:
    spec = BROKER_KEYS.get(key)
    if spec is None:
        raise _invalid(unknown_key_message(key, BROKER_KEYS, "broker config"))
    if key not in DYNAMIC_BROKER_KEYS:
        raise ConfigChangeError(
            ErrorCode.POLICY_VIOLATION,
            f"broker key {key!r} cannot change while the broker runs (it is read at start); "
            f"set it in the broker's configuration. Keys that can: "
            f"{', '.join(DYNAMIC_BROKER_KEYS)}")
    try:
        parsed = spec.parse(key, value)
    except ConfigError as e:
        raise _invalid(str(e)) from None
    if parsed is None:  # a "never" flush interval: stored as Kafka writes it
        return value.strip()
    return "true" if parsed is True else "false" if parsed is False else str(parsed)


TOPIC = EntityKind(_check_topic, lambda key: TOPIC_CONFIG_KEYS[key].config_type)
BROKER = EntityKind(_check_broker, lambda key: config_type_of(BROKER_KEYS[key].parse))


def apply_full(kind: EntityKind, changes: list[Change]) -> dict[str, str]:
    """AlterConfigs: the new stored set is exactly the request's (a null value: the key is
    left out, i.e. back to its default)."""
    _no_duplicates(changes)
    out: dict[str, str] = {}
    for c in changes:
        if c.value is not None:
            out[c.name] = kind.check(c.name, c.value)
        else:
            _known(kind, c.name)
    return out


def _known(kind: EntityKind, key: str) -> None:
    """Refuses a key the kind does not know (removing one is a change too)."""
    if kind is TOPIC and key not in TOPIC_CONFIG_KEYS:
        _check_topic(key, "")
    if kind is BROKER and key not in DYNAMIC_BROKER_KEYS:
        _check_broker(key, "")


def apply_incremental(kind: EntityKind, current: Mapping[str, str], changes: list[Change], *,
                      defaults: Mapping[str, str]) -> dict[str, str]:
    """IncrementalAlterConfigs on ``current`` (the stored set); ``defaults`` gives a list key's
    value when it has no override (APPEND/SUBTRACT start from it, as Kafka's do)."""
    _no_duplicates(changes)
    out = dict(current)
    for c in changes:
        try:
            op = OpType(c.op)
        except ValueError:
            raise ConfigChangeError(ErrorCode.INVALID_REQUEST,
                                    f"unknown config operation {c.op} for {c.name!r} "
                                    "(0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)") from None
        if op is OpType.DELETE and c.name in out:
            del out[c.name]  # even a key Sluice does not know (written by another tool)
            continue
        _known(kind, c.name)
        if op is OpType.DELETE:
            continue
        if c.value is None:
            raise _invalid(f"{op.name} of {c.name!r} needs a value")
        if op is OpType.SET:
            out[c.name] = kind.check(c.name, c.value)
            continue
        if kind.config_type(c.name) is not ConfigType.LIST:
            raise _invalid(f"{op.name} applies to list-typed keys only; {c.name!r} is "
                           f"{kind.config_type(c.name).name}")
        items = [v.strip() for v in out.get(c.name, defaults.get(c.name, "")).split(",")
                 if v.strip()]
        given = [v.strip() for v in c.value.split(",") if v.strip()]
        if op is OpType.APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        out[c.name] = kind.check(c.name, ",".join(items))
    return out


# -- the store -------------------------------------------------------------------------------------


def entity_path(resource_type: int, name: str) -> str:
    """The node of a resource's dynamic configs; ConfigChangeError for a bad name or type."""
    if resource_type == ResourceType.TOPIC:
        try:
            paths.validate_topic_name(name)
        except ValueError as e:
            raise ConfigChangeError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)) from None
        return paths.topic_config(name)
    if resource_type == ResourceType.BROKER:
        if name in ("", DEFAULT_BROKER):
            return paths.broker_config(DEFAULT_BROKER)
        broker_id = parse_decimal(name)
        if broker_id is None or broker_id > INT_MAX:
            raise ConfigChangeError(ErrorCode.INVALID_REQUEST,
                                    f"broker resource name {name!r} is not a broker id (or "
                                    "empty, for the cluster-wide defaults)")
        return paths.broker_config(str(broker_id))
    raise ConfigChangeError(ErrorCode.INVALID_REQUEST,
                            f"resource type {resource_type} cannot be altered here; use TOPIC "
                            f"({int(ResourceType.TOPIC)}) or BROKER ({int(ResourceType.BROKER)})")


async def read_entity(store: Any, path: str) -> tuple[dict[str, str], int | None]:
    """A node's configs and version (None: no node). An unreadable node (not the JSON of
    :class:`~broker_core.metadata_paths.TopicConfig`) is logged and read as ``{}`` with its version,
    so a conditional write replaces it rather than failing on it."""
    try:
        data, stat = await store.get(path)
    except NoNode:
        return {}, None
    try:
        return dict(paths.TopicConfig.from_bytes(data).config), stat.version
    except ValueError as e:
        log.warn("{path} is unreadable; taken as no configs: {e}", path=path, e=e)
        return {}, stat.version


async def alter_entity(store: Any, resource_type: int, name: str,
                       change: Callable[[dict[str, str]], dict[str, str]], *,
                       validate_only: bool = False) -> dict[str, str]:
    """Read the resource's stored configs, compute ``change(stored)`` (which raises
    ConfigChangeError to refuse) and write it conditionally on the version read; returns the
    new set. A topic must exist (UNKNOWN_TOPIC_OR_PARTITION). With ``validate_only`` nothing
    is written."""
    path = entity_path(resource_type, name)
    if resource_type == ResourceType.TOPIC and await store.exists(paths.topic(name)) is None:
        raise ConfigChangeError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"topic {name!r} does not exist")
    for _ in range(MAX_WRITE_ATTEMPTS):
        current, version = await read_entity(store, path)
        new = change(current)
        if validate_only:
            return new
        value = paths.TopicConfig(new).to_bytes()
        try:
            if version is None:
                await store.create(path, value, makepath=True)
            else:
                await store.set(path, value, version)
        except (BadVersion, NodeExists, NoNode):
            continue  # another admin wrote it in between: read again
        return new
    raise ConfigChangeError(ErrorCode.UNKNOWN_SERVER_ERROR,
                            f"{path} kept changing while it was altered; try again")
