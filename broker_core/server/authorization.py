"""What each API requires of the connection that sends it: the one table of the request handler's
authorization, and the per-connection view of the authorizer that applies it.

Three gates, in order (:meth:`broker_core.server.handlers.RequestHandler.__call__`):

1. **The control plane** (:data:`CONTROL_PLANE`, and a follower's Fetch or
   OffsetForLeaderEpoch, ``replica_id >= 0``): served only to a connection that proved it
   holds the cluster credential (``security.is_broker``) when the handler's
   ``control_plane_closed`` is on, as every broker's is (brokers log in to each other with
   the cluster login on every listener); anyone else gets CLUSTER_AUTHORIZATION_FAILED and the
   request is not handled at all. ACLs are not asked about the control plane: Kafka asks
   CLUSTER_ACTION of the broker principal; here being a broker (the cluster login) is the
   proof, and no ACL can make a client one.
2. **Whole-request rules** (``Rule.scope`` CLUSTER or GROUP): one ACL question about the
   cluster or the request's ``group_id``; a refusal is the API's error response with the rule's
   error code, and the request is not handled.
3. **Per-resource rules** (``Rule.scope`` RESOURCES): the handler asks per topic (or group) and
   answers each refused one with the rule's error, handling the rest (Kafka's behaviour:
   Produce to two topics, one denied, writes to the other).

With no authorizer (``authorizer.enabled=false``, the default, as Kafka without
``authorizer.class.name``) gates 2 and 3 allow everything but :data:`USER_ADMIN`: who may read
and change the SCRAM users decides who may log in as anyone, so without ACLs those two APIs
are served only to a broker connection or a principal in ``super.users``
(:func:`may_manage_users`), and anyone else gets CLUSTER_AUTHORIZATION_FAILED. A broker
connection is allowed everything. Every served API is in :data:`RULES`, :data:`CONTROL_PLANE`
or :data:`UNCHECKED` (``tests/integration/test_acl_matrix.py`` checks it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from broker_core.security.acl import CLUSTER_NAME, AclOperation, Authorizer, ResourceType
from broker_core.security.principal import ConnectionSecurity
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.describe_groups import OPERATIONS_NOT_PROVIDED

Op, RT = AclOperation, ResourceType

#: The inter-broker APIs that change a broker's or the controller's state (and BrokerHeartbeat,
#: which keeps a broker registered). A follower's Fetch and OffsetForLeaderEpoch
#: (``replica_id >= 0``) are too (:func:`is_control_plane`).
CONTROL_PLANE = frozenset({
    ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN, ApiKey.ALTER_PARTITION, ApiKey.BROKER_HEARTBEAT})


class Scope(enum.Enum):
    CLUSTER = "the cluster, once per request"
    GROUP = "the request's group_id, once per request"
    RESOURCES = "each topic or group the request names, by the handler"


@dataclass(frozen=True)
class Rule:
    """What an API requires: ``operation`` on resources of ``resource_type`` (``scope`` says
    which), refused with ``error``."""

    operation: AclOperation
    resource_type: ResourceType
    error: ErrorCode
    scope: Scope


_TOPIC = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_GROUP = ErrorCode.GROUP_AUTHORIZATION_FAILED
_CLUSTER = ErrorCode.CLUSTER_AUTHORIZATION_FAILED

#: The ACL each API needs, as Kafka's ``KafkaApis`` asks it.
RULES: dict[ApiKey, Rule] = {
    ApiKey.PRODUCE: Rule(Op.WRITE, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    # A consumer's Fetch; a follower's (replica_id >= 0) is the control plane: CLUSTER_ACTION.
    ApiKey.FETCH: Rule(Op.READ, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    ApiKey.LIST_OFFSETS: Rule(Op.DESCRIBE, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    # Lists only the topics the principal may DESCRIBE; auto-creation also needs CREATE on
    # the cluster or the topic.
    ApiKey.METADATA: Rule(Op.DESCRIBE, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    # Kafka's group protocol (broker_core.server.group_apis): READ on the request's group to
    # take part (OffsetCommit also READ on each topic); DESCRIBE on each group to find its
    # coordinator, fetch its offsets (and DESCRIBE on each topic), describe or list it
    # (DESCRIBE on the cluster lists every group).
    ApiKey.OFFSET_COMMIT: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.OFFSET_FETCH: Rule(Op.DESCRIBE, RT.GROUP, _GROUP, Scope.RESOURCES),
    ApiKey.FIND_COORDINATOR: Rule(Op.DESCRIBE, RT.GROUP, _GROUP, Scope.RESOURCES),
    ApiKey.JOIN_GROUP: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.HEARTBEAT: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.LEAVE_GROUP: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.SYNC_GROUP: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.DESCRIBE_GROUPS: Rule(Op.DESCRIBE, RT.GROUP, _GROUP, Scope.RESOURCES),
    ApiKey.LIST_GROUPS: Rule(Op.DESCRIBE, RT.GROUP, _GROUP, Scope.RESOURCES),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rule(Op.DESCRIBE, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    # CREATE on the cluster also allows every topic.
    ApiKey.CREATE_TOPICS: Rule(Op.CREATE, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    ApiKey.DELETE_TOPICS: Rule(Op.DELETE, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    ApiKey.DELETE_RECORDS: Rule(Op.DELETE, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    ApiKey.CREATE_PARTITIONS: Rule(Op.ALTER, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    # Per resource: a topic needs it on the topic, a broker on the cluster (then the error is
    # CLUSTER_AUTHORIZATION_FAILED).
    ApiKey.DESCRIBE_CONFIGS: Rule(Op.DESCRIBE_CONFIGS, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    ApiKey.ALTER_CONFIGS: Rule(Op.ALTER_CONFIGS, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Rule(Op.ALTER_CONFIGS, RT.TOPIC, _TOPIC, Scope.RESOURCES),
    # IDEMPOTENT_WRITE on the cluster or WRITE on any topic (Access.may_write_idempotently),
    # asked by the handler: a whole-request rule could not say "or".
    ApiKey.INIT_PRODUCER_ID: Rule(Op.IDEMPOTENT_WRITE, RT.CLUSTER, _CLUSTER, Scope.RESOURCES),
    ApiKey.DESCRIBE_ACLS: Rule(Op.DESCRIBE, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    ApiKey.CREATE_ACLS: Rule(Op.ALTER, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    ApiKey.DELETE_ACLS: Rule(Op.ALTER, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    ApiKey.DESCRIBE_LOG_DIRS: Rule(Op.DESCRIBE, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    # DELETE on each group named; OffsetDelete DELETE on its group and READ on each topic.
    ApiKey.DELETE_GROUPS: Rule(Op.DELETE, RT.GROUP, _GROUP, Scope.RESOURCES),
    ApiKey.ELECT_LEADERS: Rule(Op.ALTER, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Rule(Op.ALTER, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Rule(Op.DESCRIBE, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    ApiKey.OFFSET_DELETE: Rule(Op.DELETE, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Rule(Op.DESCRIBE, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Rule(Op.ALTER, RT.CLUSTER, _CLUSTER, Scope.CLUSTER),
    # Sluice's coordinator APIs, as Kafka's group APIs: JoinGroup / LeaveGroup need READ on the
    # group; OffsetCommit READ on the group and on each topic; DescribeGroups DESCRIBE.
    ApiKey.REGISTER_CONSUMER: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.UNREGISTER_CONSUMER: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.COMMIT_OFFSETS: Rule(Op.READ, RT.GROUP, _GROUP, Scope.GROUP),
    ApiKey.DESCRIBE_CONSUMER_GROUPS: Rule(Op.DESCRIBE, RT.GROUP, _GROUP, Scope.RESOURCES),
}

#: Served without any check: version negotiation, the coordinator's address (Kafka's
#: FindCoordinator answers anyone too), DescribeCluster (as Kafka: the brokers, controller and
#: cluster id anyone learns from Metadata anyway; clients such as Java's AdminClient ask it
#: for the cluster id), the coordinator-to-consumer requests a broker only refuses, and SASL's
#: own APIs.
UNCHECKED = frozenset({ApiKey.API_VERSIONS, ApiKey.CLUSTER_METADATA, ApiKey.DESCRIBE_CLUSTER,
                       ApiKey.PING,
                       ApiKey.STOP_FETCHER, ApiKey.START_FETCHER,
                       # Answered by the connection's authentication gate, before any handler
                       # (broker_core.server.authentication): how a principal comes to be.
                       ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

#: The APIs that read or change the SCRAM users: guarded even without an authorizer.
USER_ADMIN = frozenset({ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                        ApiKey.ALTER_USER_SCRAM_CREDENTIALS})

_FOLLOWER_APIS = frozenset({ApiKey.FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH})


def is_control_plane(api_key: int, body: Any) -> bool:
    """Whether a request is one only brokers may send."""
    if api_key in CONTROL_PLANE:
        return True
    return api_key in _FOLLOWER_APIS and getattr(body, "replica_id", -1) >= 0


def may_manage_users(access: Access, operation: AclOperation,
                     super_users: frozenset[str]) -> bool:
    """Whether ``access``'s connection may use a :data:`USER_ADMIN` API (``operation`` on the
    cluster). With an authorizer, its answer (which counts ``super.users`` itself); without
    one, only a broker connection or a principal named in ``super_users``: an open cluster
    must not let an anonymous client set the password of the user it wants to become."""
    if access.authorizer is not None:
        return access.allows_cluster(operation)
    return access.security.is_broker or str(access.security.principal) in super_users


class Access:
    """One connection's view of the authorizer: "may this connection do ``op`` on this?".

    ``authorizer`` None (no ACLs configured) or a broker connection: always yes.
    """

    __slots__ = ("authorizer", "security")

    def __init__(self, authorizer: Authorizer | None, security: ConnectionSecurity) -> None:
        self.authorizer = authorizer
        self.security = security

    @property
    def unrestricted(self) -> bool:
        return self.authorizer is None or self.security.is_broker

    def allows(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self.unrestricted:
            return True
        assert self.authorizer is not None
        return self.authorizer.authorize(self.security.principal, self.security.peer_host,
                                         operation, resource_type, name)

    def allows_cluster(self, operation: AclOperation) -> bool:
        return self.allows(operation, RT.CLUSTER, CLUSTER_NAME)

    def allows_topic(self, rule: Rule, topic: str) -> bool:
        return self.allows(rule.operation, RT.TOPIC, topic)

    def may_write_idempotently(self) -> bool:
        """InitProducerId, as Kafka asks it: IDEMPOTENT_WRITE on the cluster, or WRITE on at
        least one topic."""
        if self.unrestricted:
            return True
        assert self.authorizer is not None
        return self.allows_cluster(Op.IDEMPOTENT_WRITE) or self.authorizer.authorize_any(
            self.security.principal, self.security.peer_host, Op.WRITE, RT.TOPIC)

    def may_create_topic(self, topic: str) -> bool:
        """CreateTopics and Metadata's auto-creation: CREATE on the cluster or on the topic."""
        return self.allows_cluster(Op.CREATE) or self.allows(Op.CREATE, RT.TOPIC, topic)


