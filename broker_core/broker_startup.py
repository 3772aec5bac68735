"""The broker's start-up steps (docs/design.md#broker-start-up), each a function of the
:class:`~broker_core.broker.BrokerService` it starts: opening the metadata session, checking and
stamping the log directories, agreeing on the cluster id, listening, registering
``/brokers/ids/[id]`` and taking the published state of the partitions assigned here.

Invariants: nothing is read or written in a log directory before it is checked as this broker's
(and, once the cluster id is known, this cluster's); a step that talks to the quorum goes through
:func:`through_quorum`, so it must be idempotent; a failure that retrying cannot mend is a
:class:`StartupError` whose message says why and what to do.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer, endpoints

from broker_core import metadata_paths as paths
from broker_core.broker_topic_settings import load_topic_config
from broker_core.config.broker_config import BrokerConfig
from broker_core.log import meta_properties
from broker_core.metadata import AuthFailed, NodeExists, NoNode, NotAuthorized
from broker_core.metrics import metrics_site
from broker_core.raft.cluster_id import generate_cluster_id
from broker_core.raft.start_retry import StartAbandoned
from broker_core.replica.partition import LeaderAndIsrState
from broker_core.security.basic_auth import BasicAuthUsers, metrics_password_hashes
from broker_core.security.cluster_secret import load_cluster_credential
from broker_core.server.listener_endpoints import bind
from broker_core.zk.acl_policy import broker_acl_policy
from broker_core.zk.store import ZooKeeperStore

if TYPE_CHECKING:
    from broker_core.broker import BrokerService

#: Longest a start waits for the ACL cache's first load (authorizer.enabled) before it fails:
#: the store answered everything before it, so only a store that hangs takes this long.
ACL_FIRST_LOAD_TIMEOUT_S = 60.0


class StartupError(Exception):
    """The broker cannot start; the message says why and what to do."""


def check_secret_files(cfg: BrokerConfig) -> None:
    """Read every secret file ``cfg`` names, as the broker will, so that a missing, open or
    malformed one refuses the start (ConfigError naming its key) before anything runs: the
    ZooKeeper credential (ZooKeeper mode), the /metrics users, then the cluster secret, which
    is required (the message says how to make one)."""
    if cfg.metadata_store != "quorum":
        broker_acl_policy(cfg)
    metrics_password_hashes(cfg)
    load_cluster_credential(cfg)


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


async def load_acls(broker: BrokerService, loaded: defer.Deferred) -> None:
    """Wait (bounded) for the ACL cache's first load; a StartupError says why not."""
    loaded.addTimeout(ACL_FIRST_LOAD_TIMEOUT_S, broker.clock)
    try:
        await loaded
    except defer.TimeoutError:
        raise StartupError(
            f"the ACLs could not be read from the metadata store within "
            f"{ACL_FIRST_LOAD_TIMEOUT_S:g} s; the listeners stay closed rather than "
            "serve clients without them") from None


def claim_log_dirs(broker: BrokerService, cluster_id: str | None) -> None:
    """Check and stamp every online log directory. A directory of another broker or
    cluster refuses the start; one that cannot be created or written (an ``OSError``) is
    offline from the start, and with none left the start fails."""
    states = broker.log_manager.dir_states
    for d in states.online():
        try:
            d.mkdir(parents=True, exist_ok=True)
            meta_properties.check_and_claim(d, broker.broker_id, cluster_id)
        except meta_properties.MetaPropertiesError as e:
            raise StartupError(str(e)) from None
        except OSError as e:
            broker.log.critical("log directory {d} is offline from the start: {e}",
                              d=str(d), e=e)
            broker.log_manager.fail_dir(d, e)
    if states.all_offline():
        raise StartupError(all_offline_message(broker))


def all_offline_message(broker: BrokerService) -> str:
    states = broker.log_manager.dir_states.statuses()
    return ("every log directory is offline: " + "; ".join(
        f"{s.path} ({s.error})" for s in states) + ". Free or repair them (or remove the "
        "failed ones from log.dirs) and start the broker again")


def check_log_dirs_at_start(broker: BrokerService) -> None:
    for name, why in broker.log_manager.load_errors.items():
        broker.log.warn("log directory load: skipped {n}: {why}", n=name, why=why)
    for d in broker.log_manager.dir_states.offline():
        broker.log.critical("log directory {d} is offline: {e}", d=str(d),
                          e=broker.log_manager.dir_states.status(d).error)
    if broker.log_manager.dir_states.all_offline():
        raise StartupError(all_offline_message(broker))


