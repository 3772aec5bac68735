"""The consumer's errors and the snapshots it hands out (:class:`MemberInfo`, :class:`Health`).

Everything here is plain data: what :class:`~consumer_client.consumer.Consumer` raises to the
application and reports to its listeners. :mod:`consumer_client.consumer` re-exports every name,
which is where applications import them from.

Invariant: every error the consumer raises to a reader derives from :class:`ConsumerError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.wire.errors import ErrorCode
from consumer_client.membership import State

#: Registration errors that retrying (after finding the coordinator again) can fix.
RETRIABLE_REGISTRATION = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.NETWORK_EXCEPTION,
})


class ConsumerError(Exception):
    """Base of the consumer's own errors."""


class RegistrationRejected(ConsumerError):
    """The coordinator refused this consumer for a reason retrying cannot fix (a duplicate
    consumer id, a session timeout outside the broker's bounds, a bad topic count)."""

    def __init__(self, code: ErrorCode | int, message: str | None) -> None:
        detail = f": {message}" if message else ""
        name = code.name if isinstance(code, ErrorCode) else f"error {code}"
        super().__init__(f"the coordinator rejected the registration with {name}{detail}")
        self.code = code


class AuthenticationFailed(ConsumerError):
    """A broker refused this consumer's login (SASL_AUTHENTICATION_FAILED, an unsupported
    mechanism) or its TLS handshake (a certificate not signed by ``ssl.ca.location``): the same
    settings would be refused again, so the consumer fails instead of retrying. ``cause`` is
    the underlying error."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"authentication failed: {cause}")
        self.cause = cause


class ConsumerUnavailable(ConsumerError):
    """The consumer has not been registered with a coordinator for ``default.api.timeout.ms``:
    no bootstrap server answered, none named a coordinator, or the coordinator could not be
    reached or refused for a reason retrying may fix. ``servers`` are the bootstrap servers
    tried, ``reason`` the last failure. Not fatal: the consumer keeps retrying, and reading
    works again once it registers."""

    def __init__(self, group_id: str, servers: list[str], reason: str | None,
                 timeout_ms: int) -> None:
        self.group_id = group_id
        self.servers = servers
        self.reason = reason
        self.timeout_ms = timeout_ms
        super().__init__(
            f"could not join group {group_id!r} within default.api.timeout.ms={timeout_ms}: "
            f"{reason or 'no coordinator found'} (bootstrap servers tried: "
            f"{', '.join(servers)})")


class TopicNotFound(ConsumerError):
    """A subscribed topic has not existed for ``default.api.timeout.ms`` (the brokers answer
    UNKNOWN_TOPIC_OR_PARTITION): nothing of it can be assigned. Not fatal: once the topic is
    created the coordinator rebalances and its partitions are consumed."""

    def __init__(self, topics: list[str], timeout_ms: int) -> None:
        self.topics = topics
        self.timeout_ms = timeout_ms
        names = ", ".join(repr(t) for t in topics)
        noun = "topic" if len(topics) == 1 else "topics"
        verb = "does" if len(topics) == 1 else "do"
        super().__init__(f"{noun} {names} {verb} not exist (UNKNOWN_TOPIC_OR_PARTITION): not "
                         f"created within default.api.timeout.ms={timeout_ms}")


class NotRegistered(ConsumerError):
    """The operation needs a registered consumer (e.g. ``commit()`` before the coordinator
    was found)."""


class CommitFailed(ConsumerError):
    """CommitOffsets failed; ``errors`` maps each refused partition to its error name."""

    def __init__(self, message: str, errors: dict[tuple[str, int], str] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or {}


@dataclass(frozen=True)
class MemberInfo:
    """A snapshot of the member's state, for monitoring (aiokafka#1154: make it public).
    ``assignment`` maps each owned partition to its position (the offset the consumer would
    report now; -1 while unknown)."""

    group_id: str
    consumer_id: str
    state: State
    generation: int
    coordinator: tuple[int, str, int] | None
    assignment: dict[tuple[str, int], int]
    rebalances: int
    last_error: str | None


@dataclass(frozen=True)
class Health:
    """What stands between the consumer and its messages now.

    ``ok`` is True when the consumer is registered and no subscribed topic is known to be
    missing. ``reason`` says what is wrong (None when ok), ``missing_topics`` lists the
    subscribed topics the brokers say do not exist, and ``error`` is what reading raises: set
    once a problem has lasted ``default.api.timeout.ms`` (a :class:`ConsumerUnavailable` or
    :class:`TopicNotFound`, or the fatal :class:`RegistrationRejected`)."""

    ok: bool
    reason: str | None
    missing_topics: tuple[str, ...]
    error: ConsumerError | None


def known_code(code: int) -> ErrorCode | int:
    """``code`` as an :class:`ErrorCode`, or the bare int when this client does not know it."""
    try:
        return ErrorCode(code)
    except ValueError:
        return code
