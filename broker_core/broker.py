"""The broker service: wires the parts together and runs the start-up and shut-down sequences.

Start-up, in order (docs/design.md#broker-start-up):

1. check that each log directory is this broker's (``meta.properties``; in quorum mode also
   that it is this quorum's cluster) before anything reads or writes it (a directory that
   cannot even be written is offline from the start; if every one is, the start fails);
2. connect to ZooKeeper (a dead ZooKeeper fails the start with a message naming the hosts),
   read the cluster id (``/cluster/id``, created by the cluster's first broker) and check the
   log directory belongs to that cluster (Kafka's order: a directory of another cluster is
   refused before its partitions are opened, recovered or written);
2b. open the log directory and recover every partition (unclean shutdown: torn tails
   truncated);
3. listen for Kafka clients;
4. register ``/brokers/ids/[id]`` (ephemeral), waiting out a previous session's node after a
   crash;
5. read the assignment and leader state of every partition assigned here, become leader or
   follower, delete local partitions no longer assigned;
6. stand for controller election, and for consumer-coordinator election.

(Between 2 and 3, the user store's cache reads every user's SCRAM credentials and keeps
watching them.)

Shut-down runs the reverse, each step awaited (``MultiService`` would not wait between children):
stop listening, write the coordinator's pending offsets and resign as coordinator, resign as
controller, close the ZooKeeper session (the registration goes), stop
the replica manager, flush and checkpoint the logs and mark the shutdown clean, stop the pools.

Failed log directories (KIP-112): when a log directory goes offline after an I/O error, the
replica manager stops serving its partitions and this service reports it to the controller
(:class:`~broker_core.replica.log_dir_reporter.LogDirFailureReporter`); when every directory is
offline, the broker shuts down (exit status 1 for the ``twistd broker`` process), saying why.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from twisted.application import service
from twisted.internet import defer, endpoints
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from broker_core import metadata_paths as paths
from broker_core.acl_store import AclCache
from broker_core.config.broker_config import BrokerConfig
from broker_core.config.parsing import ConfigError
from broker_core.config.topic_keys import applied_topic_overrides
from broker_core.config_changes import read_entity
from broker_core.controller.controller import Controller
from broker_core.controller.heartbeat_sender import ControllerHeartbeatSender
from broker_core.controller.shutdown import controlled_shutdown
from broker_core.dynamic_config import DynamicConfigWatcher, effective_broker_config
from broker_core.log import LogConfig, LogManager, meta_properties
from broker_core.metadata import AuthFailed, NodeExists, NoNode, NotAuthorized, SessionState
from broker_core.metadata_cache import MetadataCache
from broker_core.metrics import BrokerMetrics, metrics_site
from broker_core.raft.cluster_id import generate_cluster_id
from broker_core.raft.start_retry import QuorumStartRetries, StartAbandoned
from broker_core.replica.fetcher import FetcherConfig
from broker_core.replica.log_dir_reporter import LogDirFailureReporter
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.replica.published_leadership import adopt_published_leadership
from broker_core.security.acl import Authorizer
from broker_core.security.basic_auth import BasicAuthUsers
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import SaslSettings
from broker_core.security.user_store import UserCredentialCache
from broker_core.server.connection_limits import ServerLimits
from broker_core.server.handlers import RequestHandler
from broker_core.server.listener_endpoints import (
    BoundListener,
    TlsFileError,
    bind,
    load_all_tls_options,
    load_peer_tls,
)
from broker_core.server.protocol import KafkaServerFactory
from broker_core.zk.store import ZooKeeperStore
from coordinator.service import CoordinatorConfig, CoordinatorService

#: In the quorum data directory: the metadata session a stop could not close (the quorum had
#: gone), which the next start closes before it registers (see
#: :mod:`broker_core.raft.metadata_store`).
LEFT_OPEN_SESSION_FILE = "metadata-session-left-open"

#: Longest a start waits for the ACL cache's first load (authorizer.enabled) before it fails:
#: the store answered everything before it, so only a store that hangs takes this long.
ACL_FIRST_LOAD_TIMEOUT_S = 60.0


class StartupError(Exception):
    """The broker cannot start; the message says why and what to do."""


async def try_register(store: Any, path: str, data: bytes) -> bool:
    """One attempt at a broker's ephemeral registration ``path``: True once it is ``store``'s
    session's (created now, or by an earlier attempt whose answer was lost: hence the re-read
    of its owner, never a blind second create), False while another session holds it."""
    try:
        await store.create(path, data, ephemeral=True, makepath=True)
        return True
    except NodeExists:
        stat = await store.exists(path)
        return stat is not None and stat.ephemeral_owner == store.session_id


def log_config_from(cfg: BrokerConfig) -> LogConfig:
    """Broker-level log defaults as a :class:`LogConfig`."""
    return LogConfig(
        segment_bytes=cfg.log_segment_bytes,
        segment_ms=cfg.log_roll_effective_ms,
        retention_bytes=cfg.log_retention_bytes,
        retention_ms=cfg.log_retention_ms,
        flush_messages=cfg.log_flush_interval_messages,
        flush_ms=cfg.log_flush_interval_ms,
        index_interval_bytes=cfg.log_index_interval_bytes,
        max_message_bytes=cfg.message_max_bytes,
        message_timestamp_before_max_ms=cfg.log_message_timestamp_before_max_ms,
        message_timestamp_after_max_ms=cfg.log_message_timestamp_after_max_ms,
    )


def _applied_override(overrides: Mapping[str, str], key: str) -> str | None:
    """A topic's stored override of ``key`` when a broker applies it (it passes the topic key's
    check: the store is not trusted), normalised; else None: the broker's value applies."""
    value = overrides.get(key)
    return None if value is None else applied_topic_overrides({key: value})[0].get(key)


