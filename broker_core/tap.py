"""``twistd broker``: command-line options and the service maker.

Endpoint strings are parsed only here and in :class:`~broker_core.broker.BrokerService`'s start;
library code takes objects. Options map onto config keys, so every option can also be given in a
``--config`` properties file or as ``--set key=value``; the command line wins.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

from twisted.application import service
from twisted.python import usage

from broker_core import stop_signals
from broker_core.broker_startup import check_secret_files
from broker_core.config.broker_config import BrokerConfig
from broker_core.config.parsing import ConfigError

#: option name → config key
OPTION_KEYS = {
    "broker-id": "broker.id",
    "listen": "listeners",
    "advertised-listener": "advertised.listeners",
    "zookeeper": "zookeeper.connect",
    "log-dir": "log.dirs",
    "metrics": "metrics.listener",
    "metadata": "metadata.store",
    "quorum-voters": "quorum.voters",
    "quorum-bootstrap-servers": "quorum.bootstrap.servers",
    "quorum-listen": "quorum.listener",
    "quorum-data-dir": "quorum.data.dir",
    "cluster-id": "cluster.id",
    "cluster-secret-file": "cluster.secret.file",
}


#: The cyclic garbage collector's thresholds in a broker process (CPython's default: 700, 10, 10).
#: A broker holds millions of long-lived objects (partition states, indexes, metadata), and a
#: failover decodes requests naming 10,000 partitions, allocating tens of thousands of structs
#: and lists each: at 700 allocations per young collection that meant dozens of collections per
#: request and frequent full ones over the whole heap (py-spy put a sixth of a survivor's time on
#: the allocating lines). Young collections every 50,000 allocations and full ones far rarer
#: made the 10,000-partition failover faster (docs/benchmarks.md); garbage cycles are rare here
#: (objects are freed by reference counting), so memory barely grows.
BROKER_GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Set :data:`BROKER_GC_THRESHOLDS` for this process (a broker process only: it is global)."""
    gc.set_threshold(*BROKER_GC_THRESHOLDS)




class Options(usage.Options):
    synopsis = "[options]"
    longdesc = ("Run a Sluice broker: a Kafka-compatible broker on ZooKeeper or on its own "
                "metadata quorum. Example: twistd -n broker --broker-id 1 "
                "--listen tcp:9092:interface=127.0.0.1 --zookeeper 127.0.0.1:2181 "
                "--log-dir ./run/broker-1 --cluster-secret-file ./run/cluster.secret; in quorum "
                "mode, --metadata quorum "
                "--quorum-voters 1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095 instead "
                "of --zookeeper.")
    optParameters = [
        ["broker-id", None, None, "This broker's id (broker.id), a non-negative integer."],
        ["listen", None, None,
         "Where to listen (listeners): a Twisted server endpoint, e.g. "
         "tcp:9092:interface=127.0.0.1, or Kafka's NAME://host:port,..."],
        ["advertised-listener", None, None,
         "host:port clients should use (advertised.listeners), or NAME://host:port,... per "
         "listener; default: the bound address."],
        ["zookeeper", None, None, "ZooKeeper connect string (zookeeper.connect), e.g. host:2181."],
        ["log-dir", None, None, "Directory for partition logs (log.dirs)."],
        ["metrics", None, None, "Twisted server endpoint for /metrics, e.g. tcp:9404."],
        ["metadata", None, None,
         "Where the cluster's metadata lives (metadata.store): zookeeper (default) or quorum."],
        ["quorum-voters", None, None,
         "Quorum mode: the voters (quorum.voters), e.g. 1@127.0.0.1:9093,2@127.0.0.1:9094."],
        ["quorum-bootstrap-servers", None, None,
         "Quorum mode: host:port,... of quorum listeners to find the quorum through "
         "(quorum.bootstrap.servers); with it --quorum-voters may be left out."],
        ["quorum-listen", None, None,
         "Quorum mode: host:port of this broker's quorum listener (quorum.listener); "
         "default: its own entry in --quorum-voters."],
        ["quorum-data-dir", None, None,
         "Quorum mode: the metadata log's directory (quorum.data.dir); default: "
         "LOG_DIR/quorum."],
        ["cluster-id", None, None, "Quorum mode: the cluster id (cluster.id), default sluice."],
        ["cluster-secret-file", None, None,
         "Required: the cluster secret file (cluster.secret.file) brokers authenticate each "
         "other with, the same on every broker; make one with: sluice secret create FILE."],
        ["config", None, None, "A properties file of config keys (key=value lines)."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["set"] = {}

    def opt_set(self, value: str) -> None:
        """Set a config key: --set key=value (repeatable)."""
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise usage.UsageError(f"--set expects key=value, got {value!r}")
        self["set"][key.strip()] = val.strip()

    def postOptions(self) -> None:  # noqa: N802 (Twisted API)
        overrides = dict(self["set"])
        for opt, key in OPTION_KEYS.items():
            if self[opt] is not None:
                overrides[key] = self[opt]
        try:
            self.config = BrokerConfig.from_sources(
                Path(self["config"]) if self["config"] else None, overrides)
            check_secret_files(self.config)
        except ConfigError as e:
            raise usage.UsageError(str(e)) from None
        except OSError as e:
            raise usage.UsageError(f"cannot read --config file: {e}") from None


def makeService(options: Options) -> service.IService:  # noqa: N802 (Twisted API)
    from twisted.internet import reactor

    from broker_core.broker import BrokerService

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    tune_gc()
    reactor.callWhenRunning(stop_signals.install, reactor)
    return BrokerService(options.config, reactor=reactor, stop_reactor_on_failure=True)
