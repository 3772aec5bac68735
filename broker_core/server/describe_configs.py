"""DescribeConfigs: the effective configuration of a topic or of this broker, as Kafka reports it.

:func:`describe_configs` turns a decoded request body into the response body; the request handler
only awaits it. It never raises for one bad resource: each resource gets its own error code and
a message a person can act on, and the others are still answered.

What it reports, Kafka's way:

- **Topic** (resource type 2): every key of :data:`broker_core.config.TOPIC_CONFIG_KEYS`, in that
  order, with its effective value. A key with an override in ``/config/topics/[topic]`` is
  ``DYNAMIC_TOPIC_CONFIG`` with the override's value; any other key takes the broker's value of
  its broker-level synonym (:func:`broker_core.config.topic_defaults`) and that synonym's source:
  ``STATIC_BROKER_CONFIG`` when the broker's configuration sets it, else ``DEFAULT_CONFIG``.
  Override keys Sluice does not know (written by another tool) are reported after the known ones,
  as ``DYNAMIC_TOPIC_CONFIG``, so a client sees everything ``sluice --zookeeper`` would show.
  Topic configs are not read-only (Kafka's answer; Sluice has no AlterConfigs yet).
- **Broker** (resource type 4): the resource name must be this broker's id. Every key of
  :data:`broker_core.config.BROKER_KEYS`, read-only, ``STATIC_BROKER_CONFIG`` when its value
  differs from what a configuration setting only the required keys would give, else
  ``DEFAULT_CONFIG``; an unset key has a null value. An empty name is Kafka's "cluster-wide dynamic
  defaults" resource, which is always empty here (Sluice has no dynamic broker configs).
- ``configuration_keys`` (null: all) filters the keys; requested keys that do not exist are left
  out, as Kafka does. Synonyms are listed only when ``include_synonyms`` is set, most specific
  first: the topic override, the broker's own setting, the built-in default (for a broker key:
  its setting, then its built-in default). Nothing is sensitive; there is no documentation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from twisted.logger import Logger

from broker_core.config import (
    BROKER_KEYS,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    required_keys,
    topic_defaults,
)
from broker_core.metadata import NoNode
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.describe_configs import ConfigSource, ResourceType
from broker_core.zk import paths

log = Logger(namespace="sluice.server")

#: The broker key whose value a topic without an override gets, per topic key (Kafka's
#: ``LogConfig`` synonyms). ``cleanup.policy`` has none in Sluice: only ``delete`` exists.
TOPIC_KEY_SYNONYMS: dict[str, str | None] = {
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "cleanup.policy": None,
    "index.interval.bytes": "log.index.interval.bytes",
}


class _ResourceError(Exception):
    """One resource cannot be described: ``code`` and the message go into its result."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def describe_configs(body: Any, *, version: int, store: Any, broker_config: BrokerConfig,
                           broker_id: int, refuse: Callable[[Any], ErrorCode | None] | None = None
                           ) -> dict[str, Any]:
    """The DescribeConfigs response body for ``body`` (a decoded request, v1+).

    Invariant: one result per requested resource, in request order, each echoing the request's
    ``resource_type`` and ``resource_name``; a result with a non-zero ``error_code`` has an
    ``error_message`` and no configs. ``store`` is read, never written. ``version`` is the
    request's version; the answer does not depend on it, since every field filled here exists
    from v1, the lowest served (``config_type``/``documentation``, v3+, stay at their defaults).
    ``refuse(resource)`` (the ACL check) gives the error a resource is answered with instead of
    its configs, or None to describe it.
    """
    del version
    builtin = _builtin_broker_values(broker_config)
    static = _statically_set(broker_config, builtin)
    results = []
    for res in body.resources:
        result: dict[str, Any] = {"error_code": 0, "error_message": None,
                                  "resource_type": res.resource_type,
                                  "resource_name": res.resource_name, "configs": []}
        denied = None if refuse is None else refuse(res)
        if denied is not None:
            result["error_code"] = int(denied)
            result["error_message"] = "DESCRIBE_CONFIGS on this resource is not allowed"
            results.append(result)
            continue
        try:
            if res.resource_type == ResourceType.TOPIC:
                entries = await _topic_entries(store, res.resource_name, broker_config, static,
                                              builtin)
            elif res.resource_type == ResourceType.BROKER:
                entries = _broker_entries(res.resource_name, broker_config, broker_id, static,
                                          builtin)
            else:
                raise _ResourceError(ErrorCode.INVALID_REQUEST, _unsupported_type(res.resource_type))
            result["configs"] = [_config(e, body.include_synonyms)
                                 for e in _select(entries, res.configuration_keys)]
        except _ResourceError as e:
            result["error_code"], result["error_message"] = int(e.code), str(e)
        except Exception as e:  # e.g. ZooKeeper unreachable: this resource fails, not the request
            log.failure("DescribeConfigs {type} {name!r} failed", type=res.resource_type,
                        name=res.resource_name)
            result["error_code"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
            result["error_message"] = f"could not describe the configuration of " \
                                      f"{res.resource_name!r}: {e}"
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


# -- an entry: (name, value, read_only, source, synonyms) ------------------------------------------

_Entry = tuple[str, str | None, bool, ConfigSource, list[dict[str, Any]]]


def _config(entry: _Entry, include_synonyms: bool) -> dict[str, Any]:
    name, value, read_only, source, synonyms = entry
    return {"name": name, "value": value, "read_only": read_only, "config_source": int(source),
            "is_sensitive": False, "synonyms": synonyms if include_synonyms else []}


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict[str, Any]:
    return {"name": name, "value": value, "source": int(source)}


def _select(entries: list[_Entry], keys: Iterable[str] | None) -> list[_Entry]:
    if keys is None:
        return entries
    wanted = set(keys)
    return [e for e in entries if e[0] in wanted]


def _unsupported_type(resource_type: int) -> str:
    try:
        name = ResourceType(resource_type).name
    except ValueError:
        name = str(resource_type)
    return (f"resource type {name} is not supported by DescribeConfigs here; "
            f"use TOPIC ({int(ResourceType.TOPIC)}) or BROKER ({int(ResourceType.BROKER)})")


# -- broker -----------------------------------------------------------------------------------------


def _broker_values(cfg: BrokerConfig) -> dict[str, str | None]:
    """Every broker key's effective value as text; ``None`` for an unset key. The per-listener
    overrides (``listener.name.<name>.ssl.*``, not in the keys table) are there when set."""
    out: dict[str, str | None] = {}
    for name, value in cfg.as_properties().items():
        spec = BROKER_KEYS.get(name)
        out[name] = None if spec is not None and getattr(cfg, spec.attr) is None else value
    return out


def _builtin_broker_values(cfg: BrokerConfig) -> dict[str, str | None]:
    """The values a broker configured with only ``cfg``'s required keys has: Sluice's built-in
    defaults (derived ones included, e.g. ``log.retention.ms`` from ``log.retention.hours``)."""
    props = cfg.as_properties()
    return _broker_values(BrokerConfig.from_mapping({k: props[k] for k in required_keys(cfg)}))


def _statically_set(cfg: BrokerConfig, builtin: Mapping[str, str | None]) -> set[str]:
    """The broker keys whose effective value comes from the broker's configuration: the required
    keys, and every key whose value differs from its built-in default (so a derived value such
    as ``log.retention.ms`` counts as set when ``log.retention.hours`` is)."""
    ours = _broker_values(cfg)
    return set(required_keys(cfg)) | {k for k in ours if ours[k] != builtin.get(k)}


def _broker_source(name: str, static: set[str]) -> ConfigSource:
    return ConfigSource.STATIC_BROKER_CONFIG if name in static else ConfigSource.DEFAULT_CONFIG


def _broker_entries(resource_name: str, cfg: BrokerConfig, broker_id: int, static: set[str],
                    builtin: Mapping[str, str | None]) -> list[_Entry]:
    if resource_name == "":
        return []  # the cluster-wide dynamic defaults: none in Sluice
    if resource_name != str(broker_id):
        raise _ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"this is broker {broker_id}, asked for the configuration of broker "
            f"{resource_name!r}; send DescribeConfigs for a broker to that broker")
    entries: list[_Entry] = []
    for name, value in _broker_values(cfg).items():
        source = _broker_source(name, static)
        synonyms = [] if value is None else [_synonym(name, value, source)]
        default = builtin.get(name)  # none for a per-listener override
        if source == ConfigSource.STATIC_BROKER_CONFIG and default is not None:
            synonyms.append(_synonym(name, default, ConfigSource.DEFAULT_CONFIG))
        entries.append((name, value, True, source, synonyms))
    return entries


