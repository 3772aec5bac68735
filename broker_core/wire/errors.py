"""Kafka's error codes and the exceptions the codec raises.

Two families live here and must not be confused:

- :class:`ErrorCode` values travel *on the wire* inside response bodies. They are Kafka's numbers
  and names (``org.apache.kafka.common.protocol.Errors``), so any Kafka client understands them.
- :class:`ProtocolError` and its subclasses are *Python exceptions* raised by the codec. Anything
  wrong with bytes received from a peer is a :class:`ProtocolError` subclass, never an
  ``IndexError``/``struct.error``/``UnicodeDecodeError``: callers catch one type and decide whether
  to answer (``UnknownApiKey``/``UnsupportedVersion`` carry the request header for that) or to
  drop the connection.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ErrorCode(IntEnum):
    """Kafka's error codes (-1..127), with Kafka's names, and Sluice's own from 1000 up.

    ``code.retriable`` says whether a Kafka client retries the request on its own;
    ``code.description`` is a one-line explanation a person can act on.
    """

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    # Sluice-only codes, from 1000 up, used only by Sluice's own APIs (keys 1000 up), where no
    # Kafka code says the same thing.
    DUPLICATE_CONSUMER_ID = 1000
    INVALID_TOPIC_COUNT = 1001

    @property
    def retriable(self) -> bool:
        """True when a Kafka client treats the error as transient and retries by itself."""
        return self in _RETRIABLE

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self]


# Kafka's retriable exceptions (those extending RetriableException, including the
# InvalidMetadataException family that makes a client refresh metadata before retrying).
_RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.LISTENER_NOT_FOUND,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ErrorCode.ELECTION_NOT_NEEDED,
    ErrorCode.UNSTABLE_OFFSET_COMMIT,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    ErrorCode.SHARE_SESSION_NOT_FOUND,
    ErrorCode.INVALID_SHARE_SESSION_EPOCH,
})

_E = ErrorCode
DESCRIPTIONS: dict[ErrorCode, str] = {
    _E.UNKNOWN_SERVER_ERROR: "The server hit an unexpected error while handling the request.",
    _E.NONE: "No error.",
    _E.OFFSET_OUT_OF_RANGE: "The requested offset is outside the range kept by the partition.",
    _E.CORRUPT_MESSAGE: "A record batch failed its CRC check, is truncated or otherwise corrupt.",
    _E.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host the topic or partition.",
    _E.INVALID_FETCH_SIZE: "The requested fetch size is invalid.",
    _E.LEADER_NOT_AVAILABLE: "The partition has no leader right now (election in progress).",
    _E.NOT_LEADER_OR_FOLLOWER: "This broker is not the leader (or a replica) of the partition.",
    _E.REQUEST_TIMED_OUT: "The request timed out before it could be completed.",
    _E.BROKER_NOT_AVAILABLE: "The broker is not available.",
    _E.REPLICA_NOT_AVAILABLE: "The replica is not available for the requested partition.",
    _E.MESSAGE_TOO_LARGE: "The record batch is larger than the maximum the server accepts.",
    _E.STALE_CONTROLLER_EPOCH: "The request came from a controller with an old epoch.",
    _E.OFFSET_METADATA_TOO_LARGE: "The metadata attached to the committed offset is too large.",
    _E.NETWORK_EXCEPTION: "The server disconnected before a response was received.",
    _E.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is still loading its state.",
    _E.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    _E.NOT_COORDINATOR: "This server is not the coordinator for the group or transaction.",
    _E.INVALID_TOPIC_EXCEPTION: "The topic name is invalid or the topic may not be used so.",
    _E.RECORD_LIST_TOO_LARGE: "The request's record data exceeds the configured segment size.",
    _E.NOT_ENOUGH_REPLICAS: "Fewer in-sync replicas than min.insync.replicas; not appended.",
    _E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "Appended, but fewer in-sync replicas than required.",
    _E.INVALID_REQUIRED_ACKS: "acks must be -1 (all), 0 or 1.",
    _E.ILLEGAL_GENERATION: "The group generation id is not the current one.",
    _E.INCONSISTENT_GROUP_PROTOCOL: "The member's protocol type or protocols do not match.",
    _E.INVALID_GROUP_ID: "The group id is invalid.",
    _E.UNKNOWN_MEMBER_ID: "The coordinator does not know this member id.",
    _E.INVALID_SESSION_TIMEOUT: "The session timeout is outside the range the broker allows.",
    _E.REBALANCE_IN_PROGRESS: "The group is rebalancing; rejoin it.",
    _E.INVALID_COMMIT_OFFSET_SIZE: "The committed offset data is too large.",
    _E.TOPIC_AUTHORIZATION_FAILED: "Not authorized to access the topic.",
    _E.GROUP_AUTHORIZATION_FAILED: "Not authorized to access the group.",
    _E.CLUSTER_AUTHORIZATION_FAILED: "Not authorized for this cluster operation.",
    _E.INVALID_TIMESTAMP: "A record's timestamp is outside the accepted range.",
    _E.UNSUPPORTED_SASL_MECHANISM: "The broker does not support this SASL mechanism.",
    _E.ILLEGAL_SASL_STATE: "The request is not valid in the current SASL state.",
    _E.UNSUPPORTED_VERSION: "The broker does not support this API version.",
    _E.TOPIC_ALREADY_EXISTS: "A topic with this name already exists.",
    _E.INVALID_PARTITIONS: "The number of partitions is invalid.",
    _E.INVALID_REPLICATION_FACTOR: "The replication factor is invalid (too large or below 1).",
    _E.INVALID_REPLICA_ASSIGNMENT: "The replica assignment is invalid.",
    _E.INVALID_CONFIG: "A configuration value is invalid.",
    _E.NOT_CONTROLLER: "This broker is not the controller.",
    _E.INVALID_REQUEST: "The request is malformed or inconsistent; see the broker log.",
    _E.UNSUPPORTED_FOR_MESSAGE_FORMAT: "Not supported by the partition's message format.",
    _E.POLICY_VIOLATION: "The request breaks a configured policy.",
    _E.OUT_OF_ORDER_SEQUENCE_NUMBER: "The producer sent a sequence number out of order.",
    _E.DUPLICATE_SEQUENCE_NUMBER: "The producer sent a duplicate sequence number.",
    _E.INVALID_PRODUCER_EPOCH: "The producer epoch is older than the current one.",
    _E.INVALID_TXN_STATE: "The operation is not valid in the transaction's state.",
    _E.INVALID_PRODUCER_ID_MAPPING: "The producer id does not match the transactional id.",
    _E.INVALID_TRANSACTION_TIMEOUT: "The transaction timeout exceeds the broker maximum.",
    _E.CONCURRENT_TRANSACTIONS: "Another transaction for this producer is still completing.",
    _E.TRANSACTION_COORDINATOR_FENCED: "The transaction coordinator has been fenced.",
    _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Not authorized for this transactional id.",
    _E.SECURITY_DISABLED: "Security features are disabled.",
    _E.OPERATION_NOT_ATTEMPTED: "Not attempted because another part of the batch failed.",
    _E.KAFKA_STORAGE_ERROR: "The partition's log directory is unusable (disk error).",
    _E.LOG_DIR_NOT_FOUND: "The requested log directory does not exist.",
    _E.SASL_AUTHENTICATION_FAILED: "SASL authentication failed.",
    _E.UNKNOWN_PRODUCER_ID: "The broker does not know this producer id.",
    _E.REASSIGNMENT_IN_PROGRESS: "A partition reassignment is in progress.",
    _E.DELEGATION_TOKEN_AUTH_DISABLED: "Delegation token authentication is disabled.",
    _E.DELEGATION_TOKEN_NOT_FOUND: "The delegation token was not found.",
    _E.DELEGATION_TOKEN_OWNER_MISMATCH: "The principal does not own the delegation token.",
    _E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: "Delegation tokens are not allowed here.",
    _E.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "Not authorized for the delegation token.",
    _E.DELEGATION_TOKEN_EXPIRED: "The delegation token has expired.",
    _E.INVALID_PRINCIPAL_TYPE: "The principal type is not supported.",
    _E.NON_EMPTY_GROUP: "The group is not empty.",
    _E.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    _E.FETCH_SESSION_ID_NOT_FOUND: "The fetch session id was not found.",
    _E.INVALID_FETCH_SESSION_EPOCH: "The fetch session epoch is invalid.",
    _E.LISTENER_NOT_FOUND: "The leader has no endpoint for the listener the request came on.",
    _E.TOPIC_DELETION_DISABLED: "Topic deletion is disabled on this broker.",
    _E.FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the broker's.",
    _E.UNKNOWN_LEADER_EPOCH: "The leader epoch in the request is newer than the broker's.",
    _E.UNSUPPORTED_COMPRESSION_TYPE: "The requesting client does not support the compression.",
    _E.STALE_BROKER_EPOCH: "The broker epoch in the request is not the broker's current one.",
    _E.OFFSET_NOT_AVAILABLE: "The leader's high watermark has not caught up yet; retry.",
    _E.MEMBER_ID_REQUIRED: "The group member needs a member id; rejoin with the one given.",
    _E.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader is not available.",
    _E.GROUP_MAX_SIZE_REACHED: "The group has reached its maximum size.",
    _E.FENCED_INSTANCE_ID: "A newer member with the same group.instance.id fenced this one.",
    _E.ELIGIBLE_LEADERS_NOT_AVAILABLE: "No eligible replica can become leader.",
    _E.ELECTION_NOT_NEEDED: "The leader election is not needed.",
    _E.NO_REASSIGNMENT_IN_PROGRESS: "No partition reassignment is in progress.",
    _E.GROUP_SUBSCRIBED_TO_TOPIC: "The group is subscribed to the topic.",
    _E.INVALID_RECORD: "A record failed the broker's validation; the batch was not appended.",
    _E.UNSTABLE_OFFSET_COMMIT: "Pending offset commits exist for the partition; retry.",
    _E.THROTTLING_QUOTA_EXCEEDED: "The throttling quota was exceeded.",
    _E.PRODUCER_FENCED: "A newer producer with the same transactional id fenced this one.",
    _E.RESOURCE_NOT_FOUND: "The resource does not exist.",
    _E.DUPLICATE_RESOURCE: "The resource is named more than once in the request.",
    _E.UNACCEPTABLE_CREDENTIAL: "The credential does not meet the broker's requirements.",
    _E.INCONSISTENT_VOTER_SET: "The voter set does not match the quorum's.",
    _E.INVALID_UPDATE_VERSION: "The feature update version is invalid.",
    _E.FEATURE_UPDATE_FAILED: "The feature update failed.",
    _E.PRINCIPAL_DESERIALIZATION_FAILURE: "The forwarded principal could not be decoded.",
    _E.SNAPSHOT_NOT_FOUND: "The requested snapshot was not found.",
    _E.POSITION_OUT_OF_RANGE: "The requested position is outside the snapshot.",
    _E.UNKNOWN_TOPIC_ID: "This server does not know the topic id.",
    _E.DUPLICATE_BROKER_REGISTRATION: "The broker id is already registered by another broker.",
    _E.BROKER_ID_NOT_REGISTERED: "The broker id is not registered.",
    _E.INCONSISTENT_TOPIC_ID: "The topic id does not match the topic's current id.",
    _E.INCONSISTENT_CLUSTER_ID: "The cluster id does not match this cluster's.",
    _E.TRANSACTIONAL_ID_NOT_FOUND: "The transactional id was not found.",
    _E.FETCH_SESSION_TOPIC_ID_ERROR: "The fetch session found a topic id problem.",
    _E.INELIGIBLE_REPLICA: "The replica cannot join the in-sync replica set.",
    _E.NEW_LEADER_ELECTED: "A new leader was elected for the partition meanwhile.",
    _E.OFFSET_MOVED_TO_TIERED_STORAGE: "The requested offset has moved to tiered storage.",
    _E.FENCED_MEMBER_EPOCH: "The member epoch is fenced; rejoin with epoch 0.",
    _E.UNRELEASED_INSTANCE_ID: "The instance id is still in use by another member.",
    _E.UNSUPPORTED_ASSIGNOR: "The requested assignor is not supported by the group.",
    _E.STALE_MEMBER_EPOCH: "The member epoch is stale.",
    _E.MISMATCHED_ENDPOINT_TYPE: "The request was sent to an endpoint of the wrong type.",
    _E.UNSUPPORTED_ENDPOINT_TYPE: "This endpoint type does not support the request.",
    _E.UNKNOWN_CONTROLLER_ID: "The controller id is not known.",
    _E.UNKNOWN_SUBSCRIPTION_ID: "The client telemetry subscription id is unknown.",
    _E.TELEMETRY_TOO_LARGE: "The client telemetry payload is too large.",
    _E.INVALID_REGISTRATION: "The controller found the broker registration invalid.",
    _E.TRANSACTION_ABORTABLE: "The transaction must be aborted.",
    _E.INVALID_RECORD_STATE: "The record state is invalid.",
    _E.SHARE_SESSION_NOT_FOUND: "The share session was not found.",
    _E.INVALID_SHARE_SESSION_EPOCH: "The share session epoch is invalid.",
    _E.FENCED_STATE_EPOCH: "The share-group state epoch is fenced.",
    _E.INVALID_VOTER_KEY: "The voter key does not match the receiving replica.",
    _E.DUPLICATE_VOTER: "The voter is already part of the voter set.",
    _E.VOTER_NOT_FOUND: "The voter is not part of the voter set.",
    _E.DUPLICATE_CONSUMER_ID: "A live consumer with this consumer id is already registered in "
                              "the group; pick a unique id.",
    _E.INVALID_TOPIC_COUNT: "The consumer's topic count is not valid JSON of the documented "
                            "form, or names an invalid topic or pattern.",
}
del _E


# -- exceptions raised by the codec -----------------------------------------------------------


class ProtocolError(Exception):
    """Base of every error the codec raises. Bad bytes from a peer never escape as anything
    else, so ``except ProtocolError`` is enough to keep a server alive."""


class _Located(ProtocolError):
    """An error that knows where in a message it happened: ``path`` is the chain of field names
    from the message down (``topic_data.partition_data.records``), added by the schema layer as
    the error travels out of nested structs."""

    def __init__(self, message: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def at(self, name: str) -> _Located:
        """A copy of this error located one level further out (``name`` is the outer field)."""
        e = type(self)(self.message, (name, *self.path))
        e.__cause__ = self.__cause__
        return e

    def __str__(self) -> str:
        if not self.path:
            return self.message
        where = "".join(p if p.startswith("[") else f".{p}" for p in self.path)[1:]
        return f"{where}: {self.message}"


class MalformedFrame(_Located):
    """The bytes are not a valid message: truncated, a length or count out of range, invalid
    UTF-8, a varint too long, a bad size prefix, or bytes left over after the body."""


class FrameTooLarge(ProtocolError):
    """A size prefix announced a frame above the configured limit (before it was buffered)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class BufferLimitExceeded(ProtocolError):
    """A peer sent more bytes than a connection buffers while its reading is paused (it waits
    for memory): the pause is being ignored."""

    def __init__(self, buffered: int, limit: int) -> None:
        super().__init__(f"{buffered} bytes buffered while waiting for memory, above the "
                         f"limit of {limit}")
        self.buffered = buffered
        self.limit = limit


class _WithHeader(ProtocolError):
    def __init__(self, header: Any, message: str | None = None) -> None:
        super().__init__(message or self._describe(header))
        self.header = header

    @staticmethod
    def _describe(header: Any) -> str:
        raise NotImplementedError


class UnknownApiKey(_WithHeader):
    """The request names an API key this broker does not serve. ``header`` is the parsed
    request header (api_key, api_version, correlation_id, client_id)."""

    @staticmethod
    def _describe(header: Any) -> str:
        return f"unknown api key {header.api_key} (correlation id {header.correlation_id})"


class UnsupportedVersion(_WithHeader):
    """The API is served, but not at the requested version. ``header`` is the parsed request
    header, so a server can answer (ApiVersions does, per KIP-511)."""

    @staticmethod
    def _describe(header: Any) -> str:
        return (f"api key {header.api_key} version {header.api_version} is not supported "
                f"(correlation id {header.correlation_id})")


class EncodeError(_Located):
    """A value cannot be encoded: wrong type, out of range, unknown field, a non-nullable field
    set to None, or a non-default value in a field the target version does not have (unless
    Kafka marks the field ignorable)."""