class BrokerService(service.Service):
    """One broker; see the module docstring for the start and stop sequences."""

    log = Logger(namespace="sluice.broker")

    def __init__(self, config: BrokerConfig, *, reactor: Any, registry: Any = None,
                 store: Any = None, stop_reactor_on_failure: bool = False) -> None:
        self.config = config
        #: The cluster secret (``cluster.secret.file``, required: ConfigError without it),
        #: read once: every listener checks the cluster login against it and every connection
        #: this broker opens to another broker or quorum node logs in with it.
        self.cluster_credential = config.cluster_credential()
        #: The named listeners (broker_core/config/listeners.py).
        self.listener_configs = config.listener_configs()
        #: TLS on this broker's connections to other brokers when the inter-broker listener is
        #: SSL or SASL_SSL (its CA, certificate and key; read once, like the cluster secret).
        self.peer_tls = self._peer_tls()
        #: The process's own broker (``twistd broker``) stops the reactor when its start fails,
        #: so the process exits; an embedded one (tests, tools) leaves that to its owner, who
        #: sees the failure in ``startService()``'s Deferred.
        self.stop_reactor_on_failure = stop_reactor_on_failure
        self.reactor = reactor
        self.clock: IReactorTime = reactor
        self.broker_id = config.broker_id
        self.metrics = BrokerMetrics(registry)
        self.cache = MetadataCache()
        self.io_pool = ThreadPool(minthreads=0, maxthreads=4, name="sluice-io")
        #: The broker's own metadata-quorum node in quorum mode (``metadata.store=quorum``).
        self.quorum: Any = None
        #: Quorum mode: the start-up steps that talk to the quorum are retried through its
        #: leader changes until they succeed or the broker stops (see start_retry).
        self.start_retries = QuorumStartRetries(reactor, f"broker {config.broker_id}")
        if store is None and config.metadata_store == "quorum":
            store = self._quorum_store(config, reactor)
        self.store = store or ZooKeeperStore(
            config.zookeeper_connect, reactor=reactor,
            session_timeout=config.zookeeper_session_timeout_ms / 1000.0,
            connect_timeout=config.zookeeper_connection_timeout_ms / 1000.0,
            acl_policy=config.zookeeper_acl_policy())
        self.log_dirs = config.log_dir_paths()
        #: The first log directory (the quorum's data defaults into it).
        self.log_dir = self.log_dirs[0]
        #: The static configuration with the dynamic broker configs applied
        #: (broker_core.dynamic_config); what the logs' defaults and produce checks use.
        self.effective_config = config
        self.default_log_config = log_config_from(config)
        self.topic_configs: dict[str, dict[str, str]] = {}
        #: Keeps ``topic_configs`` and ``effective_config`` equal to the store's dynamic
        #: configs, so AlterConfigs applies here while the broker runs.
        self.dynamic_configs = DynamicConfigWatcher(
            self.store, self.broker_id, on_topic=self._on_topic_config,
            on_broker=self._on_dynamic_broker_config)
        self.log_manager = LogManager(self.log_dirs, self.default_log_config,
                                      time_ms=lambda: int(self.clock.seconds() * 1000),
                                      max_open_segments=config.log_open_segments_max)
        self.replicas = ReplicaManager(
            self.broker_id, self.log_manager, clock=self.clock, io_pool=self.io_pool,
            reactor=reactor, topic_log_config=self._topic_log_config,
            metadata_cache=self.cache, metrics=self.metrics,
            retention_check_interval_s=config.log_retention_check_interval_ms / 1000.0,
            flush_check_interval_s=(config.log_flush_scheduler_interval_ms or 1000) / 1000.0,
            fetch_purge_interval=config.fetch_purgatory_purge_interval_requests,
            produce_purge_interval=config.producer_purgatory_purge_interval_requests,
            fetcher_config=FetcherConfig(
                wait_max_ms=config.replica_fetch_wait_max_ms,
                min_bytes=config.replica_fetch_min_bytes,
                max_bytes=config.replica_fetch_max_bytes,
                response_max_bytes=config.replica_fetch_response_max_bytes,
                backoff_ms=config.replica_fetch_backoff_ms,
                request_timeout_ms=config.request_timeout_ms),
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            producer_id_expiration_ms=config.producer_id_expiration_ms,
            producer_id_expiration_check_interval_s=(
                config.producer_id_expiration_check_interval_ms / 1000.0),
            min_insync_replicas=self._min_insync_replicas,
            broker_epoch=lambda: self.registration_epoch,
            on_log_dir_failure=self._on_log_dir_failure,
            credential=self.cluster_credential.login, tls=self.peer_tls,
        )
        self.log_dir_reporter = LogDirFailureReporter(
            self.broker_id, self.store, self.clock, offline=self._offline_log_state,
            broker_epoch=lambda: self.registration_epoch,
            give_up=self._shut_down_for_failed_dirs)
        self._exiting_for_failed_dirs = False
        self.controller = Controller(
            self.broker_id, self.store, reactor=reactor,
            unclean_leader_election=self._unclean_allowed,
            request_timeout_s=config.controller_socket_timeout_ms / 1000.0,
            metrics=self.metrics,
            heartbeat_interval_s=config.broker_heartbeat_interval_ms / 1000.0,
            session_timeout_s=config.broker_session_timeout_ms / 1000.0,
            credential=self.cluster_credential.login, tls=self.peer_tls)
        # Heartbeats to the controller, and what to do when it cannot be reached
        # (docs/replication.md, "Fencing").
        self.heartbeats = ControllerHeartbeatSender(
            self.broker_id, lambda: self.registration_epoch, self.store, reactor=reactor,
            clock=self.clock, interval_s=config.broker_heartbeat_interval_ms / 1000.0,
            session_timeout_s=config.broker_session_timeout_ms / 1000.0,
            is_controller=lambda: self.controller.active,
            adopt=lambda: defer.Deferred.fromCoroutine(adopt_published_leadership(
                self.broker_id, self.store, self.replicas, self.cache)),
            metrics=self.metrics, credential=self.cluster_credential.login, tls=self.peer_tls)
        self.coordinator = CoordinatorService(
            self.broker_id, self.store, clock=self.clock,
            config=CoordinatorConfig.from_broker_config(config),
            brokers=lambda: self.cache.brokers.values(), metrics=self.metrics)
        #: Every user's SCRAM credentials, kept current by watches (the SASL logins' lookup).
        self.users = UserCredentialCache(self.store)
        self.registration_epoch = -1
        #: The cluster's id (``/cluster/id``), known once the store is connected.
        self.cluster_id: str | None = None
        # Only a loaded log directory is checkpointed and marked clean at stop: one refused at
        # start (another broker's, another cluster's) is left exactly as it was.
        self._logs_loaded = False
        self._registration_waiters: list[defer.Deferred] = []
        #: The ACLs (authorizer.enabled) and the watches that keep them equal to the store.
        self.authorizer: Authorizer | None = None
        self.acl_cache: AclCache | None = None
        if config.authorizer_enabled:
            self.authorizer = Authorizer(super_users=config.super_users,
                                         allow_if_no_acl=config.allow_everyone_if_no_acl_found)
            self.acl_cache = AclCache(self.store, self.authorizer)
        self.handler = RequestHandler(
            authorizer=self.authorizer, super_users=config.super_users,
            broker_id=self.broker_id, config=config, cache=self.cache, replicas=self.replicas,
            store=self.store, clock=self.clock, broker_epoch=lambda: self.registration_epoch,
            on_metadata_update=self._on_metadata_update,
            load_topic_configs=self._ensure_topic_configs, controller=self.controller,
            when_registered=self.when_registered, coordinator=self.coordinator,
            # Brokers log in to each other with the cluster secret, so the control plane is
            # served to them only.
            control_plane_closed=True)
        #: Connection and request-memory limits shared by this broker's client listeners (the
        #: quorum listener has its own: see ``_quorum_store``). A separate inter-broker listener
        #: gets limits of its own, so clients that fill theirs cannot stall replication (Kafka
        #: exempts the inter-broker listener the same way).
        self.server_limits = ServerLimits.from_config(config)
        self.metrics.track_request_memory(self.server_limits.pool)
        #: One factory per listener, all sharing the one request handler and the SASL
        #: settings (user store, cluster login).
        sasl = self._sasl_settings(config)
        self.factories = {}
        for lc in self.listener_configs:
            own = (lc.name == self.listener_configs.inter_broker
                   and len(self.listener_configs) > 1)
            self.factories[lc.name] = KafkaServerFactory(
                self.handler, clock=self.clock, metrics=self.metrics,
                max_frame_bytes=config.socket_request_max_bytes, listener=lc.settings,
                limits=ServerLimits.from_config(config) if own else self.server_limits,
                sasl=sasl)
        #: The first listener's factory and port (a single-listener broker's only ones).
        self.factory = self.factories[self.listener_configs.listeners[0].name]
        self.port: Any = None
        #: Every bound listener, in configured order, once started.
        self.listeners: list[BoundListener] = []
        self.metrics_port: Any = None
        #: The inter-broker listener's advertised address (the registration's host and port).
        self.advertised: tuple[str, int] | None = None
        self.metrics.set_partition_source(self.replicas.partition_metrics)
        self.metrics.follower_lag.source = self.replicas.follower_lag_metrics
        self.metrics.offline_log_directory_count.set_function(
            lambda: len(self.log_manager.dir_states.offline()))
        for d in self.log_dirs:
            self.metrics.log_directory_online.labels(log_dir=str(d)).set_function(
                lambda d=d: int(self.log_manager.dir_states.is_online(d)))
        self.metrics.offline_partitions.set_function(
            lambda: sum(1 for d in self.controller.context.states.values() if d.leader < 0)
            if self.controller.active else 0)

    async def _load_acls(self, loaded: defer.Deferred) -> None:
        """Wait (bounded) for the ACL cache's first load; a StartupError says why not."""
        loaded.addTimeout(ACL_FIRST_LOAD_TIMEOUT_S, self.clock)
        try:
            await loaded
        except defer.TimeoutError:
            raise StartupError(
                f"the ACLs could not be read from the metadata store within "
                f"{ACL_FIRST_LOAD_TIMEOUT_S:g} s; the listeners stay closed rather than "
                "serve clients without them") from None

    def _peer_tls(self) -> PeerTls | None:
        """The inter-broker listener's TLS files as :class:`PeerTls` (None if it is not TLS);
        an unusable file is a ConfigError naming its key, before anything starts."""
        tls = self.listener_configs.inter_broker_listener.tls
        if tls is None:
            return None
        try:
            return load_peer_tls(tls)
        except TlsFileError as e:
            raise ConfigError(f"the inter-broker listener's TLS files: {e}") from None

    def _sasl_settings(self, config: BrokerConfig) -> SaslSettings:
        """Every listener's SASL settings: the enabled mechanisms, the user store's lookup and
        the cluster login's credential (on a PLAINTEXT or SSL listener only the cluster login
        is accepted: broker_core/server/authentication.py)."""
        return self.cluster_credential.sasl_settings(mechanisms=config.sasl_mechanisms(),
                                                     lookup=self.users.lookup)

    def _quorum_store(self, config: BrokerConfig, reactor: Any) -> Any:
        """The quorum store on this broker's own quorum node; the session timeouts are the
        ZooKeeper keys', which mean the same there."""
        from broker_core.raft.embedded import EmbeddedQuorum  # noqa: PLC0415 (quorum mode)
        from broker_core.raft.metadata_store import QuorumMetadataStore  # noqa: PLC0415
        from broker_core.raft.metadata_tree import SKIP_REASONS  # noqa: PLC0415

        # The quorum listener's TLS files (if it is SSL or SASL_SSL) are read here, once.
        try:
            self.quorum = EmbeddedQuorum(config.broker_id, config.cluster_id,
                                         config.quorum_voter_addresses(),
                                         config.quorum_listen_address(),
                                         config.quorum_data_path(),
                                         reactor, config=config.raft_config(),
                                         bootstrap_servers=config.quorum_bootstrap_server_list(),
                                         limits=ServerLimits.from_config(config),
                                         max_frame_bytes=config.socket_request_max_bytes,
                                         credential=self.cluster_credential,
                                         listener=self.listener_configs.quorum)
        except TlsFileError as e:
            raise ConfigError(f"the quorum listener's TLS files: {e}") from None
        # Entries the node cannot apply are skipped (every node alike) and counted here.
        skipped = self.metrics.metadata_entries_skipped_total
        for reason in SKIP_REASONS:
            skipped.labels(reason=reason)  # exported as 0 until the first one
        self.quorum.client.on_skip = lambda offset, reason: skipped.labels(reason=reason).inc()
        return QuorumMetadataStore(
            self.quorum.client, reactor=reactor,
            session_timeout=config.zookeeper_session_timeout_ms / 1000.0,
            connect_timeout=config.zookeeper_connection_timeout_ms / 1000.0,
            left_open_record=config.quorum_data_path() / LEFT_OPEN_SESSION_FILE)

    # -- configuration -------------------------------------------------------------------------

    def _topic_log_config(self, topic: str) -> LogConfig:
        """The topic's overrides over the broker's (dynamic) defaults. An override the topic
        key's check refuses, or the log cannot take (written to the store by another tool), is
        left out and reported, so one bad value neither stops the partition nor hides the
        topic's other settings (DescribeConfigs reports the same: ``applied_topic_overrides``)."""
        overrides, ignored = applied_topic_overrides(self.topic_configs.get(topic, {}))
        for k, why in ignored.items():
            self.log.warn("topic {t}: ignoring its config {k}: {why}", t=topic, k=k, why=why)
        log_keys = {k: v for k, v in overrides.items() if k in _LOG_KEYS}
        try:
            return LogConfig.from_topic_config(self.default_log_config, log_keys)
        except ValueError:
            good = {}
            for k, v in log_keys.items():
                try:
                    LogConfig.from_topic_config(self.default_log_config, {k: v})
                    good[k] = v
                except ValueError as e:
                    self.log.warn("topic {t}: ignoring its config {k}={v!r}: {e}", t=topic, k=k,
                                  v=v, e=e)
            return LogConfig.from_topic_config(self.default_log_config, good)

    def _min_insync_replicas(self, topic: str) -> int:
        value = _applied_override(self.topic_configs.get(topic, {}), "min.insync.replicas")
        if value is None:
            return self.effective_config.min_insync_replicas
        return int(value)

    def _unclean_allowed(self, topic: str) -> bool:
        value = _applied_override(self.topic_configs.get(topic, {}),
                                  "unclean.leader.election.enable")
        if value is None:
            return bool(self.effective_config.unclean_leader_election_enable)
        return value == "true"

    def _on_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        """A topic's overrides changed in the store (or were read for the first time)."""
        if self.topic_configs.get(topic) == overrides:
            return
        self.topic_configs[topic] = overrides
        self.replicas.update_topic_config(topic)

    def _on_dynamic_broker_config(self, dynamic: dict[str, str]) -> None:
        """The dynamic broker configs changed: new defaults for every log without its own
        override, and for produce checks and elections."""
        self.effective_config, ignored = effective_broker_config(self.config, dynamic)
        for key, why in ignored.items():
            self.log.warn("ignoring the dynamic broker config {k}: {why}", k=key, why=why)
        self.default_log_config = log_config_from(self.effective_config)
        self.log.info("dynamic broker configs now {d}", d=dynamic)
        for topic in {t for t, _ in self.replicas.partitions}:
            self.replicas.update_topic_config(topic)

    async def _load_topic_config(self, topic: str) -> None:
        # No node, or an unreadable one (logged): no overrides, the broker defaults apply.
        self.topic_configs[topic], _ = await read_entity(self.store, paths.topic_config(topic))

    async def _ensure_topic_configs(self, topics: set[str]) -> None:
        """Reads the overrides of every topic not known yet. LeaderAndIsr waits for this
        before it makes a partition leader or follower here, so that the log opens with the
        topic's own settings and produces are checked against its own
        ``min.insync.replicas``: a produce that came between the two was once checked against
        the broker's default (acks=all with one replica of a topic that asks for two)."""
        self.dynamic_configs.watch_topics(topics)  # later changes come through the watches
        unknown = sorted(topics - self.topic_configs.keys())
        if not unknown:
            return
        try:  # one batched read: a LeaderAndIsr may bring thousands of new topics
            found = await self.store.get_many([paths.topic_config(t) for t in unknown])
        except Exception as e:  # the store is unreachable: serve, as before, with defaults
            self.log.warn("could not read the config of topics {t} before leading or "
                          "following them; using the broker defaults until the next metadata "
                          "update: {e}", t=unknown[:5], e=e)
            return
        for t, got in zip(unknown, found, strict=True):
            try:
                self.topic_configs[t] = {} if got is None else dict(
                    paths.TopicConfig.from_bytes(got[0]).config)
            except ValueError as e:  # unreadable: defaults, as a failed read
                self.log.warn("the config of topic {t} is unreadable; using the broker "
                              "defaults: {e}", t=t, e=e)

    def _on_metadata_update(self, topics: set[str]) -> None:
        # Every topic in the metadata gets a watch on its overrides; its first delivery reads
        # them (unless a LeaderAndIsr read them already), each later one applies a change. A
        # topic gone from the metadata (deleted) loses its watch and its overrides, so a topic
        # of the same name created later starts from its own.
        gone = {t for t in topics if t not in self.cache.topics}
        self.dynamic_configs.forget_topics(gone)
        for t in gone:
            self.topic_configs.pop(t, None)
        self.dynamic_configs.watch_topics(topics - gone)

    # -- start ---------------------------------------------------------------------------------

    def startService(self) -> defer.Deferred:  # noqa: N802 (Twisted API)
        super().startService()
        d = defer.Deferred.fromCoroutine(self._start())

        def failed(f: Any) -> None:
            if f.check(StartAbandoned):
                # Stopped while the start waited for the quorum: a stop, not a failure.
                # (``ready`` then fires with None: the stop's own Deferred says when it is over.)
                self.log.info("{e}", e=f.getErrorMessage())
                return None
            self.log.critical("broker {b} failed to start: {e}", b=self.broker_id,
                              e=f.getErrorMessage())
            if self.stop_reactor_on_failure:
                self._exit_after_failed_start()
            return f

        d.addErrback(failed)
        self.ready = d
        return d

    def _exit_after_failed_start(self) -> None:
        """Stop the process with exit status 1 (as ``kafka-server-start`` does), so a
        supervisor sees the failure. The start may fail before the reactor runs (the log
        directory check comes first), so the stop waits for it; the exit waits for the
        shutdown, which stops this service and closes what it opened."""
        import os  # noqa: PLC0415

        self.reactor.addSystemEventTrigger("after", "shutdown", os._exit, 1)
        if self.reactor.running:
            self.reactor.stop()
        else:
            self.reactor.callWhenRunning(self.reactor.stop)

    async def _start(self) -> None:
        cfg = self.config
        # First, before anything is opened: a TLS listener's files.
        try:
            tls_options = load_all_tls_options(self.listener_configs)
        except TlsFileError as e:
            raise StartupError(f"a TLS listener cannot start: {e}") from None
        self.io_pool.start()
        # In quorum mode the cluster id is known now (the quorum's); in ZooKeeper mode only
        # the broker id can be checked before the store answers.
        self._claim_log_dir(cfg.cluster_id if self.quorum is not None else None)
        if self.quorum is not None:
            from broker_core.raft.bootstrap_runner import BootstrapFailed  # noqa: PLC0415

            try:
                await self.quorum.start()
            except BootstrapFailed as e:
                raise StartupError(f"the metadata quorum node cannot start: {e}") from e
            started = self.quorum.started
            self.log.info("metadata quorum node {b} listening on {h}:{p} ({role}; voters {v})",
                          b=self.broker_id, h=self.quorum.listen[0], p=self.quorum.listen[1],
                          role="voter" if started.as_voter else "observer",
                          v=list(started.voter_ids))
        try:
            await self._through_quorum("opening the metadata session", self.store.start)
        except StartAbandoned:
            raise
        except AuthFailed as e:
            raise StartupError(str(e)) from None  # says why alone; a retry cannot help
        except Exception as e:
            if self.quorum is not None:
                raise StartupError(f"{e}. Are a majority of quorum.voters running?") from e
            raise StartupError(
                f"{e}. Is ZooKeeper running at {cfg.zookeeper_connect}? "
                "(scripts/zookeeper-start.sh starts one)") from e
        if isinstance(self.store, ZooKeeperStore):
            try:
                await self.store.secure_chroot()
            except NotAuthorized:
                raise StartupError(
                    f"ZooKeeper refused to secure the chroot of {cfg.zookeeper_connect}: its "
                    "ACL is for another credential; are zookeeper.auth.file and "
                    "zookeeper.auth.mechanism the ones the cluster's other brokers use?") from None
        self.store.add_state_listener(self._on_session_state)
        for path in paths.PERSISTENT_PATHS:
            await self._through_quorum(f"creating {path}",
                                       lambda path=path: self.store.ensure_path(path))
        if self.acl_cache is not None:
            # Every binding is read before any listener opens: with
            # allow.everyone.if.no.acl.found a DENY not read yet would be ignored.
            await self._load_acls(self.acl_cache.start())
        self.cluster_id = await self._through_quorum(f"agreeing on {paths.CLUSTER_ID}",
                                                     self._agree_cluster_id)
        self._claim_log_dir(self.cluster_id)
        # Before listening: a login that comes at once is checked against every user.
        await self.users.start()
        self.dynamic_configs.start()
        self.handler.cluster_id = self.cluster_id
        self.log_manager.load()
        self._logs_loaded = True
        self._report_recovery()
        self._check_log_dirs_at_start()
        for lc in self.listener_configs:
            bound = await bind(self.reactor, lc, self.factories[lc.name], tls_options.get(lc.name))
            self.listeners.append(bound)
            host = bound.port.getHost()
            self.log.info("broker {b} listener {n} ({proto}) on {h}:{p}, advertised as {a}",
                          b=self.broker_id, n=lc.name, proto=lc.protocol.value, h=host.host,
                          p=host.port, a=f"{bound.advertised[0]}:{bound.advertised[1]}")
        self.port = self.listeners[0].port
        self.advertised = next(b.advertised for b in self.listeners
                               if b.name == self.listener_configs.inter_broker)
        if cfg.metrics_listener:
            mep = endpoints.serverFromString(self.reactor, cfg.metrics_listener)
            hashes = cfg.metrics_password_hashes()
            users = (BasicAuthUsers(hashes, clock=self.clock.seconds)
                     if hashes is not None else None)
            self.metrics_port = await mep.listen(metrics_site(self.metrics.registry, users))
        await self._register()
        await self._startup_from_zookeeper()
        self.replicas.start()
        self.controller.start()
        self.heartbeats.start()
        self.coordinator.start()
        self.log.info("broker {b} started", b=self.broker_id)

    def _claim_log_dir(self, cluster_id: str | None) -> None:
        """Check and stamp every online log directory. A directory of another broker or
        cluster refuses the start; one that cannot be created or written (an ``OSError``) is
        offline from the start, and with none left the start fails."""
        states = self.log_manager.dir_states
        for d in states.online():
            try:
                d.mkdir(parents=True, exist_ok=True)
                meta_properties.check_and_claim(d, self.broker_id, cluster_id)
            except meta_properties.MetaPropertiesError as e:
                raise StartupError(str(e)) from None
            except OSError as e:
                self.log.critical("log directory {d} is offline from the start: {e}",
                                  d=str(d), e=e)
                self.log_manager.fail_dir(d, e)
        if states.all_offline():
            raise StartupError(self._all_offline_message())

    def _all_offline_message(self) -> str:
        states = self.log_manager.dir_states.statuses()
        return ("every log directory is offline: " + "; ".join(
            f"{s.path} ({s.error})" for s in states) + ". Free or repair them (or remove the "
            "failed ones from log.dirs) and start the broker again")

    def _check_log_dirs_at_start(self) -> None:
        for name, why in self.log_manager.load_errors.items():
            self.log.warn("log directory load: skipped {n}: {why}", n=name, why=why)
        for d in self.log_manager.dir_states.offline():
            self.log.critical("log directory {d} is offline: {e}", d=str(d),
                              e=self.log_manager.dir_states.status(d).error)
        if self.log_manager.dir_states.all_offline():
            raise StartupError(self._all_offline_message())

    # -- failed log directories ----------------------------------------------------------------

    def _offline_log_state(self) -> tuple[list[str], list[tuple[str, int]]]:
        lm = self.log_manager
        return [str(d) for d in lm.dir_states.offline()], sorted(lm.offline_partitions)

    def _on_log_dir_failure(self, status: Any, partitions: list[tuple[str, int]]) -> None:
        """A log directory went offline at run time (the replica manager stopped serving its
        partitions already): tell the controller, or stop the broker if none is left."""
        if self.log_manager.dir_states.all_offline():
            self._shut_down_for_failed_dirs()
            return
        self.log_dir_reporter.report()

    def _shut_down_for_failed_dirs(self, why: str | None = None) -> None:
        """Kafka's rule: a broker with no online log directory cannot serve anything; it stops
        (an orderly stop: the controller moves its leaderships, nothing is written in the failed
        directories) and the ``twistd broker`` process exits with status 1. So does a broker
        that cannot tell the controller which of its replicas are offline (``why``): stopped, it
        is a dead broker whose leaderships the controller moves."""
        if self._exiting_for_failed_dirs:
            return
        self._exiting_for_failed_dirs = True
        self.log.critical("shutting down broker {b}: {why}", b=self.broker_id,
                          why=why or self._all_offline_message())
        if self.stop_reactor_on_failure:
            self._exit_after_failed_start()
        elif self.running:
            d = self.stopService()
            d.addErrback(lambda f: self.log.failure("stop after every log directory failed", f))

    async def _agree_cluster_id(self) -> str:
        """The cluster's id from ``/cluster/id``, created by the first broker that finds none
        (Kafka's rule): in quorum mode the quorum's own id, in ZooKeeper mode a new random id.
        Two first brokers racing both read the winner's."""
        proposed = (self.config.cluster_id if self.quorum is not None
                    else generate_cluster_id())
        try:
            await self.store.create(paths.CLUSTER_ID, paths.cluster_id_to_bytes(proposed),
                                    makepath=True)
            self.log.info("created cluster id {c}", c=proposed)
            return proposed
        except NodeExists:
            pass
        data, _ = await self.store.get(paths.CLUSTER_ID)
        try:
            return paths.cluster_id_from_bytes(data)
        except ValueError as e:
            raise StartupError(str(e)) from None

    def _report_recovery(self) -> None:
        lm = self.log_manager
        for d in getattr(lm, "unclean_dirs", []):
            self.log.warn("log directory {d} was not shut down cleanly: recovering", d=str(d))
        for (topic, part), report in getattr(lm, "recovery_reports", {}).items():
            truncated = getattr(report, "bytes_truncated", 0)
            self.log.warn("recovered {t}-{p} {what}", t=topic, p=part, what=report.describe())
            self.metrics.log_recoveries_total.inc()
            self.metrics.log_truncated_bytes_total.inc(truncated or 0)
            self.metrics.log_recovery_segments_deleted_total.inc(report.segments_deleted)

    async def _through_quorum(self, what: str, step: Callable[[], Awaitable[Any]]) -> Any:
        """``await step()``; in quorum mode retried through the quorum's leader changes until it
        succeeds, fails for good, or the broker stops (:mod:`broker_core.raft.start_retry`:
        ``step`` must be idempotent). A quorum this node never saw a leader of was never
        reached (wrong ``quorum.voters``, cluster secret or cluster id, or no majority
        running): no retry, the step's own bound ends the start with its message; nor while
        this node's own quorum driver is not running (it stopped, e.g. on a disk error): the
        start ends with the error. In
        ZooKeeper mode the store's own session handling applies and a failure ends the start,
        as before."""
        if self.quorum is None:
            return await step()
        client = self.quorum.client
        return await self.start_retries.run(
            what, step, retry_if=lambda: client.leader_seen and client.running)

    async def _register(self) -> None:
        """Create ``/brokers/ids/[id]``. After a crash the previous session's node lingers until
        the store expires that session; wait for it (bounded) rather than fail. In quorum mode
        every attempt goes through the quorum's leader changes, and one restarts the bound:
        time without a leader is no evidence of another live broker, and a new leader may
        expire the old session later than the old leader would have."""
        host, port = self.advertised
        reg = paths.BrokerRegistration(
            self.broker_id, host, port, self.config.broker_rack, int(time.time() * 1000),
            endpoints=tuple(paths.ListenerEndpoint(b.name, *b.advertised)
                            for b in self.listeners),
            protocol_map=tuple(self.listener_configs.protocol_map().items()))
        path = paths.broker(self.broker_id)
        bound_s = 2 * self.config.zookeeper_session_timeout_ms / 1000 + 5
        deadline = self.clock.seconds() + bound_s
        while True:
            retries = self.start_retries.retries
            if await self._through_quorum(f"registering {path}",
                                          lambda: try_register(self.store, path, reg.to_bytes())):
                break
            if self.start_retries.retries != retries:
                deadline = self.clock.seconds() + bound_s
            if self.clock.seconds() > deadline:
                raise StartupError(
                    f"broker id {self.broker_id} is registered by another live broker "
                    f"({path} exists); broker ids must be unique")
            self.log.info("{p} still held by a previous session; waiting for it to expire",
                          p=path)
            await self.start_retries.sleep(1.0, f"waiting for {path}")
        stat = await self.store.exists(path)
        self.registration_epoch = stat.czxid if stat is not None else -1
        self.log.info("registered {p} (broker epoch {e})", p=path, e=self.registration_epoch)
        # A new epoch: offline directories are reported again (the controller only trusts a
        # record of the epoch it knows), or a previous incarnation's record is removed.
        self.log_dir_reporter.registered()
        waiters, self._registration_waiters = self._registration_waiters, []
        for d in waiters:
            d.callback(self.registration_epoch)

    def when_registered(self) -> defer.Deferred:
        """Fires with the broker epoch once this incarnation is registered (at once if it is).
        Controller commands wait for it: until then this broker cannot tell whether a command
        was meant for it or for its previous incarnation (KIP-380)."""
        if self.registration_epoch >= 0:
            return defer.succeed(self.registration_epoch)
        d: defer.Deferred = defer.Deferred()
        self._registration_waiters.append(d)
        return d

    async def _startup_from_zookeeper(self) -> None:
        """Take the last published state of every partition assigned here."""
        try:
            topics = await self.store.get_children(paths.TOPICS)
        except NoNode:
            topics = []
        assigned: set[tuple[str, int]] = set()
        states = []
        for topic in topics:
            try:
                data, _ = await self.store.get(paths.topic(topic))
            except NoNode:
                continue
            await self._load_topic_config(topic)
            for p, replicas in paths.TopicAssignment.from_bytes(data).partitions.items():
                if self.broker_id not in replicas:
                    continue
                assigned.add((topic, int(p)))
                try:
                    raw, stat = await self.store.get(paths.leader_and_isr(topic, int(p)))
                except NoNode:
                    continue
                v = paths.LeaderAndIsr.from_bytes(raw)
                if v.leader == self.broker_id:
                    # We led it before we restarted. Leading again at the old epoch could let
                    # this incarnation write over offsets the followers already hold;
                    # the controller sees the new registration and sends a new epoch.
                    self.log.info("startup: {t}-{p} was led by this broker at epoch {e}; "
                                  "waiting for the controller's LeaderAndIsr", t=topic, p=p,
                                  e=v.leader_epoch)
                    continue
                states.append((topic, int(p), LeaderAndIsrState(
                    v.leader, v.leader_epoch, tuple(v.isr), tuple(replicas),
                    v.controller_epoch, stat.version)))
        self.replicas.adopt_local_logs(assigned)
        if states:
            self.replicas.apply_leader_and_isr(-1, states, full=False)
        self.log.info("startup: {n} partitions assigned to this broker", n=len(assigned))

    def _on_session_state(self, state: SessionState) -> None:
        self.metrics.zookeeper_session_state.state(state.name.lower())
        if state is SessionState.LOST and self.running:
            self.log.warn("ZooKeeper session expired: re-registering broker {b}",
                          b=self.broker_id)
            self._pending_reregister = True
        elif state is SessionState.CONNECTED and getattr(self, "_pending_reregister", False):
            self._pending_reregister = False
            d = defer.Deferred.fromCoroutine(self._register())
            d.addErrback(lambda f: None if f.check(StartAbandoned)  # stopping meanwhile
                         else self.log.failure("re-registration failed", f))

    # -- stop ----------------------------------------------------------------------------------

    def stopService(self) -> defer.Deferred:  # noqa: N802 (Twisted API)
        super().stopService()
        return defer.Deferred.fromCoroutine(self._stop())

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships (controlled_shutdown), but give
        up as soon as the metadata session leaves CONNECTED: no controller can act then (the
        controller's decisions are metadata writes), and a controller paused for it holds the
        request until ``controller.socket.timeout.ms`` runs out (30 s: in quorum mode, the last
        brokers of a cluster stopped one after another lose the quorum's majority during their
        stop, and a supervisor's SIGKILL came first). ``controlled_shutdown`` checks the
        session before each attempt; this covers the attempt under way. The abandoned attempt
        is cancelled (it then finds the session suspended and returns, after its backoff)."""
        asked = defer.Deferred.fromCoroutine(controlled_shutdown(
            self.broker_id, self.registration_epoch, store=self.store,
            local_controller=self.controller, reactor=self.reactor,
            max_retries=self.config.controlled_shutdown_max_retries,
            backoff_s=self.config.controlled_shutdown_retry_backoff_ms / 1000.0,
            timeout_s=self.config.controller_socket_timeout_ms / 1000.0,
            credential=self.cluster_credential.login, tls=self.peer_tls))
        if not hasattr(self.store, "add_state_listener"):
            await asked
            return
        suspended: defer.Deferred = defer.Deferred()
        seen: list[SessionState] = []

        def on_state(state: SessionState) -> None:
            if state is not SessionState.CONNECTED and not suspended.called:
                seen.append(state)
                suspended.callback(state)

        self.store.add_state_listener(on_state)
        on_state(getattr(self.store, "state", SessionState.CONNECTED))
        try:
            _, which = await defer.DeferredList([asked, suspended], fireOnOneCallback=True,
                                                consumeErrors=True)
        finally:
            self.store.remove_state_listener(on_state)
        if which == 1:
            self.log.warn("controlled shutdown of broker {b} abandoned: the metadata session is "
                          "{state} (no store leader), so no controller can act on it",
                          b=self.broker_id, state=seen[0].name)
            asked.addErrback(lambda f: None)  # it ends on its own; nothing waits for it
            asked.cancel()
        else:
            suspended.cancel()

    async def _stop(self) -> None:
        self._pending_reregister = False
        self.start_retries.stop()  # a start still waiting for the quorum gives up at once
        self.log_dir_reporter.stop()
        self.log.info("broker {b} shutting down", b=self.broker_id)
        if self.quorum is not None:
            # From here on the writes are the controlled shutdown's, resignations, offsets and
            # the session's close: each worth a short wait (a healthy quorum commits in
            # milliseconds), not a long one when the rest of the quorum has gone too.
            self.quorum.begin_shutdown()
        if self.config.controlled_shutdown_enable and self.registration_epoch >= 0:
            # Before the listener closes: the controller's LeaderAndIsr that makes this broker
            # a follower arrives through it.
            await self._controlled_shutdown()
        for bound in self.listeners:
            await bound.port.stopListening()
        # Before the connections close: the coordinator writes its pending offsets and resigns
        # (closing its consumers' channels itself), so losing the channels fails no consumer.
        try:
            await self.coordinator.stop()
        except Exception:
            self.log.failure("consumer coordinator stop failed")
        for factory in self.factories.values():
            factory.close_all()
        self.heartbeats.stop()
        try:
            await self.controller.stop()
        except Exception:
            self.log.failure("controller stop failed")
        self.users.stop()
        self.dynamic_configs.stop()
        if self.acl_cache is not None:
            self.acl_cache.stop()
        try:
            await self.store.stop()
        except Exception:
            self.log.failure("metadata store close failed")
        if self.quorum is not None:
            try:
                await self.quorum.stop()
            except Exception:
                self.log.failure("metadata quorum node stop failed")
        await self.replicas.stop()
        if self.metrics_port is not None:
            await self.metrics_port.stopListening()
        from twisted.internet import threads

        if self._logs_loaded:
            await threads.deferToThreadPool(self.reactor, self.io_pool,
                                            self.log_manager.shutdown)
        self.io_pool.stop()
        if self._logs_loaded:
            self.log.info("broker {b} stopped cleanly", b=self.broker_id)
        else:
            self.log.info("broker {b} stopped (its log directory was not opened)",
                          b=self.broker_id)


_LOG_KEYS = {"segment.bytes", "segment.ms", "retention.bytes", "retention.ms", "flush.messages",
             "flush.ms", "index.interval.bytes", "max.message.bytes", "compression.type",
             "message.timestamp.type", "message.timestamp.difference.max.ms",
             "message.timestamp.before.max.ms", "message.timestamp.after.max.ms"}