async def agree_cluster_id(broker: BrokerService) -> str:
    """The cluster's id from ``/cluster/id``, created by the first broker that finds none
    (Kafka's rule): in quorum mode the quorum's own id, in ZooKeeper mode a new random id.
    Two first brokers racing both read the winner's."""
    proposed = (broker.config.cluster_id if broker.quorum is not None
                else generate_cluster_id())
    try:
        await broker.store.create(paths.CLUSTER_ID, paths.cluster_id_to_bytes(proposed),
                                makepath=True)
        broker.log.info("created cluster id {c}", c=proposed)
        return proposed
    except NodeExists:
        pass
    data, _ = await broker.store.get(paths.CLUSTER_ID)
    try:
        return paths.cluster_id_from_bytes(data)
    except ValueError as e:
        raise StartupError(str(e)) from None


def report_recovery(broker: BrokerService) -> None:
    lm = broker.log_manager
    for d in getattr(lm, "unclean_dirs", []):
        broker.log.warn("log directory {d} was not shut down cleanly: recovering", d=str(d))
    for (topic, part), report in getattr(lm, "recovery_reports", {}).items():
        truncated = getattr(report, "bytes_truncated", 0)
        broker.log.warn("recovered {t}-{p} {what}", t=topic, p=part, what=report.describe())
        broker.metrics.log_recoveries_total.inc()
        broker.metrics.log_truncated_bytes_total.inc(truncated or 0)
        broker.metrics.log_recovery_segments_deleted_total.inc(report.segments_deleted)


async def through_quorum(broker: BrokerService, what: str,
                         step: Callable[[], Awaitable[Any]]) -> Any:
    """``await step()``; in quorum mode retried through the quorum's leader changes until it
    succeeds, fails for good, or the broker stops (:mod:`broker_core.raft.start_retry`:
    ``step`` must be idempotent). A quorum this node never saw a leader of was never
    reached (wrong ``quorum.voters``, cluster secret or cluster id, or no majority
    running): no retry, the step's own bound ends the start with its message; nor while
    this node's own quorum driver is not running (it stopped, e.g. on a disk error): the
    start ends with the error. In
    ZooKeeper mode the store's own session handling applies and a failure ends the start,
    as before."""
    if broker.quorum is None:
        return await step()
    client = broker.quorum.client
    return await broker.start_retries.run(
        what, step, retry_if=lambda: client.leader_seen and client.running)


async def register(broker: BrokerService) -> None:
    """Create ``/brokers/ids/[id]``. After a crash the previous session's node lingers until
    the store expires that session; wait for it (bounded) rather than fail. In quorum mode
    every attempt goes through the quorum's leader changes, and one restarts the bound:
    time without a leader is no evidence of another live broker, and a new leader may
    expire the old session later than the old leader would have."""
    host, port = broker.advertised
    reg = paths.BrokerRegistration(
        broker.broker_id, host, port, broker.config.broker_rack, int(time.time() * 1000),
        endpoints=tuple(paths.ListenerEndpoint(b.name, *b.advertised)
                        for b in broker.listeners),
        protocol_map=tuple(broker.listener_configs.protocol_map().items()))
    path = paths.broker(broker.broker_id)
    bound_s = 2 * broker.config.zookeeper_session_timeout_ms / 1000 + 5
    deadline = broker.clock.seconds() + bound_s
    while True:
        retries = broker.start_retries.retries
        if await through_quorum(broker, f"registering {path}",
                                      lambda: try_register(broker.store, path, reg.to_bytes())):
            break
        if broker.start_retries.retries != retries:
            deadline = broker.clock.seconds() + bound_s
        if broker.clock.seconds() > deadline:
            raise StartupError(
                f"broker id {broker.broker_id} is registered by another live broker "
                f"({path} exists); broker ids must be unique")
        broker.log.info("{p} still held by a previous session; waiting for it to expire",
                      p=path)
        await broker.start_retries.sleep(1.0, f"waiting for {path}")
    stat = await broker.store.exists(path)
    broker.registration_epoch = stat.czxid if stat is not None else -1
    broker.log.info("registered {p} (broker epoch {e})", p=path, e=broker.registration_epoch)
    # A new epoch: offline directories are reported again (the controller only trusts a
    # record of the epoch it knows), or a previous incarnation's record is removed.
    broker.log_dir_reporter.registered()
    waiters, broker._registration_waiters = broker._registration_waiters, []
    for d in waiters:
        d.callback(broker.registration_epoch)


