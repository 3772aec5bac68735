"""DescribeConfigs: the effective configuration of a topic or of this broker, as Kafka reports it.

:func:`describe_configs` turns a decoded request body into the response body; the request handler
only awaits it. It never raises for one bad resource: each resource gets its own error code and
a message a person can act on, and the others are still answered.

What it reports, Kafka's way (every value the store holds is read at the time of the request):

- **Topic** (resource type 2): every key of
  :data:`broker_core.config.topic_keys.TOPIC_CONFIG_KEYS`, in that order (name order), with
  its effective value: the topic's override in ``/config/topics/[topic]``
  (``DYNAMIC_TOPIC_CONFIG``), else its broker synonym's value from this broker's dynamic config
  (``DYNAMIC_BROKER_CONFIG``), the cluster-wide dynamic default (``DYNAMIC_DEFAULT_BROKER_CONFIG``),
  the broker's configuration (``STATIC_BROKER_CONFIG``) or the built-in default
  (``DEFAULT_CONFIG``). A stored override of a known key whose value the key's check refuses
  (written by another tool, or damaged) is what brokers ignore (``applied_topic_overrides``):
  it is logged and left out, and the next level is reported, as Kafka ignores an invalid
  override. Override keys Sluice does not know (written by another tool) are reported after the
  known ones, as ``DYNAMIC_TOPIC_CONFIG``. Topic configs are not read-only.
- **Broker** (resource type 4): the resource name must be this broker's id. Every key of
  :data:`broker_core.config.broker_config.BROKER_KEYS` with the same precedence (dynamic keys are
  :data:`broker_core.config_changes.DYNAMIC_BROKER_KEYS`; every other key is read-only). A key
  is ``STATIC_BROKER_CONFIG`` when its value differs from what a configuration setting only the
  required keys would give; an unset key has a null value. The per-listener overrides the
  configuration sets (``listener.name.<name>.ssl.*``) follow, read-only. An empty name is Kafka's
  "cluster-wide dynamic defaults" resource: the keys set in ``/config/brokers/<default>``.
  The dynamic levels report only what a broker applies: stored values
  :func:`broker_core.dynamic_config.effective_broker_config` ignores (not a dynamic key, or a
  value its parser refuses) are logged and left out, so a stored invalid value is never
  reported as in effect.
- The store is not trusted: an unreadable dynamic-config node (topic or broker) is logged and
  read as no configs (:func:`broker_core.config_changes.read_entity`), so the request answers.
- ``configuration_keys`` (null: all) filters the keys; requested keys that do not exist are left
  out, as Kafka does. Synonyms (v1+, when ``include_synonyms`` is set) list every level that has
  a value, most specific first, in Kafka's order: topic override, dynamic broker, dynamic
  default, static broker, default; a topic key's broker levels carry the synonym's name.
- ``config_type`` (v3+) is Kafka's type of the key; ``documentation`` (v3+, when
  ``include_documentation`` is set) is the topic key's description; a broker key's is its
  declaration's, except that a broker-level default of a topic key (the dynamic ones among them)
  carries that topic key's and a per-listener override the overridden key's, each said as such
  (:func:`broker_core.config.broker_config.broker_key_doc`). Every key has one. No Sluice key is
  sensitive, so no value is hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.config.broker_config import (
    BROKER_KEYS,
    BrokerConfig,
    broker_key_doc,
    required_keys,
)
from broker_core.config.parsing import LONG_MAX, config_type_of
from broker_core.config.topic_keys import TOPIC_CONFIG_KEYS, applied_topic_overrides
from broker_core.config_changes import DEFAULT_BROKER, DYNAMIC_BROKER_KEYS, read_entity
from broker_core.dynamic_config import effective_broker_config
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.describe_configs import ConfigSource, ConfigType, ResourceType

log = Logger(namespace="sluice.server")

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
    ``error_message`` and no configs. ``store`` is read, never written. The answer does not
    depend on ``version``: fields a version lacks are dropped by the encoder.
    ``refuse(resource)`` (the ACL check) gives the error a resource is answered with instead of
    its configs, or None to describe it.
    """
    del version
    levels: _BrokerLevels | None = None
    with_docs = bool(getattr(body, "include_documentation", False))
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
            if res.resource_type not in (ResourceType.TOPIC, ResourceType.BROKER):
                raise _ResourceError(ErrorCode.INVALID_REQUEST, _unsupported_type(res.resource_type))
            if levels is None:  # read once per request, and only when needed
                levels = await _BrokerLevels.read(store, broker_config, broker_id)
            if res.resource_type == ResourceType.TOPIC:
                entries = await _topic_entries(store, res.resource_name, levels)
            else:
                entries = _broker_entries(res.resource_name, broker_id, levels)
            result["configs"] = [_config(e, body.include_synonyms, with_docs)
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


# -- an entry ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    name: str
    value: str | None
    read_only: bool
    source: ConfigSource
    synonyms: list[dict[str, Any]]
    config_type: ConfigType
    doc: str | None = None


def _config(entry: _Entry, include_synonyms: bool, include_documentation: bool
            ) -> dict[str, Any]:
    return {"name": entry.name, "value": entry.value, "read_only": entry.read_only,
            "config_source": int(entry.source), "is_sensitive": False,
            "synonyms": entry.synonyms if include_synonyms else [],
            "config_type": int(entry.config_type),
            "documentation": entry.doc if include_documentation else None}


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict[str, Any]:
    return {"name": name, "value": value, "source": int(source)}


def _select(entries: list[_Entry], keys: Iterable[str] | None) -> list[_Entry]:
    if keys is None:
        return entries
    wanted = set(keys)
    return [e for e in entries if e.name in wanted]


def _unsupported_type(resource_type: int) -> str:
    try:
        name = ResourceType(resource_type).name
    except ValueError:
        name = str(resource_type)
    return (f"resource type {name} is not supported by DescribeConfigs here; "
            f"use TOPIC ({int(ResourceType.TOPIC)}) or BROKER ({int(ResourceType.BROKER)})")


def _effective(levels: list[tuple[ConfigSource, str, str | None]]
               ) -> tuple[str | None, ConfigSource, list[dict[str, Any]]]:
    """Value, source and synonyms from the levels that have a value, most specific first."""
    present = [(source, name, value) for source, name, value in levels if value is not None]
    synonyms = [_synonym(name, value, source) for source, name, value in present]
    if not present:
        return None, ConfigSource.DEFAULT_CONFIG, synonyms
    return present[0][2], present[0][0], synonyms


# -- broker -----------------------------------------------------------------------------------------


def _broker_values(cfg: BrokerConfig) -> dict[str, str | None]:
    """Every broker key's effective value as text; ``None`` for an unset key. The per-listener
    overrides (``listener.name.<name>.ssl.*``, not in the keys table) are there when set."""
    out: dict[str, str | None] = {}
    for name, value in cfg.as_properties().items():
        spec = BROKER_KEYS.get(name)
        out[name] = None if spec is not None and getattr(cfg, spec.attr) is None else value
    return out


def _in_effect(cfg: BrokerConfig, read: tuple[dict[str, str], int | None]) -> dict[str, str]:
    """The stored dynamic broker values a broker applies: those
    :func:`~broker_core.dynamic_config.effective_broker_config` keeps (a dynamic key whose value
    its parser accepts), so an invalid stored value is not reported as in effect; the rest is
    logged."""
    stored, _ = read
    _, ignored = effective_broker_config(cfg, stored)
    for key, why in ignored.items():
        log.warn("DescribeConfigs: stored dynamic broker config {key}={value!r} is not in "
                 "effect ({why})", key=key, value=stored[key], why=why)
    return {k: v for k, v in stored.items() if k not in ignored}


@dataclass(frozen=True)
class _BrokerLevels:
    """What each level gives a broker key: this broker's dynamic configs, the cluster-wide
    dynamic defaults, the configuration (keys it sets) and the built-in defaults."""

    own: Mapping[str, str]
    default: Mapping[str, str]
    static: Mapping[str, str | None]
    builtin: Mapping[str, str | None]

    @classmethod
    async def read(cls, store: Any, cfg: BrokerConfig, broker_id: int) -> _BrokerLevels:
        own = _in_effect(cfg, await read_entity(store, paths.broker_config(str(broker_id))))
        default = _in_effect(cfg, await read_entity(store, paths.broker_config(DEFAULT_BROKER)))
        props = cfg.as_properties()
        builtin = _broker_values(BrokerConfig.from_mapping(
            {k: props[k] for k in required_keys(cfg)}))
        ours = _broker_values(cfg)
        # The required keys, and every key whose value differs from its built-in default (so a
        # derived value such as log.retention.ms counts as set when log.retention.hours is).
        static = set(required_keys(cfg)) | {k for k in ours if ours[k] != builtin.get(k)}
        return cls(own, default, {k: ours[k] for k in static}, builtin)

    def of(self, key: str) -> list[tuple[ConfigSource, str, str | None]]:
        return [(ConfigSource.DYNAMIC_BROKER_CONFIG, key, self.own.get(key)),
                (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, key, self.default.get(key)),
                (ConfigSource.STATIC_BROKER_CONFIG, key, self.static.get(key)),
                (ConfigSource.DEFAULT_CONFIG, key, self.builtin.get(key))]


def _broker_entries(resource_name: str, broker_id: int, levels: _BrokerLevels) -> list[_Entry]:
    if resource_name == "":  # the cluster-wide dynamic defaults
        return [_Entry(k, v, False, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                       [_synonym(k, v, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)],
                       config_type_of(BROKER_KEYS[k].parse), broker_key_doc(k))
                for k, v in sorted(levels.default.items())]
    if resource_name != str(broker_id):
        raise _ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"this is broker {broker_id}, asked for the configuration of broker "
            f"{resource_name!r}; send DescribeConfigs for a broker to that broker")
    entries = []
    for key, spec in BROKER_KEYS.items():
        value, source, synonyms = _effective(levels.of(key))
        entries.append(_Entry(key, value, key not in DYNAMIC_BROKER_KEYS, source, synonyms,
                              config_type_of(spec.parse), broker_key_doc(key)))
    # The per-listener overrides (listener.name.<name>.ssl.*) are not in the keys table: set
    # in the configuration only, read-only.
    for key in sorted(set(levels.static) - set(BROKER_KEYS)):
        value = levels.static[key]
        entries.append(_Entry(key, value, True, ConfigSource.STATIC_BROKER_CONFIG,
                              [_synonym(key, value, ConfigSource.STATIC_BROKER_CONFIG)],
                              ConfigType.STRING, broker_key_doc(key)))
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
    # No node: no overrides; an unreadable one is logged and read as none (as brokers do).
    overrides, _ = await read_entity(store, paths.topic_config(name))
    return overrides


