"""The quorum listener's admin APIs: DescribeQuorum (55) and AlterPartitionReassignments (45)
on ``__cluster_metadata``-0, kept apart from the replication APIs of
:mod:`broker_core.raft.listener`, which only advertises :data:`ADMIN_VERSIONS` and hands these
two api keys to :func:`handle_admin_request`; and the gossip API DiscoverBrokers (Sluice key
1007, :class:`GossipHandler`), served but not advertised.

An admin request reaches the node as an :class:`Envelope` from :data:`ADMIN_SOURCE`, an id no
node has (node ids are never negative, and the listener refuses replication requests claiming
one): the node answers it like any request, through the transport's ``InboundRequests`` under
the listener's own correlation id, so two admin connections never collide.

When the answer comes:

- DescribeQuorum: at once (the node answers from its state), bounded by the request timeout;
- AlterPartitionReassignments: once the assignment carrying the target is **committed**, or
  when the leader steps down (NOT_LEADER_OR_FOLLOWER), or after the request's own
  ``timeout_ms`` (the node answers REQUEST_TIMED_OUT itself). The listener's bound is that
  timeout plus the request timeout: a node that never answers (it stopped) gets
  REQUEST_TIMED_OUT written by the listener, and the connection stays open, since an admin
  client retries on it (resubmission is idempotent).

A request naming another partition gets INVALID_REQUEST, never reaching the node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from broker_core.raft import discovery, wire
from broker_core.raft.discovery import Gossip
from broker_core.raft.messages import (
    NO_LEADER,
    AlterVotersRequest,
    AlterVotersResponse,
    DescribeQuorumResponse,
    Response,
)
from broker_core.server.protocol import KafkaServerProtocol
from broker_core.wire import apis
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode

if TYPE_CHECKING:
    from broker_core.raft.listener import QuorumRequestHandler

#: The node id admin requests come from: no node's (node ids are >= 0).
ADMIN_SOURCE = -2

#: The admin APIs the quorum listener serves: DescribeQuorum at every version the codec
#: defines, AlterPartitionReassignments at v0 only. The latter is also in ``apis.SUPPORTED``:
#: on a broker's client listener it reassigns topic partitions (broker_core.server.cluster_admin,
#: v0-v1); here it changes the voters, whose count may change by design, so v1's
#: ``allow_replication_factor_change`` (KIP-860) would be a promise this listener cannot keep.
ADMIN_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.DESCRIBE_QUORUM: (apis.DEFINED[ApiKey.DESCRIBE_QUORUM].min_version,
                             apis.DEFINED[ApiKey.DESCRIBE_QUORUM].max_version),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0)}

log = Logger(namespace="sluice.raft.listener")


def _error_response(api_key: int, code: ErrorCode) -> Response:
    if api_key == ApiKey.DESCRIBE_QUORUM:
        return DescribeQuorumResponse(code, NO_LEADER, -1)
    return AlterVotersResponse(code, NO_LEADER, -1)


def handle_admin_request(handler: QuorumRequestHandler, request: apis.Request,
                         proto: KafkaServerProtocol) -> Any:
    """Answer one decoded admin request: a response body, or a Deferred of one."""
    api_key = request.header.api_key
    try:
        message = wire.request_from_body(api_key, request.body)
    except wire.UnexpectedPartitions as e:
        log.warn("invalid quorum admin request from {peer}: {e}", peer=proto.peer, e=e)
        return wire.response_body(_error_response(api_key, ErrorCode.INVALID_REQUEST))
    timeout_s = handler.timeout_s
    if isinstance(message, AlterVotersRequest):
        timeout_s += max(0, message.timeout_ms) / 1000
    key, d = handler.inbound.submit(ADMIN_SOURCE, message)

    def timed_out(result: Any, timeout: float) -> Response:
        # The node never answered (it is stopping): say so and keep the connection, which the
        # client may use to retry.
        handler.inbound.forget(key)
        log.warn("quorum node did not answer admin api {api} from {peer} in {t}s",
                 api=api_key, peer=proto.peer, t=timeout)
        return _error_response(api_key, ErrorCode.REQUEST_TIMED_OUT)

    d.addTimeout(timeout_s, handler.clock, onTimeoutCancel=timed_out)
    d.addCallback(wire.response_body)
    return d


# -- DiscoverBrokers (the quorum's gossip, docs/design.md#bootstrapping) -----------------------

#: Served but, as Sluice's own APIs never are, not listed in ApiVersions.
GOSSIP_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.DISCOVER_BROKERS: (apis.DEFINED[ApiKey.DISCOVER_BROKERS].min_version,
                              apis.DEFINED[ApiKey.DISCOVER_BROKERS].max_version)}


class GossipHandler:
    """Answers DiscoverBrokers: hands what the asker tells to ``receive`` (gossip is two-way:
    a request teaches as much as an answer) and answers with ``tell()``. ``receive`` raises
    :class:`~broker_core.raft.discovery.ClusterMismatch` for a peer of another cluster, which
    gets INCONSISTENT_CLUSTER_ID."""

    def __init__(self, receive: Callable[[Gossip], Any], tell: Callable[[], Gossip]) -> None:
        self.receive = receive
        self.tell = tell

    def __call__(self, request: apis.Request, proto: KafkaServerProtocol) -> Any:
        try:
            self.receive(discovery.gossip_from_body(request.body))
        except discovery.ClusterMismatch as e:
            log.warn("DiscoverBrokers from {peer}: {e}", peer=proto.peer, e=e)
            spec = apis.DEFINED[ApiKey.DISCOVER_BROKERS]
            assert spec.error_body is not None
            return spec.error_body(request.header.api_version, request.body,
                                   int(ErrorCode.INCONSISTENT_CLUSTER_ID))
        return discovery.gossip_body(self.tell(), response=True)
