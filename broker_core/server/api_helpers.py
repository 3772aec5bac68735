"""Small helpers the request-handling modules share: an error code from its name, the topics of
a request the connection may not act on, and the listener a request came on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker_core.server.authorization import RULES, Access
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

#: The error name a topic refused by an ACL is answered with.
TOPIC_DENIED = "TOPIC_AUTHORIZATION_FAILED"


def error_code(name: str | None) -> int:
    """The wire value of the error called ``name`` (None: no error, 0)."""
    return 0 if name is None else int(ErrorCode[name])


def denied_topics(access: Access, api: ApiKey, topics: Iterable[str]) -> frozenset[str]:
    """The topics of a request the connection may not act on as ``api`` requires."""
    if access.unrestricted:
        return frozenset()
    rule = RULES[api]
    return frozenset(t for t in set(topics) if not access.allows_topic(rule, t))


def listener_of(proto: Any) -> str | None:
    """The listener a request came on, from its connection or its
    :class:`~broker_core.server.authorization.Access` (None without either: the inter-broker
    view)."""
    security = getattr(proto, "security", None)
    return None if security is None else security.listener