async def _topic_entries(store: Any, name: str, levels: _BrokerLevels) -> list[_Entry]:
    stored = await _topic_overrides(store, name)
    # What the brokers apply: a stored override the key's check refuses is ignored by them
    # (the next level applies, as in Kafka), so it is not reported as in effect either.
    overrides, ignored = applied_topic_overrides(stored)
    for key, why in ignored.items():
        log.warn("DescribeConfigs: topic {name} override {key}={value!r} is not in effect "
                 "({why})", name=name, key=key, value=stored[key], why=why)
    entries = []
    for key, spec in TOPIC_CONFIG_KEYS.items():
        topic_level = [(ConfigSource.DYNAMIC_TOPIC_CONFIG, key, overrides.get(key))]
        if spec.synonym in BROKER_KEYS:
            broker_levels = levels.of(spec.synonym)
            if broker_levels[-1][2] is None:  # unset flush interval: Kafka's "never"
                broker_levels[-1] = (ConfigSource.DEFAULT_CONFIG, spec.synonym, str(LONG_MAX))
        else:  # Sluice has no broker key for it: Kafka's default, under Kafka's name
            broker_levels = [(ConfigSource.DEFAULT_CONFIG, spec.synonym, spec.builtin)]
        value, source, synonyms = _effective(topic_level + broker_levels)
        entries.append(_Entry(key, value, False, source, synonyms, spec.config_type, spec.doc))
    for key in sorted(set(stored) - set(TOPIC_CONFIG_KEYS)):
        entries.append(_Entry(key, stored[key], False, ConfigSource.DYNAMIC_TOPIC_CONFIG,
                              [_synonym(key, stored[key], ConfigSource.DYNAMIC_TOPIC_CONFIG)],
                              ConfigType.UNKNOWN))
    return entries
