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
6. stand for controller election, and for the coordinator shards this broker should own.

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

The steps live beside this module: :mod:`broker_core.broker_startup` (start-up and
registration), :mod:`broker_core.broker_topic_settings` (per-topic settings and dynamic
configs) and :mod:`broker_core.broker_shutdown` (the stop); :class:`BrokerService` builds the
parts, holds their state and runs the steps in order.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from twisted.application import service
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from broker_core import broker_shutdown, broker_startup, broker_topic_settings
from broker_core import metadata_paths as paths
from broker_core.acl_store import AclCache
from broker_core.broker_startup import StartupError as StartupError
from broker_core.broker_startup import try_register as try_register
from broker_core.broker_topic_settings import log_config_from as log_config_from
from broker_core.config.broker_config import BrokerConfig
from broker_core.config.parsing import ConfigError
from broker_core.controller.controller import Controller
from broker_core.controller.heartbeat_sender import ControllerHeartbeatSender
from broker_core.dynamic_config import DynamicConfigWatcher
from broker_core.log import LogConfig, LogManager
from broker_core.metadata import SessionState
from broker_core.metadata_cache import MetadataCache
from broker_core.metrics import BrokerMetrics
from broker_core.raft.start_retry import QuorumStartRetries, StartAbandoned
from broker_core.replica.fetcher import FetcherConfig
from broker_core.replica.log_dir_reporter import LogDirFailureReporter
from broker_core.replica.manager import ReplicaManager
from broker_core.replica.published_leadership import adopt_published_leadership
from broker_core.security.acl import Authorizer
from broker_core.security.cluster_secret import load_cluster_credential
from broker_core.security.peer_tls import PeerTls
from broker_core.security.sasl import SaslSettings
from broker_core.security.user_store import UserCredentialCache
from broker_core.server.connection_limits import ServerLimits
from broker_core.server.handlers import RequestHandler
from broker_core.server.listener_endpoints import (
    BoundListener,
    TlsFileError,
    load_all_tls_options,
    load_peer_tls,
)
from broker_core.server.protocol import KafkaServerFactory
from broker_core.zk.acl_policy import broker_acl_policy
from broker_core.zk.store import ZooKeeperStore
from coordinator.service import CoordinatorConfig
from coordinator.shards import CoordinatorShards

#: In the quorum data directory: the metadata session a stop could not close (the quorum had
#: gone), which the next start closes before it registers (see
#: :mod:`broker_core.raft.metadata_store`).
LEFT_OPEN_SESSION_FILE = "metadata-session-left-open"


