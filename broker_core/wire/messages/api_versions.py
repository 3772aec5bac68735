"""ApiVersions (key 18), v0-3: the first request every client sends (KIP-35).

v3 is flexible and carries the client's software name and version; its response adds the feature
sections as tagged fields. The response header is always v0 (see :mod:`broker_core.wire.header`).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, INT64, STRING, Array, Field, Message, Schema

VERSIONS = "0-3"
FLEXIBLE = "3+"

REQUEST = Message("ApiVersionsRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("client_software_name", STRING, "3+", ignorable=True),
    Field("client_software_version", STRING, "3+", ignorable=True),
])

RESPONSE = Message("ApiVersionsResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("api_keys", Array(Schema("ApiVersion", [
        Field("api_key", INT16),
        Field("min_version", INT16),
        Field("max_version", INT16),
    ]))),
    Field("throttle_time_ms", INT32, "1+", ignorable=True),
    Field("supported_features", Array(Schema("SupportedFeatureKey", [
        Field("name", STRING, "3+"),
        Field("min_version", INT16, "3+"),
        Field("max_version", INT16, "3+"),
    ])), "3+", tag=0, ignorable=True),
    Field("finalized_features_epoch", INT64, "3+", tag=1, default=-1, ignorable=True),
    Field("finalized_features", Array(Schema("FinalizedFeatureKey", [
        Field("name", STRING, "3+"),
        Field("max_version_level", INT16, "3+"),
        Field("min_version_level", INT16, "3+"),
    ])), "3+", tag=2, ignorable=True),
    Field("zk_migration_ready", BOOL, "3+", tag=3, default=False, ignorable=True),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code), "api_keys": []}
