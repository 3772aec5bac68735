"""DescribeConfigs (key 32), v1-4 (v4+ flexible): the configuration of topics and brokers.

v0 is not served: it carries ``is_default`` instead of ``config_source`` (Kafka 4.0 dropped it
too), and every client Sluice is tested with speaks v1 (librdkafka asks for v0-1, kafka-python
3 for v1-4). ``config_source`` takes Kafka's ``ConfigSource`` numbers (see :class:`ConfigSource`);
``config_type`` (v3+) Kafka's ``ConfigDef.Type`` numbers, 0 meaning "unknown".
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from broker_core.wire.schema import BOOL, INT8, INT16, INT32, STRING, Array, Field, Message, Schema

VERSIONS = "1-4"
FLEXIBLE = "4+"


class ResourceType(IntEnum):
    """Kafka's ``ConfigResource.Type`` numbers as they travel in ``resource_type``."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigSource`` numbers (``config_source``, synonyms'
    ``source``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType(IntEnum):
    """Kafka's ``DescribeConfigsResponse.ConfigType`` numbers (``config_type``, v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


REQUEST = Message("DescribeConfigsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("resources", Array(Schema("DescribeConfigsResource", [
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        # null = every key of the resource.
        Field("configuration_keys", Array(STRING), nullable="0+"),
    ]))),
    Field("include_synonyms", BOOL, "1+"),
    Field("include_documentation", BOOL, "3+"),
])

RESPONSE = Message("DescribeConfigsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("throttle_time_ms", INT32),
    Field("results", Array(Schema("DescribeConfigsResult", [
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("resource_type", INT8),
        Field("resource_name", STRING),
        Field("configs", Array(Schema("DescribeConfigsResourceResult", [
            Field("name", STRING),
            Field("value", STRING, nullable="0+"),
            Field("read_only", BOOL),
            Field("config_source", INT8, "1+", default=-1, ignorable=True),
            Field("is_sensitive", BOOL),
            Field("synonyms", Array(Schema("DescribeConfigsSynonym", [
                Field("name", STRING, "1+"),
                Field("value", STRING, "1+", nullable="0+"),
                Field("source", INT8, "1+"),
            ])), "1+", ignorable=True),
            Field("config_type", INT8, "3+", ignorable=True),
            Field("documentation", STRING, "3+", nullable="0+", ignorable=True),
        ]))),
    ]))),
])


def error_body(version: int, request: Any, error_code: int) -> dict | None:
    if request is None:
        return None
    return {"results": [{"error_code": int(error_code), "resource_type": r.resource_type,
                         "resource_name": r.resource_name, "configs": []}
                        for r in request.resources]}