#: The operations Kafka reports as authorized on a resource of each type (its ACL entries'
#: supported operations), for the ``*_authorized_operations`` bit fields.
REPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    RT.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
               Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    RT.GROUP: (Op.READ, Op.DELETE, Op.DESCRIBE),
    RT.CLUSTER: (Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                 Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE),
}


def authorized_operations(access: Access, resource_type: ResourceType, name: str,
                          asked: bool) -> int:
    """Kafka's ``authorized_operations`` bit field for one resource: bit n set when
    ``access`` may do the operation of code n, over :data:`REPORTED_OPERATIONS` of the
    resource's type. Asked of the authorizer as every other check is (so an operation that
    implies another counts for it, and ``super.users`` for everything); with no authorizer,
    or for a broker connection, every reported operation. Not ``asked`` (the request's
    ``include_*_authorized_operations`` false): INT32_MIN, Kafka's "not provided"."""
    if not asked:
        return OPERATIONS_NOT_PROVIDED
    bits = 0
    for op in REPORTED_OPERATIONS[resource_type]:
        if access.allows(op, resource_type, name):
            bits |= 1 << int(op)
    return bits


def cluster_authorized_operations(access: Access, asked: bool) -> int:
    """The cluster's bit field as DescribeCluster and Metadata answer it: as
    :func:`authorized_operations`, but 0 to a principal that may not DESCRIBE the cluster
    (as Kafka answers it)."""
    if asked and not access.allows_cluster(Op.DESCRIBE):
        return 0
    return authorized_operations(access, RT.CLUSTER, CLUSTER_NAME, asked)


#: The access of a connection made without any security (in-process tools and tests).
def open_access() -> Access:
    from broker_core.security.principal import plaintext

    return Access(None, plaintext())