# -- topic ------------------------------------------------------------------------------------------


async def _topic_overrides(store: Any, name: str) -> Mapping[str, str]:
    try:
        paths.validate_topic_name(name)
    except ValueError as e:
        raise _ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)) from None
    if await store.exists(paths.topic(name)) is None:
        raise _ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"topic {name!r} does not exist")
    try:
        data, _ = await store.get(paths.topic_config(name))
    except NoNode:
        return {}  # a topic created without a config node has no overrides
    return paths.TopicConfig.from_bytes(data).config


async def _topic_entries(store: Any, name: str, cfg: BrokerConfig, static: set[str],
                         bare: Mapping[str, str | None]) -> list[_Entry]:
    overrides = await _topic_overrides(store, name)
    defaults = topic_defaults(cfg)
    broker_values = _broker_values(cfg)
    entries: list[_Entry] = []
    for key in TOPIC_CONFIG_KEYS:
        broker_key = TOPIC_KEY_SYNONYMS.get(key)
        # Most specific first, as Kafka lists them: the override, the broker's setting, the
        # built-in default.
        synonyms = []
        if key in overrides:
            synonyms.append(_synonym(key, overrides[key], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if broker_key is not None and broker_key in static:
            synonyms.append(_synonym(broker_key, broker_values[broker_key],
                                     ConfigSource.STATIC_BROKER_CONFIG))
        builtin = bare.get(broker_key) if broker_key is not None else _BUILTIN.get(key)
        if builtin is not None:
            synonyms.append(_synonym(broker_key or key, builtin, ConfigSource.DEFAULT_CONFIG))
        if key in overrides:
            value, source = overrides[key], ConfigSource.DYNAMIC_TOPIC_CONFIG
        else:
            value = defaults[key]
            source = (ConfigSource.STATIC_BROKER_CONFIG if broker_key in static
                      else ConfigSource.DEFAULT_CONFIG)
        entries.append((key, value, False, source, synonyms))
    for key in sorted(set(overrides) - set(TOPIC_CONFIG_KEYS)):
        entries.append((key, overrides[key], False, ConfigSource.DYNAMIC_TOPIC_CONFIG,
                        [_synonym(key, overrides[key], ConfigSource.DYNAMIC_TOPIC_CONFIG)]))
    return entries


#: Built-in defaults of topic keys that have no broker-level synonym in Sluice.
_BUILTIN: dict[str, str] = {"cleanup.policy": "delete"}