async def adopt_assigned_partitions(broker: BrokerService) -> None:
    """Take the last published state of every partition assigned here."""
    try:
        topics = await broker.store.get_children(paths.TOPICS)
    except NoNode:
        topics = []
    assigned: set[tuple[str, int]] = set()
    states = []
    for topic in topics:
        try:
            data, _ = await broker.store.get(paths.topic(topic))
        except NoNode:
            continue
        await load_topic_config(broker, topic)
        for p, replicas in paths.TopicAssignment.from_bytes(data).partitions.items():
            if broker.broker_id not in replicas:
                continue
            assigned.add((topic, int(p)))
            try:
                raw, stat = await broker.store.get(paths.leader_and_isr(topic, int(p)))
            except NoNode:
                continue
            v = paths.LeaderAndIsr.from_bytes(raw)
            if v.leader == broker.broker_id:
                # We led it before we restarted. Leading again at the old epoch could let
                # this incarnation write over offsets the followers already hold;
                # the controller sees the new registration and sends a new epoch.
                broker.log.info("startup: {t}-{p} was led by this broker at epoch {e}; "
                              "waiting for the controller's LeaderAndIsr", t=topic, p=p,
                              e=v.leader_epoch)
                continue
            states.append((topic, int(p), LeaderAndIsrState(
                v.leader, v.leader_epoch, tuple(v.isr), tuple(replicas),
                v.controller_epoch, stat.version)))
    broker.replicas.adopt_local_logs(assigned)
    if states:
        broker.replicas.apply_leader_and_isr(-1, states, full=False)
    broker.log.info("startup: {n} partitions assigned to this broker", n=len(assigned))




async def open_store(broker: BrokerService) -> None:
    """Open the metadata session (through the quorum's leader changes in quorum mode), secure
    a ZooKeeper chroot, watch the session's state and create the persistent paths. A store
    that cannot be reached fails the start with a message naming what to check."""
    cfg = broker.config
    try:
        await through_quorum(broker, "opening the metadata session", broker.store.start)
    except StartAbandoned:
        raise
    except AuthFailed as e:
        raise StartupError(str(e)) from None  # says why alone; a retry cannot help
    except Exception as e:
        if broker.quorum is not None:
            raise StartupError(f"{e}. Are a majority of quorum.voters running?") from e
        raise StartupError(
            f"{e}. Is ZooKeeper running at {cfg.zookeeper_connect}? "
            "(scripts/zookeeper-start.sh starts one)") from e
    if isinstance(broker.store, ZooKeeperStore):
        try:
            await broker.store.secure_chroot()
        except NotAuthorized:
            raise StartupError(
                f"ZooKeeper refused to secure the chroot of {cfg.zookeeper_connect}: its "
                "ACL is for another credential; are zookeeper.auth.file and "
                "zookeeper.auth.mechanism the ones the cluster's other brokers use?") from None
    broker.store.add_state_listener(broker._on_session_state)
    for path in paths.PERSISTENT_PATHS:
        await through_quorum(broker, f"creating {path}",
                             lambda path=path: broker.store.ensure_path(path))


async def bind_listeners(broker: BrokerService, tls_options: dict[str, Any]) -> None:
    """Listen on every configured listener (in order) and on the metrics listener if one is
    configured; record the first listener's port and the inter-broker listener's advertised
    address (the registration's host and port)."""
    cfg = broker.config
    for lc in broker.listener_configs:
        bound = await bind(broker.reactor, lc, broker.factories[lc.name],
                           tls_options.get(lc.name))
        broker.listeners.append(bound)
        host = bound.port.getHost()
        broker.log.info("broker {b} listener {n} ({proto}) on {h}:{p}, advertised as {a}",
                        b=broker.broker_id, n=lc.name, proto=lc.protocol.value, h=host.host,
                        p=host.port, a=f"{bound.advertised[0]}:{bound.advertised[1]}")
    broker.port = broker.listeners[0].port
    broker.advertised = next(b.advertised for b in broker.listeners
                             if b.name == broker.listener_configs.inter_broker)
    if cfg.metrics_listener:
        mep = endpoints.serverFromString(broker.reactor, cfg.metrics_listener)
        hashes = metrics_password_hashes(cfg)
        users = (BasicAuthUsers(hashes, clock=broker.clock.seconds)
                 if hashes is not None else None)
        broker.metrics_port = await mep.listen(metrics_site(broker.metrics.registry, users))
