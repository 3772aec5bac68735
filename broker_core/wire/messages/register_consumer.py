"""RegisterConsumer (Sluice key 1001): a consumer joins its group at the coordinator.

After a successful response the connection is the *coordinator channel* (docs/design.md): from then
on the coordinator sends Ping / StopFetcher / StartFetcher requests on it and the consumer only
answers. On an error the coordinator leaves the connection open (the consumer closes it).

``topic_count`` is the JSON Kafka's ZooKeeper consumer registered, e.g.
``{"version": 1, "pattern": "static", "subscription": {"events": 2}}`` (two streams of topic
``events``) or ``{"version": 1, "pattern": "white_list", "subscription": {"events-.*": 1}}``;
``auto_offset_reset`` is ``smallest``/``earliest`` or ``largest``/``latest``.

Version 1 adds ``session_id`` to the response: a random number the coordinator draws for this
registration. The member proves with it that an UnregisterConsumer (key 1008, its leave) comes
from this registration and not from another client naming its consumer id; it is never shown
to anyone else (DescribeConsumerGroups leaves it out).
"""

from __future__ import annotations

from typing import Any

from broker_core.wire.schema import BOOL, INT16, INT32, INT64, STRING, Field, Message

VERSIONS = "0-1"
FLEXIBLE = "0+"

REQUEST = Message("RegisterConsumerRequest", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("group_id", STRING),
    Field("consumer_id", STRING),
    Field("topic_count", STRING),
    Field("auto_commit", BOOL, default=True),
    Field("auto_offset_reset", STRING, default="largest"),
    Field("session_timeout_ms", INT32, default=30000),
])

RESPONSE = Message("RegisterConsumerResponse", versions=VERSIONS, flexible=FLEXIBLE, fields=[
    Field("error_code", INT16),
    Field("error_message", STRING, nullable="0+"),
    # 0 when the registration failed; ignorable so a v0 answer simply leaves it out.
    Field("session_id", INT64, versions="1+", ignorable=True),
])


def error_body(version: int, request: Any, error_code: int) -> dict:
    return {"error_code": int(error_code)}
