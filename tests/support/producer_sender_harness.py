"""The producer's sender on task.Clock against a scripted cluster (:class:`FakeCluster`), with
helpers to answer its Produce requests and collect what it resolved.
"""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer, task

from broker_core.wire.errors import ErrorCode
from consumer_client.cluster_view import ClusterView, PartitionInfo
from consumer_client.producer import Producer


class FakeCluster:
    """Stands in for ClusterClient: metadata from ``leaders``; each Produce is recorded in
    ``requests`` as (node, body, Deferred) and answered by the test."""

    def __init__(self, leaders: dict[str, list[int]]) -> None:
        self.leaders = leaders
        self.refreshes = 0
        self.requests: list[tuple[int, dict, defer.Deferred]] = []
        self.oneway: list[tuple[int, dict]] = []
        self.disconnected: list[int] = []
        self.closed = False
        self.auto_create: list[bool] = []
        #: While set, a refresh fails with it (no broker reachable).
        self.unreachable: Exception | None = None

    async def refresh(self, topics, auto_create=False):
        self.refreshes += 1
        self.auto_create.append(auto_create)
        if self.unreachable is not None:
            raise self.unreachable
        view = ClusterView(brokers={1: ("h", 1), 2: ("h", 2)})
        for t in topics:
            if t in self.leaders:
                view.topics[t] = {p: PartitionInfo(t, p, leader, 0, (), ())
                                  for p, leader in enumerate(self.leaders[t])}
            else:
                view.topic_errors[t] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return view

    async def request(self, node, api_key, body, timeout_s=None):
        d: defer.Deferred = defer.Deferred()
        self.requests.append((node, body, d))
        return await d

    async def send_oneway(self, node, api_key, body):
        self.oneway.append((node, body))

    def disconnect(self, node):
        self.disconnected.append(node)

    def close(self):
        self.closed = True


def answer(body, errors=None, base=0):
    """A Produce response for ``body``: every partition ok at ``base`` unless in ``errors``."""
    errors = errors or {}
    return SimpleNamespace(responses=[SimpleNamespace(name=t["name"], partition_responses=[
        SimpleNamespace(index=p["index"], error_code=int(errors.get(p["index"], 0)),
                        base_offset=base, error_message=None)
        for p in t["partition_data"]]) for t in body["topic_data"]])


def make(leaders=None, **cfg):
    """(clock, cluster, producer) with metadata for ``leaders`` (topic -> leader per
    partition) already loaded."""
    clock = task.Clock()
    cluster = FakeCluster(leaders if leaders is not None else {"t": [1, 2]})
    p = Producer(reactor=clock, cluster=cluster, bootstrap_servers="h:1", **cfg)
    for t in cluster.leaders:
        p.wait_for_topic(t)
    clock.advance(0)
    return clock, cluster, p


def results(ds):
    out = []
    for d in ds:
        d.addBoth(out.append)
    return out


