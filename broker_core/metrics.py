"""The broker's Prometheus metrics, in one registry per broker (injectable for tests), and the
``/metrics`` resource.

Names follow Prometheus practice: the ``sluice_`` prefix, base units (seconds, bytes), ``_total``
on counters (added by the client library), low-cardinality labels only (api, topic, partition,
reason; never client or member ids). ``docs/metrics.md`` lists each metric.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from twisted.web import resource, server

LATENCY_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)

PartitionRow = tuple[str, int, int, int, bool]


class _PartitionCollector:
    """Per-partition gauges read from the replica manager at scrape time, so a deleted partition
    disappears instead of lingering with its last value."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[PartitionRow]] = lambda: ()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        leo = GaugeMetricFamily("sluice_log_end_offset", "Log end offset of a local partition",
                                labels=["topic", "partition"])
        size = GaugeMetricFamily("sluice_log_size_bytes", "Bytes on disk of a local partition",
                                 labels=["topic", "partition"])
        led = GaugeMetricFamily("sluice_partitions_led", "Partitions this broker leads")
        n = 0
        for topic, part, end, nbytes, is_leader in self.source():
            leo.add_metric([topic, str(part)], end)
            size.add_metric([topic, str(part)], nbytes)
            n += 1 if is_leader else 0
        led.add_metric([], n)
        return [leo, size, led]

    def describe(self) -> list:
        return []


class BrokerMetrics:
    """Every metric a broker exports (see ``docs/metrics.md``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        ns = "sluice"
        self.requests_total = Counter("requests", "Requests handled, by API", ["api"],
                                      namespace=ns, registry=r)
        self.request_errors_total = Counter(
            "request_errors", "Requests answered with a request-level error", ["api", "error"],
            namespace=ns, registry=r)
        self.request_duration_seconds = Histogram(
            "request_duration_seconds", "Time from request decoded to response ready", ["api"],
            buckets=LATENCY_BUCKETS, namespace=ns, registry=r)
        self.bytes_in_total = Counter("bytes_in", "Record bytes appended by producers",
                                      ["topic"], namespace=ns, registry=r)
        self.bytes_out_total = Counter("bytes_out", "Record bytes returned to fetchers",
                                       ["topic"], namespace=ns, registry=r)
        self.messages_in_total = Counter("messages_in", "Records appended by producers",
                                         ["topic"], namespace=ns, registry=r)
        self.connections = Gauge("connections", "Open client connections", namespace=ns,
                                 registry=r)
        self.disconnects_total = Counter("disconnects", "Connections closed by the broker",
                                         ["reason"], namespace=ns, registry=r)
        self.active_controller = Gauge("active_controller",
                                       "1 if this broker is the active controller",
                                       namespace=ns, registry=r)
        self.controller_epoch = Gauge("controller_epoch", "Epoch of this broker's controllership",
                                      namespace=ns, registry=r)
        self.controller_event_queue_size = Gauge("controller_event_queue_size",
                                                 "Controller events waiting", namespace=ns,
                                                 registry=r)
        self.controller_event_duration_seconds = Histogram(
            "controller_event_duration_seconds", "Time to handle one controller event",
            buckets=LATENCY_BUCKETS, namespace=ns, registry=r)
        self.unclean_leader_elections_total = Counter(
            "unclean_leader_elections", "Leaders elected from outside the ISR (data loss)",
            namespace=ns, registry=r)
        self.zookeeper_session_state = Enum(
            "zookeeper_session_state", "State of the broker's ZooKeeper session",
            states=["connected", "suspended", "lost"], namespace=ns, registry=r)
        self.log_recoveries_total = Counter("log_recoveries",
                                            "Partitions recovered after an unclean shutdown",
                                            namespace=ns, registry=r)
        self.log_truncated_bytes_total = Counter("log_truncated_bytes",
                                                 "Bytes cut from torn or corrupt log tails",
                                                 namespace=ns, registry=r)
        self.flush_duration_seconds = Histogram("flush_duration_seconds",
                                                "Time of one partition flush (fsync)",
                                                buckets=LATENCY_BUCKETS, namespace=ns,
                                                registry=r)
        self.purgatory_size = Gauge("purgatory_size", "Operations watched in a purgatory",
                                    ["purgatory"], namespace=ns, registry=r)
        self.purgatory_delayed = Gauge("purgatory_delayed_operations",
                                       "Operations waiting in a purgatory", ["purgatory"],
                                       namespace=ns, registry=r)
        self._partitions = _PartitionCollector()
        r.register(self._partitions)

    def set_partition_source(self, fn: Callable[[], Iterable[PartitionRow]]) -> None:
        self._partitions.source = fn


class MetricsResource(resource.Resource):
    """Serves the registry in the Prometheus text format (OpenMetrics when asked) on the reactor
    thread; unlike ``prometheus_client.twisted`` it needs no thread pool and no global reactor."""

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.registry = registry

    def render_GET(self, request: Any) -> bytes:  # noqa: N802 (Twisted API)
        accept = request.getHeader("accept") or ""
        encoder, content_type = choose_encoder(accept)
        request.setHeader(b"Content-Type", content_type.encode())
        return encoder(self.registry)


def metrics_site(registry: CollectorRegistry) -> server.Site:
    root = resource.Resource()
    root.putChild(b"metrics", MetricsResource(registry))
    return server.Site(root)
