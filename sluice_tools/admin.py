"""Admin client: topic and cluster administration through a broker (Kafka APIs) or directly
through ZooKeeper (the same :mod:`broker_core.topic_admin` functions the brokers use).

ZooKeeper mode runs a private reactor for the duration of each call (the admin tool is a one-shot
process); bootstrap mode is a plain blocking connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker_core import acl_store, topic_admin
from broker_core import metadata_paths as paths
from broker_core.config.metadata_keys import SASL_DIGEST_MD5
from broker_core.security.acl import AclBinding, AclFilter
from broker_core.security.acl import binding as acl_binding
from broker_core.server import user_admin
from broker_core.topic_admin import (
    ClusterDescription,
    PartitionDescription,
    TopicDescription,
)
from broker_core.wire.apis import ApiKey
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.describe_configs import ConfigSource, ResourceType
from broker_core.wire.messages.describe_user_scram_credentials import (
    MECHANISM_CODES,
    MECHANISM_TYPES,
)
from broker_core.wire.messages.find_coordinator import KEY_TYPE_GROUP
from consumer_client.connection import BrokerConnection, UnsupportedVersionError, bootstrap
from consumer_client.security import ClientSecurity


class AdminError(Exception):
    """An operation failed; the message names the Kafka error and says why."""

    def __init__(self, code: int | None, message: str) -> None:
        """``code`` is a Kafka error code, or None for a failure outside the protocol (such as
        an unreachable ZooKeeper): then the message stands alone."""
        if code is None:
            super().__init__(message)
        else:
            name = error_name(code)
            super().__init__(f"{name}: {message}" if message else name)
        self.code = code


def zookeeper_acl_policy(auth_file: str | None, mechanism: str = SASL_DIGEST_MD5) -> Any:
    """The ``AclPolicy`` an admin session starts with: with the brokers'
    ``zookeeper.auth.file`` it authenticates as the brokers (by ``mechanism``, the brokers'
    ``zookeeper.auth.mechanism``), else it is anonymous; it sets no ACL until
    :func:`_follow_cluster_acls` has looked at the cluster. Raises AdminError for a bad file
    or mechanism."""
    from broker_core.config.metadata_keys import parse_mechanism  # noqa: PLC0415
    from broker_core.zk.acl_policy import AclPolicy, ZkAuthFileError, ZkCredential

    try:
        mechanism = parse_mechanism(mechanism)
    except ValueError as e:
        raise AdminError(None, str(e)) from None
    if auth_file is None:
        return AclPolicy()
    try:
        return AclPolicy(ZkCredential.from_file(auth_file, "--zookeeper-auth-file", mechanism))
    except ZkAuthFileError as e:
        raise AdminError(None, str(e)) from None


async def _follow_cluster_acls(store: Any) -> None:
    """Create nodes as the cluster's brokers do: secured when ``/brokers`` is (no write for
    the world; brokers with ``zookeeper.set.acl=true`` made it so), open otherwise, where
    brokers without the credential must still be able to change them."""
    from broker_core.metadata import NoNode
    from broker_core.zk.acl_policy import READ, AclPolicy

    policy = store.acl_policy
    if policy.credential is None:
        return
    try:
        acl = await store.get_acl(paths.BROKERS)
    except NoNode:
        return
    secured = not any(e.scheme == "world" and e.perms & ~READ for e in acl)
    store.acl_policy = AclPolicy(policy.credential, set_acl=secured)


def _run_on_store(zookeeper: str, fn: Callable[[Any], Any], acl_policy: Any = None) -> Any:
    """Run ``await fn(store)`` against a fresh ZooKeeperStore and wait for it. A session that
    cannot start is an :class:`AdminError` saying why (unreachable, login refused, or the
    client's own reason, e.g. an address it cannot parse), never a guess.

    The store runs on the process's reactor thread (:class:`ReactorThread`), started on first
    use and kept for the next call: a process may run any number of these operations (a reactor
    cannot be started twice, so running each on a reactor of its own would fail the second)."""
    from twisted.internet import defer

    from broker_core.metadata import AuthFailed, ConnectionLost, NotAuthorized, TransactionFailed
    from broker_core.zk.store import ZooKeeperStore
    from consumer_client.reactor_thread import ReactorThread

    box: dict[str, Any] = {}

    async def main() -> None:
        try:
            store = ZooKeeperStore(zookeeper, reactor=thread.reactor, connect_timeout=10.0,
                                   acl_policy=acl_policy)
            await store.start()
        except (ConnectionLost, AuthFailed) as e:  # their messages name ZooKeeper and why
            box["error"] = AdminError(None, str(e))
            return
        except Exception as e:  # e.g. a --zookeeper the client cannot parse: say so
            box["error"] = AdminError(None, f"could not start a ZooKeeper session with "
                                            f"{zookeeper!r}: {e}")
            return
        try:
            await _follow_cluster_acls(store)
            box["result"] = await fn(store)
        except BaseException as e:  # handed to the caller after the reactor stops
            box["error"] = e
        finally:
            await store.stop()

    thread = ReactorThread.get()
    try:
        thread.call(lambda: defer.Deferred.fromCoroutine(main()))
    except Exception as e:
        if "error" not in box:  # closing the session failed after the work: the real cause
            raise AdminError(None, f"the ZooKeeper session with {zookeeper!r} failed: "
                                   f"{e}") from e
    if "error" in box:
        err = box["error"]
        if isinstance(err, topic_admin.TopicAdminError):
            raise AdminError(int(err.error_code), str(err)) from None
        if isinstance(err, TransactionFailed) and isinstance(err.first_error, NotAuthorized):
            err = err.first_error
        if isinstance(err, NotAuthorized):
            raise AdminError(None, "ZooKeeper refused the change (NoAuth): the cluster's znodes "
                             "are secured; pass the brokers' zookeeper.auth.file with "
                             "--zookeeper-auth-file") from None
        raise err
    return box.get("result")


@dataclass(frozen=True)
class UserDescription:
    """A SCRAM user: its name and ``(mechanism, iterations)`` per credential."""

    user: str
    credentials: list[tuple[str, int]]


class AdminClient:
    """Exactly one of ``bootstrap_servers`` or ``zookeeper``."""

    def __init__(self, bootstrap_servers: str | None = None, zookeeper: str | None = None,
                 timeout: float = 30.0, zookeeper_auth_file: str | None = None,
                 security: ClientSecurity | None = None,
                 zookeeper_auth_mechanism: str = SASL_DIGEST_MD5) -> None:
        """``zookeeper_auth_file``: the brokers' ``zookeeper.auth.file``, needed to change a
        cluster whose znodes are secured (``zookeeper.set.acl``), proven by
        ``zookeeper_auth_mechanism`` (the brokers' ``zookeeper.auth.mechanism``).
        ``security``: how to reach the brokers' listener (TLS, SASL; default PLAINTEXT)."""
        if (bootstrap_servers is None) == (zookeeper is None):
            raise ValueError("give exactly one of bootstrap_servers or zookeeper")
        if zookeeper_auth_file is not None and zookeeper is None:
            raise ValueError("zookeeper_auth_file goes with zookeeper")
        if security is not None and bootstrap_servers is None:
            raise ValueError("client security settings go with bootstrap_servers")
        self.security = security
        self.bootstrap_servers = bootstrap_servers
        self.zookeeper = zookeeper
        self.timeout = timeout
        self.zookeeper_auth_file = zookeeper_auth_file
        self.zookeeper_auth_mechanism = zookeeper_auth_mechanism

    def _conn(self) -> Any:
        return bootstrap(self.bootstrap_servers, timeout=self.timeout, security=self.security)

    def _zk(self, fn: Callable[[Any], Any]) -> Any:
        return _run_on_store(self.zookeeper, fn, zookeeper_acl_policy(self.zookeeper_auth_file,
                                                             self.zookeeper_auth_mechanism))

    # -- ZooKeeper ACLs -------------------------------------------------------------------------

    def secure_zookeeper(self, *, unsecure: bool = False, dry_run: bool = False) -> list[Any]:
        """Give every znode of the cluster the secured ACL (or, with ``unsecure``, open it to
        all); returns the changes (``AclChange``), made unless ``dry_run``. Needs
        ``zookeeper`` and ``zookeeper_auth_file`` (:mod:`broker_core.zk.secure_tree`)."""
        from broker_core.zk.secure_tree import SecureTreeError, secure_tree, target_acl

        if self.zookeeper is None or self.zookeeper_auth_file is None:
            raise ValueError("securing ZooKeeper needs --zookeeper and the brokers' auth file")
        policy = zookeeper_acl_policy(self.zookeeper_auth_file, self.zookeeper_auth_mechanism)
        target = target_acl(policy.credential, unsecure=unsecure)
        try:
            return _run_on_store(self.zookeeper,
                                 lambda s: secure_tree(s, target, apply=not dry_run), policy)
        except SecureTreeError as e:
            raise AdminError(None, str(e)) from None

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     config: Mapping[str, str] | None = None) -> None:
        if self.zookeeper:
            self._zk(lambda s: topic_admin.create_topic(s, name, partitions, replication_factor,
                                                        config or {}))
            return
        with self._conn() as c:
            resp = c.request(ApiKey.CREATE_TOPICS, {
                "topics": [{"name": name, "num_partitions": partitions,
                            "replication_factor": replication_factor, "assignments": [],
                            "configs": [{"name": k, "value": v}
                                        for k, v in (config or {}).items()]}],
                "timeout_ms": int(self.timeout * 1000), "validate_only": False})
        t = resp.topics[0]
        if t.error_code:
            raise AdminError(t.error_code, t.error_message or "")

    def delete_topic(self, name: str) -> None:
        if self.zookeeper:
            self._zk(lambda s: topic_admin.delete_topic(s, name))
            return
        with self._conn() as c:
            resp = c.request(ApiKey.DELETE_TOPICS, {"topic_names": [name],
                                                    "timeout_ms": int(self.timeout * 1000)})
        r = resp.responses[0]
        if r.error_code:
            raise AdminError(r.error_code, getattr(r, "error_message", None) or "")

    def add_partitions(self, name: str, total: int) -> None:
        if self.zookeeper:
            self._zk(lambda s: topic_admin.add_partitions(s, name, total))
            return
        with self._conn() as c:
            resp = c.request(ApiKey.CREATE_PARTITIONS, {
                "topics": [{"name": name, "count": total, "assignments": None}],
                "timeout_ms": int(self.timeout * 1000), "validate_only": False})
        r = resp.results[0]
        if r.error_code:
            raise AdminError(r.error_code, r.error_message or "")

    def list_topics(self) -> list[str]:
        if self.zookeeper:
            return self._zk(topic_admin.list_topics)
        return sorted(t.name for t in self._metadata(None).topics if t.error_code == 0)

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """Partitions and config overrides of ``names`` (default: every topic).

        Both modes report the same ``config``: the topic's overrides only (what
        ``/config/topics/[topic]`` holds), not the broker defaults. Bootstrap mode gets them with
        DescribeConfigs (the entries whose source is ``DYNAMIC_TOPIC_CONFIG``); a broker that
        does not serve DescribeConfigs yields empty configs rather than an error.
        """
        if self.zookeeper:
            return self._zk(lambda s: topic_admin.describe_topics(s, names))
        with self._conn() as c:
            md = self._metadata_on(c, list(names) if names else None)
            topics = sorted(md.topics, key=lambda t: t.name)
            for t in topics:
                if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise AdminError(t.error_code, f"topic {t.name!r} does not exist")
            overrides = _topic_overrides(c, [t.name for t in topics])
        out = []
        for t in topics:
            parts = [PartitionDescription(p.partition_index, list(p.replica_nodes), p.leader_id,
                                          p.leader_epoch, list(p.isr_nodes))
                     for p in sorted(t.partitions, key=lambda p: p.partition_index)]
            out.append(TopicDescription(t.name, parts, overrides.get(t.name, {})))
        return out

    def describe_cluster(self) -> ClusterDescription:
        if self.zookeeper:
            return self._zk(topic_admin.describe_cluster)
        md = self._metadata([])
        brokers = [paths.BrokerRegistration(b.node_id, b.host, b.port, b.rack)
                   for b in sorted(md.brokers, key=lambda b: b.node_id)]
        # The controller epoch lives in ZooKeeper only: ask with --zookeeper to see it.
        return ClusterDescription(brokers, md.controller_id if md.controller_id >= 0 else None,
                                  None)

    # -- replica reassignment and preferred-leader election -----------------------------------
    #
    # Through ZooKeeper: topic_admin on the store. Through a broker: Kafka's
    # AlterPartitionReassignments / ListPartitionReassignments / ElectLeaders, which the broker
    # carries out with the same topic_admin functions on its own metadata store (either mode).

    def _request_timeout_ms(self) -> int:
        """What a request may take on the broker: less than the connection's own timeout, so
        the broker's answer (not a dead socket) says what happened."""
        return max(1000, int(self.timeout * 800))

    def _ongoing_reassignments(self, c: BrokerConnection,
                               partitions: Sequence[tuple[str, int]] | None
                               ) -> set[tuple[str, int]]:
        topics: dict[str, list[int]] = {}
        for t, p in partitions or ():
            topics.setdefault(t, []).append(p)
        resp = c.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, {
            "timeout_ms": self._request_timeout_ms(),
            "topics": None if partitions is None else [
                {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
        if resp.error_code:
            raise AdminError(resp.error_code, resp.error_message or "")
        return {(t.name, p.partition_index) for t in resp.topics for p in t.partitions}

    def _alter_reassignments(self, c: BrokerConnection,
                             targets: Mapping[tuple[str, int], Sequence[int] | None]
                             ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """AlterPartitionReassignments: per partition, its error code and message."""
        topics: dict[str, list[dict]] = {}
        for (t, p), r in sorted(targets.items()):
            topics.setdefault(t, []).append(
                {"partition_index": p, "replicas": None if r is None else list(r)})
        resp = c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "timeout_ms": self._request_timeout_ms(),
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        if resp.error_code:
            raise AdminError(resp.error_code, resp.error_message or "")
        return {(t.name, p.partition_index): (p.error_code, p.error_message)
                for t in resp.responses for p in t.partitions}

    def _current_replicas(self, c: BrokerConnection, partitions: Sequence[tuple[str, int]]
                          ) -> dict[tuple[str, int], list[int] | None]:
        md = self._metadata_on(c, sorted({t for t, _ in partitions}))
        replicas = {(t.name, p.partition_index): list(p.replica_nodes)
                    for t in md.topics for p in t.partitions}
        return {tp: replicas.get(tp) for tp in partitions}

    def reassign_execute(self, proposal: Mapping[tuple[str, int], Sequence[int]]
                         ) -> dict[tuple[str, int], list[int]]:
        """Start moving partitions to new replicas; returns their current replicas. Refused
        while another reassignment is in progress (as Kafka's tool does without
        ``--additional``); through a broker, a partition the broker refuses raises with its
        error, and nothing is started unless every partition was accepted."""
        if self.zookeeper:
            return self._zk(lambda s: topic_admin.execute_reassignment(s, proposal))
        with self._conn() as c:
            ongoing = self._ongoing_reassignments(c, None)
            if ongoing:
                raise AdminError(ErrorCode.REASSIGNMENT_IN_PROGRESS, (
                    f"a partition reassignment is in progress ({_tp_names(ongoing)}); follow "
                    "it with --verify or stop it with --cancel"))
            current = self._current_replicas(c, list(proposal))
            unknown = [tp for tp, r in current.items() if r is None]
            if unknown:
                raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"no such partition: {_tp_names(unknown)}")
            results = self._alter_reassignments(c, proposal)
            failed = {tp: r for tp, r in results.items() if r[0]}
            if failed:
                accepted = [tp for tp in results if tp not in failed]
                if accepted:  # the broker checks each partition alone: undo the others
                    self._alter_reassignments(c, {tp: None for tp in accepted})
                (tp, (code, why)), *_ = sorted(failed.items())
                raise AdminError(code, f"{tp[0]}-{tp[1]}: {why or ''}" + (
                    f" (and {len(failed) - 1} more refused)" if len(failed) > 1 else ""))
        return {tp: list(r or []) for tp, r in current.items()}

    def reassign_verify(self, proposal: Mapping[tuple[str, int], Sequence[int]]
                        ) -> dict[tuple[str, int], str]:
        """Per partition: in progress, complete (its replicas are the proposed ones) or
        failed (neither)."""
        if self.zookeeper:
            return self._zk(lambda s: topic_admin.verify_reassignment(s, proposal))
        with self._conn() as c:
            ongoing = self._ongoing_reassignments(c, list(proposal))
            current = self._current_replicas(c, list(proposal))
        return {tp: (topic_admin.REASSIGNMENT_IN_PROGRESS if tp in ongoing
                     else topic_admin.REASSIGNMENT_COMPLETE if current[tp] == list(r)
                     else topic_admin.REASSIGNMENT_FAILED)
                for tp, r in sorted(proposal.items())}

    def reassign_cancel(self, partitions: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """Revert the named partitions still being reassigned; returns those cancelled."""
        if self.zookeeper:
            return self._zk(lambda s: topic_admin.cancel_reassignment(s, partitions))
        with self._conn() as c:
            results = self._alter_reassignments(c, {tp: None for tp in partitions})
        for (t, p), (code, why) in sorted(results.items()):
            if code not in (0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS):
                raise AdminError(code, f"{t}-{p}: {why or ''}")
        return sorted(tp for tp, (code, _) in results.items() if code == 0)

    def elect_preferred_leaders(self, partitions: Sequence[tuple[str, int]] | None, *,
                                unclean: bool = False) -> dict[tuple[str, int], str]:
        """Preferred-leader election for ``partitions`` (None: every partition); see
        :func:`broker_core.topic_admin.elect_preferred_leaders` for the outcomes. ``unclean``:
        ElectLeaders' UNCLEAN type instead (:func:`broker_core.topic_admin.elect_unclean_leaders`:
        leaderless partitions get a live replica, outside the ISR if need be). Through a
        broker (ElectLeaders), every partition's outcome is reported the same way; with None,
        the partitions that needed no election are left out (as the broker answers)."""
        if self.zookeeper:
            async def run(store: Any) -> dict[tuple[str, int], str]:
                from twisted.internet import reactor

                tps = partitions if partitions is not None else \
                    await topic_admin.all_partitions(store)
                elect = (topic_admin.elect_unclean_leaders if unclean
                         else topic_admin.elect_preferred_leaders)
                return await elect(store, tps, timeout_s=self.timeout, clock=reactor)
            return self._zk(run)
        topics: dict[str, list[int]] = {}
        for t, p in partitions or ():
            topics.setdefault(t, []).append(p)
        with self._conn() as c:
            resp = c.request(ApiKey.ELECT_LEADERS, {
                "election_type": 1 if unclean else 0, "timeout_ms": self._request_timeout_ms(),
                "topic_partitions": None if partitions is None else [
                    {"topic": t, "partitions": ps} for t, ps in topics.items()]})
        if getattr(resp, "error_code", 0):
            raise AdminError(resp.error_code, "the election was refused")
        out: dict[tuple[str, int], str] = {}
        for t in resp.replica_election_results:
            for p in t.partition_result:
                if p.error_code == 0:
                    outcome = topic_admin.ELECTED
                elif p.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                    outcome = topic_admin.ELECTION_NOT_NEEDED
                else:
                    outcome = f"{error_name(p.error_code)}: {p.error_message or ''}"
                out[(t.topic, p.partition_id)] = outcome
        return out

    # -- DeleteRecords ---------------------------------------------------------------------------

    def delete_records(self, offsets: Mapping[tuple[str, int], int]
                       ) -> dict[tuple[str, int], tuple[int, int]]:
        """Kafka's DeleteRecords, sent to each partition's leader: per partition, its error code
        and its new low watermark (the log start; -1 with an error). ``offset`` -1 means the
        high watermark. Through brokers only: the leader moves its own log."""
        if self.zookeeper:
            raise AdminError(None, "delete-records goes to the partitions' leaders: use "
                                   "--bootstrap-server")
        with self._conn() as c:
            md = self._metadata_on(c, sorted({t for t, _ in offsets}))
        addresses = {b.node_id: (b.host, b.port) for b in md.brokers}
        leaders = {(t.name, p.partition_index): p.leader_id
                   for t in md.topics for p in t.partitions}
        out: dict[tuple[str, int], tuple[int, int]] = {}
        by_leader: dict[int, dict[str, list[dict]]] = {}
        for (t, p), offset in sorted(offsets.items()):
            leader = leaders.get((t, p))
            if leader is None:
                out[(t, p)] = (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1)
            elif leader not in addresses:
                out[(t, p)] = (int(ErrorCode.LEADER_NOT_AVAILABLE), -1)
            else:
                by_leader.setdefault(leader, {}).setdefault(t, []).append(
                    {"partition_index": p, "offset": offset})
        for leader, topics in sorted(by_leader.items()):
            host, port = addresses[leader]
            with BrokerConnection(host, port, timeout=self.timeout,
                                  security=self.security) as c:
                resp = c.request(ApiKey.DELETE_RECORDS, {
                    "timeout_ms": self._request_timeout_ms(),
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            for t in resp.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = (p.error_code, p.low_watermark)
        return out

    # -- SCRAM users (Kafka's Describe/AlterUserScramCredentials) ---------------------------------

    def describe_users(self, names: Sequence[str] | None = None) -> list[UserDescription]:
        """Each user's SCRAM mechanisms and iteration counts (never a key); ``names`` None or
        empty: every user that has a credential. A named user without one is an AdminError."""
        if self.zookeeper:
            results = self._zk(lambda s: user_admin.describe_credentials(s, names))
        else:
            with self._conn() as c:
                resp = c.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {
                    "users": None if names is None else [{"name": n} for n in names]})
            if resp.error_code:
                raise AdminError(resp.error_code, resp.error_message or "")
            results = [{"user": r.user, "error_code": r.error_code,
                        "error_message": r.error_message,
                        "credential_infos": [{"mechanism": i.mechanism,
                                              "iterations": i.iterations}
                                             for i in r.credential_infos]}
                       for r in resp.results]
        _raise_user_errors(results)
        out = []
        for r in results:
            out.append(UserDescription(r["user"], [
                (MECHANISM_TYPES.get(i["mechanism"], str(i["mechanism"])), i["iterations"])
                for i in r["credential_infos"]]))
        return out

    def alter_users(self, deletions: Sequence[user_admin.Deletion],
                    upsertions: Sequence[user_admin.Upsertion]) -> None:
        """Apply SCRAM credential changes; the first user refused is an AdminError naming
        it (the other users' changes are applied or refused on their own)."""
        if self.zookeeper:
            async def run(store: Any) -> list[dict]:
                await store.ensure_path(paths.USER_CONFIGS)
                return await user_admin.alter_credentials(store, deletions, upsertions)
            results = self._zk(run)
        else:
            with self._conn() as c:
                resp = c.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {
                    "deletions": [{"name": d.name, "mechanism": d.mechanism}
                                  for d in deletions],
                    "upsertions": [{"name": u.name, "mechanism": u.mechanism,
                                    "iterations": u.iterations, "salt": u.salt,
                                    "salted_password": u.salted_password}
                                   for u in upsertions]})
            results = [{"user": r.user, "error_code": r.error_code,
                        "error_message": r.error_message} for r in resp.results]
        _raise_user_errors(results)

    def remove_user(self, user: str, mechanisms: Sequence[str] | None = None) -> list[str]:
        """Delete ``user``'s credentials for ``mechanisms`` (None: every one it has, as
        described first, in the same store session or connection); returns the mechanisms
        removed."""
        if mechanisms is None and self.zookeeper:
            async def run(store: Any) -> list[str]:
                found = await user_admin.describe_credentials(store, [user])
                _raise_user_errors(found)
                names = [MECHANISM_TYPES[i["mechanism"]] for i in found[0]["credential_infos"]]
                _raise_user_errors(await user_admin.alter_credentials(
                    store, [user_admin.Deletion(user, MECHANISM_CODES[m]) for m in names], []))
                return names
            return self._zk(run)
        if mechanisms is None:
            mechanisms = [m for m, _ in self.describe_users([user])[0].credentials]
        self.alter_users([user_admin.Deletion(user, MECHANISM_CODES[m]) for m in mechanisms], [])
        return list(mechanisms)

    # -- ACLs (Kafka's CreateAcls / DescribeAcls / DeleteAcls) --------------------------------------

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Store ``bindings``; with ``zookeeper`` directly in the store (no authorization:
        whoever reaches the store may; how a first ACL is made before any super user
        exists)."""
        if self.zookeeper:
            self._zk(lambda s: acl_store.create_acls(s, bindings))
            return
        with self._conn() as c:
            resp = c.request(ApiKey.CREATE_ACLS, {"creations": [
                {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                 "resource_pattern_type": int(b.pattern.pattern_type),
                 "principal": b.entry.principal, "host": b.entry.host,
                 "operation": int(b.entry.operation), "permission_type": int(b.entry.permission)}
                for b in bindings]})
        for b, r in zip(bindings, resp.results, strict=True):
            if r.error_code:
                raise AdminError(r.error_code, f"{b}: {r.error_message or ''}")

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        if self.zookeeper:
            return [b for b in self._zk(acl_store.load_acls) if acl_filter.matches(b)]
        with self._conn() as c:
            resp = c.request(ApiKey.DESCRIBE_ACLS, _filter_body(acl_filter))
        if resp.error_code:
            raise AdminError(resp.error_code, resp.error_message or "")
        return [acl_binding(r.resource_type, r.pattern_type, r.resource_name, a.principal,
                            a.host, a.operation, a.permission_type)
                for r in resp.resources for a in r.acls]

    def delete_acls(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        """Per filter, the bindings it deleted."""
        if self.zookeeper:
            return self._zk(lambda s: acl_store.delete_acls(s, filters))
        with self._conn() as c:
            resp = c.request(ApiKey.DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]})
        out = []
        for r in resp.filter_results:
            if r.error_code:
                raise AdminError(r.error_code, r.error_message or "")
            out.append([acl_binding(m.resource_type, m.pattern_type, m.resource_name,
                                    m.principal, m.host, m.operation, m.permission_type)
                        for m in r.matching_acls])
        return out

    # -- dynamic configs (Kafka's kafka-configs; through a broker only) --------------------------

    def _config_conn(self, resource_type: int, name: str) -> BrokerConnection:
        """A connection for a resource: a broker's own configs are described by that broker
        (the cluster-wide defaults, ``name`` empty, and topics by any)."""
        if self.zookeeper:
            raise AdminError(None, "configs are described and altered through the brokers: "
                                   "use --bootstrap-server")
        if resource_type != ResourceType.BROKER or not name:
            return self._conn()
        md = self._metadata([])
        for b in md.brokers:
            if str(b.node_id) == name:
                return BrokerConnection(b.host, b.port, timeout=self.timeout,
                                        security=self.security)
        raise AdminError(None, f"broker {name} is not in the cluster's metadata (brokers: "
                               f"{', '.join(str(b.node_id) for b in md.brokers) or 'none'})")

    def describe_configs(self, resource_type: int, name: str, keys: Sequence[str] | None = None,
                         *, documentation: bool = False) -> list[ConfigDescription]:
        """A topic's or broker's configs (``name`` empty with BROKER: the cluster-wide dynamic
        defaults) with their sources and synonyms; ``keys`` None: every key."""
        with self._config_conn(resource_type, name) as c:
            resp = c.request(ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": int(resource_type), "resource_name": name,
                               "configuration_keys": None if keys is None else list(keys)}],
                "include_synonyms": True, "include_documentation": documentation})
        (r,) = resp.results
        if r.error_code:
            raise AdminError(r.error_code, r.error_message or "")
        return [ConfigDescription(
            c.name, c.value, _source_name(c.config_source), c.read_only, c.is_sensitive,
            [(s.name, s.value, _source_name(s.source)) for s in c.synonyms],
            c.documentation) for c in r.configs]

    def alter_configs(self, resource_type: int, name: str,
                      operations: Sequence[tuple[str, int, str | None]], *,
                      validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: ``operations`` are ``(key, OpType, value)``; the refusal
        (the whole change is refused) is an AdminError naming the key."""
        with self._config_conn(resource_type, "") as c:
            resp = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
                "resources": [{"resource_type": int(resource_type), "resource_name": name,
                               "configs": [{"name": k, "config_operation": int(op), "value": v}
                                           for k, op, v in operations]}],
                "validate_only": validate_only})
        (r,) = resp.responses
        if r.error_code:
            raise AdminError(r.error_code, r.error_message or "")

    def _metadata(self, names: list[str] | None) -> Any:
        with self._conn() as c:
            return self._metadata_on(c, names)

    @staticmethod
    def _metadata_on(conn: BrokerConnection, names: list[str] | None) -> Any:
        topics = None if names is None else [{"name": n} for n in names]
        return conn.request(ApiKey.METADATA, {"topics": topics, "allow_auto_topic_creation": False})


def _tp_names(tps: Any) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def error_name(code: int) -> str:
    """Kafka's name of an error code (the number itself for one this codec does not know)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


@dataclass(frozen=True)
class ConfigDescription:
    """One config of a resource as DescribeConfigs reports it; ``synonyms`` are
    ``(name, value, source)``, most specific first."""

    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool
    synonyms: list[tuple[str, str | None, str]]
    documentation: str | None = None


def _source_name(source: int) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def _raise_user_errors(results: Sequence[dict]) -> None:
    """The first refused user's error as an AdminError (its message names the user)."""
    for r in results:
        if r["error_code"]:
            raise AdminError(r["error_code"], f"user {r['user']!r}: {r['error_message'] or ''}")

def _filter_body(f: AclFilter) -> dict:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal,
            "host_filter": f.host, "operation": int(f.operation),
            "permission_type": int(f.permission)}


def _topic_overrides(conn: BrokerConnection, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Topic -> its config overrides, from one DescribeConfigs request on ``conn``.

    Only entries whose source is ``DYNAMIC_TOPIC_CONFIG`` are overrides (the broker also reports
    every default). Empty for every topic when the broker does not serve DescribeConfigs; an
    error for one topic (e.g. deleted since the Metadata request) raises :class:`AdminError`.
    """
    if not names:
        return {}
    try:
        conn.version_of(ApiKey.DESCRIBE_CONFIGS)
    except UnsupportedVersionError:
        return {}
    resp = conn.request(ApiKey.DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": int(ResourceType.TOPIC), "resource_name": n,
                       "configuration_keys": None} for n in names],
        "include_synonyms": False})
    out: dict[str, dict[str, str]] = {}
    for r in resp.results:
        if r.error_code:
            raise AdminError(r.error_code, r.error_message or f"topic {r.resource_name!r}")
        out[r.resource_name] = {c.name: c.value for c in r.configs
                                if c.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
                                and c.value is not None}
    return out


# -- consumer groups (through the coordinator) ----------------------------------------------------


@dataclass(frozen=True)
class GroupPartition:
    """One partition a group consumes: its current offset (as the coordinator holds it: the
    members' latest reports, committed to ZooKeeper every ``offsets.commit.interval.ms``), the
    partition's high watermark, the lag between them and its owner."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    owner: str | None  # consumer thread id
    consumer_id: str | None
    host: str | None

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return max(0, self.log_end_offset - self.current_offset)


@dataclass(frozen=True)
class GroupMember:
    consumer_id: str
    host: str
    topic_count: str
    session_timeout_ms: int
    partitions: int


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    generation_id: int
    coordinator_id: int
    members: list[GroupMember]
    partitions: list[GroupPartition]


#: A broker as the tools address it: ``(broker id, host, port)``.
Broker = tuple[int, str, int]


def find_coordinators(servers: str, groups: Sequence[str], timeout: float = 30.0,
                      security: ClientSecurity | None = None) -> dict[str, Broker]:
    """The coordinator of each of ``groups`` (FindCoordinator, key type group), asked of any
    of ``servers``: one request for all of them where the broker speaks v4, one per group
    before. Every group has a coordinator of its own (the cluster may spread groups over
    several); :class:`AdminError` for a group that has none right now or that the principal
    may not describe, ``OSError`` when no broker answers."""
    out: dict[str, Broker] = {}
    wanted = list(dict.fromkeys(groups))
    if not wanted:
        return out
    with bootstrap(servers, timeout=timeout, security=security) as conn:
        if conn.version_of(ApiKey.FIND_COORDINATOR) >= 4:
            resp = conn.request(ApiKey.FIND_COORDINATOR,
                                {"key_type": KEY_TYPE_GROUP, "coordinator_keys": wanted})
            answers = [(c.key, c.error_code, c.node_id, c.host, c.port)
                       for c in resp.coordinators]
        else:
            answers = []
            for g in wanted:
                r = conn.request(ApiKey.FIND_COORDINATOR, {"key": g, "key_type": KEY_TYPE_GROUP})
                answers.append((g, r.error_code, r.node_id, r.host, r.port))
    for key, code, node_id, host, port in answers:
        if key not in wanted:
            continue  # a key the broker added: nothing this call asked about
        if code:
            raise AdminError(code, f"finding the coordinator of group {key!r}")
        out[key] = (node_id, host, port)
    missing = [g for g in wanted if g not in out]
    if missing:
        raise AdminError(int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                         f"no coordinator was named for group {missing[0]!r}")
    return out


def find_coordinator(servers: str, group: str, timeout: float = 30.0,
                     security: ClientSecurity | None = None) -> Broker:
    """``(broker id, host, port)`` of ``group``'s coordinator (:func:`find_coordinators`)."""
    return find_coordinators(servers, [group], timeout, security)[group]


def by_coordinator(coordinators: Mapping[str, Broker]) -> list[tuple[Broker, list[str]]]:
    """The groups of ``coordinators`` (group -> its coordinator) batched per coordinator:
    one ``(coordinator, groups)`` per broker, brokers in the order their first group comes,
    each broker's groups in their order (so one connection and one request per broker serve
    every group it coordinates)."""
    batches: dict[Broker, list[str]] = {}
    for group, broker in coordinators.items():
        batches.setdefault(broker, []).append(group)
    return list(batches.items())


def live_brokers(servers: str, timeout: float = 30.0,
                 security: ClientSecurity | None = None) -> list[Broker]:
    """Every live broker (Metadata), by id."""
    with bootstrap(servers, timeout=timeout, security=security) as conn:
        md = AdminClient._metadata_on(conn, [])
    return sorted((b.node_id, b.host, b.port) for b in md.brokers)


def at_coordinators(servers: str, names: Sequence[str] | None, timeout: float,
                    security: ClientSecurity | None
                    ) -> Iterator[tuple[int, BrokerConnection, list[str] | None]]:
    """A connection to each broker that has to be asked about ``names``, with the names it
    coordinates: for named groups, their coordinators (batched); for every group (None),
    every live broker with None, for it to list the groups it coordinates."""
    if names is None:
        targets: list[tuple[Broker, list[str] | None]] = [
            (b, None) for b in live_brokers(servers, timeout, security)]
    else:
        targets = list(by_coordinator(find_coordinators(servers, names, timeout, security)))
    for (node_id, host, port), batch in targets:
        with BrokerConnection(host, port, timeout=timeout, security=security) as conn:
            yield node_id, conn, batch


def thin_groups_on(conn: BrokerConnection, names: Sequence[str] | None) -> list[Any] | None:
    """DescribeConsumerGroups of ``names`` on a broker (None: every group it coordinates),
    without the unknown ones; None when asked for every group by a broker that coordinates
    none (it answers NOT_COORDINATOR); another error (GROUP_AUTHORIZATION_FAILED) raises."""
    resp = conn.request(ApiKey.DESCRIBE_CONSUMER_GROUPS,
                        {"groups": None if names is None else list(names)})
    if names is None and resp.error_code == ErrorCode.NOT_COORDINATOR:
        return None
    if resp.error_code:
        raise AdminError(resp.error_code, resp.error_message or "describing groups failed")
    for g in resp.groups:
        if g.error_code not in (0, ErrorCode.GROUP_ID_NOT_FOUND):
            raise AdminError(g.error_code, f"group {g.group_id!r}")
    return [g for g in resp.groups if g.error_code == 0]


def _thin_groups(servers: str, names: Sequence[str] | None, timeout: float,
                 security: ClientSecurity | None) -> list[tuple[int, Any]]:
    """``(coordinator id, group)`` of each thin group found, each once (a group listed by two
    brokers while it moves between them counts where it was first seen)."""
    out: dict[str, tuple[int, Any]] = {}
    coordinating = 0
    for node_id, conn, batch in at_coordinators(servers, names, timeout, security):
        found = thin_groups_on(conn, batch)
        coordinating += found is not None
        for g in found or []:
            out.setdefault(g.group_id, (node_id, g))
    if names is None and not coordinating:
        raise no_coordinating_broker()
    return list(out.values())


def no_coordinating_broker() -> AdminError:
    """Every live broker said it coordinates no group: none is elected right now (an empty
    list would claim the cluster has no groups)."""
    return AdminError(int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                      "no live broker coordinates groups right now (an election is under way?)")


def _high_watermarks(servers: str, tps: set[tuple[str, int]], timeout: float,
                     security: ClientSecurity | None) -> dict[tuple[str, int], int]:
    """The high watermark of each partition, asked of its leader (what a consumer can reach)."""
    return partition_offsets(servers, tps, LATEST_TIMESTAMP, timeout, security)


#: ListOffsets' special timestamps: the high watermark, the log start offset.
LATEST_TIMESTAMP, EARLIEST_TIMESTAMP = -1, -2


def partition_offsets(servers: str, tps: set[tuple[str, int]], timestamp: int,
                      timeout: float = 30.0, security: ClientSecurity | None = None
                      ) -> dict[tuple[str, int], int]:
    """ListOffsets of each partition at ``timestamp`` (:data:`LATEST_TIMESTAMP`,
    :data:`EARLIEST_TIMESTAMP`, or milliseconds: the first offset at or after it, -1 when
    none), asked of its leader; a partition without a leader or that answered an error is
    left out."""
    if not tps:
        return {}
    out: dict[tuple[str, int], int] = {}
    with bootstrap(servers, timeout=timeout, security=security) as conn:
        md = AdminClient._metadata_on(conn, sorted({t for t, _ in tps}))
    addresses = {b.node_id: (b.host, b.port) for b in md.brokers}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for t in md.topics:
        for p in t.partitions:
            if (t.name, p.partition_index) in tps and p.leader_id >= 0:
                by_leader.setdefault(p.leader_id, []).append((t.name, p.partition_index))
    for leader, parts in by_leader.items():
        if leader not in addresses:
            continue
        topics: dict[str, list[int]] = {}
        for t, p in parts:
            topics.setdefault(t, []).append(p)
        with BrokerConnection(*addresses[leader], timeout=timeout, security=security) as c:
            resp = c.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [
                {"name": t, "partitions": [{"partition_index": p, "timestamp": timestamp}
                                           for p in ps]}
                for t, ps in topics.items()]})
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code == 0:
                    out[(t.name, p.partition_index)] = p.offset
    return out


def list_groups(servers: str, timeout: float = 30.0, security: ClientSecurity | None = None
                ) -> list[tuple[str, str, int]]:
    """``(group, state, members)`` of every thin group, asked of every live broker."""
    return sorted((g.group_id, g.state, len(g.members))
                  for _, g in _thin_groups(servers, None, timeout, security))


def describe_groups(servers: str, names: Sequence[str] | None, timeout: float = 30.0,
                    security: ClientSecurity | None = None) -> list[GroupDescription]:
    """Members, ownership, offsets and lag of ``names`` (None: every group), each asked of
    its own coordinator; a name of no group raises GROUP_ID_NOT_FOUND."""
    found = {g.group_id: (node_id, g)
             for node_id, g in _thin_groups(servers, names, timeout, security)}
    wanted = sorted(found) if names is None else list(names)
    for name in wanted:
        if name not in found:
            raise AdminError(int(ErrorCode.GROUP_ID_NOT_FOUND), f"group {name!r}")
    hws = _high_watermarks(servers, thin_group_partitions([found[n][1] for n in wanted]),
                           timeout, security)
    return [d for n in wanted for d in thin_group_descriptions(found[n][0], [found[n][1]], hws)]


def thin_group_partitions(groups: Sequence[Any]) -> set[tuple[str, int]]:
    """Every partition DescribeConsumerGroups ``groups`` hold an offset for or assign."""
    tps: set[tuple[str, int]] = set()
    for g in groups:
        tps.update((o.topic, o.partition) for o in g.offsets)
        for m in g.members:
            for th in m.ownership:
                tps.update((o.topic, o.partition) for o in th.partitions)
    return tps


def thin_group_descriptions(coordinator_id: int, groups: Sequence[Any],
                            hws: Mapping[tuple[str, int], int]) -> list[GroupDescription]:
    """DescribeConsumerGroups ``groups`` (found ones) with the partitions' high watermarks."""
    out = []
    for g in groups:
        owner: dict[tuple[str, int], tuple[str, str, str]] = {}
        members = []
        for m in g.members:
            n = 0
            for th in m.ownership:
                for o in th.partitions:
                    owner[(o.topic, o.partition)] = (th.consumer_thread_id, m.consumer_id,
                                                     m.host)
                    n += 1
            members.append(GroupMember(m.consumer_id, m.host, m.topic_count,
                                       m.session_timeout_ms, n))
        offsets = {(o.topic, o.partition): o.offset for o in g.offsets if o.offset >= 0}
        parts = []
        for tp in sorted(set(offsets) | set(owner)):
            th, cid, host = owner.get(tp, (None, None, None))
            parts.append(GroupPartition(tp[0], tp[1], offsets.get(tp), hws.get(tp), th, cid,
                                        host))
        out.append(GroupDescription(g.group_id, g.state, g.generation_id, coordinator_id,
                                    sorted(members, key=lambda m: m.consumer_id), parts))
    return out