class BrokerService(service.Service):
    """One broker; see the module docstring for the start and stop sequences."""

    log = Logger(namespace="sluice.broker")

    def __init__(self, config: BrokerConfig, *, reactor: Any, registry: Any = None,
                 store: Any = None, stop_reactor_on_failure: bool = False) -> None:
        self.config = config
        #: The cluster secret (``cluster.secret.file``, required: ConfigError without it),
        #: read once: every listener checks the cluster login against it and every connection
        #: this broker opens to another broker or quorum node logs in with it.
        self.cluster_credential = load_cluster_credential(config)
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
            acl_policy=broker_acl_policy(config))
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
            self.store, self.broker_id,
            on_topic=partial(broker_topic_settings.on_topic_config, self),
            on_broker=partial(broker_topic_settings.on_dynamic_broker_config, self))
        self.log_manager = LogManager(self.log_dirs, self.default_log_config,
                                      time_ms=lambda: int(self.clock.seconds() * 1000),
                                      max_open_segments=config.log_open_segments_max)
        self._build_replication(config, reactor)
        #: Every user's SCRAM credentials, kept current by watches (the SASL logins' lookup).
        self.users = UserCredentialCache(self.store)
        self.registration_epoch = -1
        #: The cluster's id (``/cluster/id``), known once the store is connected.
        self.cluster_id: str | None = None
        # Only a loaded log directory is checkpointed and marked clean at stop: one refused at
        # start (another broker's, another cluster's) is left exactly as it was.
        self._logs_loaded = False
        self._registration_waiters: list[defer.Deferred] = []
        self._build_serving(config)
        self.port: Any = None
        #: Every bound listener, in configured order, once started.
        self.listeners: list[BoundListener] = []
        self.metrics_port: Any = None
        #: The inter-broker listener's advertised address (the registration's host and port).
        self.advertised: tuple[str, int] | None = None
        self._export_metrics()

    def _build_replication(self, config: BrokerConfig, reactor: Any) -> None:
        """The replica manager, the log-directory failure reporter, the controller, the
        heartbeats to it and the consumer coordinator (their callbacks read this service's
        state when called, so the order among them is free)."""
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
        self.coordinator = CoordinatorShards(
            self.broker_id, self.store, clock=self.clock,
            config=CoordinatorConfig.from_broker_config(config),
            configured_shards=config.group_coordinator_shards,
            brokers=lambda: self.cache.brokers.values(), metrics=self.metrics)

    def _build_serving(self, config: BrokerConfig) -> None:
        """The ACLs (authorizer.enabled), the request handler and one server factory per
        listener, all sharing the one handler."""
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
            on_metadata_update=partial(broker_topic_settings.on_metadata_update, self),
            load_topic_configs=partial(broker_topic_settings.ensure_topic_configs, self),
            controller=self.controller,
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

    def _export_metrics(self) -> None:
        """Gauges read from the replica manager, the log directories and the controller."""
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

    # -- configuration (broker_core.broker_topic_settings) ----------------------------------

    def _topic_log_config(self, topic: str) -> LogConfig:
        return broker_topic_settings.topic_log_config(self, topic)

    def _min_insync_replicas(self, topic: str) -> int:
        return broker_topic_settings.min_insync_replicas(self, topic)

    def _unclean_allowed(self, topic: str) -> bool:
        return broker_topic_settings.unclean_allowed(self, topic)

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
        """The start-up sequence of the module docstring, in order; each step is a function of
        :mod:`broker_core.broker_startup`."""
        cfg = self.config
        # First, before anything is opened: the secret files (twistd's option parsing read them
        # already; a broker built in-process or embedded has not), then a TLS listener's files.
        broker_startup.check_secret_files(cfg)
        try:
            tls_options = load_all_tls_options(self.listener_configs)
        except TlsFileError as e:
            raise StartupError(f"a TLS listener cannot start: {e}") from None
        self.io_pool.start()
        # In quorum mode the cluster id is known now (the quorum's); in ZooKeeper mode only
        # the broker id can be checked before the store answers.
        broker_startup.claim_log_dirs(self, cfg.cluster_id if self.quorum is not None else None)
        if self.quorum is not None:
            await self._start_quorum_node()
        await broker_startup.open_store(self)
        if self.acl_cache is not None:
            # Every binding is read before any listener opens: with
            # allow.everyone.if.no.acl.found a DENY not read yet would be ignored.
            await broker_startup.load_acls(self, self.acl_cache.start())
        self.cluster_id = await broker_startup.through_quorum(
            self, f"agreeing on {paths.CLUSTER_ID}", lambda: broker_startup.agree_cluster_id(self))
        broker_startup.claim_log_dirs(self, self.cluster_id)
        # Before listening: a login that comes at once is checked against every user.
        await self.users.start()
        self.dynamic_configs.start()
        self.handler.cluster_id = self.cluster_id
        self.log_manager.load()
        self._logs_loaded = True
        broker_startup.report_recovery(self)
        broker_startup.check_log_dirs_at_start(self)
        await broker_startup.bind_listeners(self, tls_options)
        await broker_startup.register(self)
        await broker_startup.adopt_assigned_partitions(self)
        self.replicas.start()
        self.controller.start()
        self.heartbeats.start()
        self.coordinator.start()
        self.log.info("broker {b} started", b=self.broker_id)

    async def _start_quorum_node(self) -> None:
        """Start this broker's own metadata-quorum node (quorum mode)."""
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
                          why=why or broker_startup.all_offline_message(self))
        if self.stop_reactor_on_failure:
            self._exit_after_failed_start()
        elif self.running:
            d = self.stopService()
            d.addErrback(lambda f: self.log.failure("stop after every log directory failed", f))

    def when_registered(self) -> defer.Deferred:
        """Fires with the broker epoch once this incarnation is registered (at once if it is).
        Controller commands wait for it: until then this broker cannot tell whether a command
        was meant for it or for its previous incarnation (KIP-380)."""
        if self.registration_epoch >= 0:
            return defer.succeed(self.registration_epoch)
        d: defer.Deferred = defer.Deferred()
        self._registration_waiters.append(d)
        return d

    def _on_session_state(self, state: SessionState) -> None:
        self.metrics.zookeeper_session_state.state(state.name.lower())
        if state is SessionState.LOST and self.running:
            self.log.warn("ZooKeeper session expired: re-registering broker {b}",
                          b=self.broker_id)
            self._pending_reregister = True
        elif state is SessionState.CONNECTED and getattr(self, "_pending_reregister", False):
            self._pending_reregister = False
            d = defer.Deferred.fromCoroutine(broker_startup.register(self))
            d.addErrback(lambda f: None if f.check(StartAbandoned)  # stopping meanwhile
                         else self.log.failure("re-registration failed", f))

    # -- stop ----------------------------------------------------------------------------------

    def stopService(self) -> defer.Deferred:  # noqa: N802 (Twisted API)
        super().stopService()
        return defer.Deferred.fromCoroutine(broker_shutdown.stop(self))

    async def _controlled_shutdown(self) -> None:
        """:func:`broker_core.broker_shutdown.controlled_shutdown_bounded`."""
        await broker_shutdown.controlled_shutdown_bounded(self)
