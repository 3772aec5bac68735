"""Every metadata path Sluice uses, and the JSON codecs of their values, in one place.

Store-neutral: the same tree of paths and values lives in ZooKeeper (:mod:`broker_core.zk.store`)
or in the Raft quorum's metadata store (:mod:`broker_core.raft.metadata_store`), so this module
imports neither store (nor anything of Sluice's).

``docs/zookeeper.md`` documents each path: who writes it, whether it is ephemeral, and its value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
#: Ephemeral ``[broker id]`` children: brokers that cannot reach the active controller over the
#: network (broker_core.controller.broker_liveness); created with ``makepath``.
CONTROLLER_UNREACHABLE = "/controller_unreachable"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG = "/config"
TOPIC_CONFIGS = "/config/topics"
#: Kafka's dynamic broker configs: ``/config/brokers/[id]`` per broker and
#: ``/config/brokers/<default>`` cluster-wide (:mod:`broker_core.config_changes`).
BROKER_CONFIGS = "/config/brokers"
#: Kafka's per-user configs: ``/config/users/[sanitized user name]`` holds the user's SCRAM
#: credentials (:mod:`broker_core.security.user_store`, ``sluice users``), each broker
#: watching them; secret, so readable by brokers only when ZooKeeper ACLs are on.
USER_CONFIGS = "/config/users"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
PARTITIONS_REASSIGNED = "/admin/partitions_reassigned"
PARTITIONS_ADD = "/admin/partitions_add"
PARTITIONS_REMOVE = "/admin/partitions_remove"
#: Kafka's replica-reassignment znode (one znode, JSON list of partitions and their new replicas);
#: used instead of a per-partition ``/admin/partitions_reassigned/[topic]/[partition]``
#: so that Kafka's tooling habits and file format carry over (docs/zookeeper.md).
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
#: Kafka's preferred-leader-election znode (one znode, JSON list of partitions).
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
CONSUMERS = "/consumers"
#: Kafka's cluster id znode: ``{"version":"1","id":"<22-character id>"}``, created once by
#: the first broker of the cluster; every broker reports it and stamps its log directory
#: with it (``meta.properties``).
CLUSTER_ID = "/cluster/id"
#: The consumer coordinator's shards (coordinator.shards): ``count`` (persistent, decimal, the
#: number of shards the cluster's groups are hashed over, created once by the first broker),
#: ``seats/[k]`` (ephemeral :class:`CoordinatorRegistration` of shard k's elected coordinator)
#: and ``epochs/[k]`` (persistent, decimal: shard k's epoch, bumped by every election of shard k
#: in the same multi that creates its seat; every offset/owner write of shard k's coordinator
#: checks its version, so a deposed coordinator cannot write, as ``/controller_epoch``) and
#: ``brokers/[id]`` (ephemeral, empty: broker id is ready to coordinate: it agreed the count
#: and follows the seats; shards are placed over these brokers only, never over a broker that
#: is registered but still starting, failed to start coordination, or predates the shards).
COORDINATOR_SHARDS = "/coordinator_shards"
COORDINATOR_SHARD_COUNT = "/coordinator_shards/count"
COORDINATOR_SHARD_SEATS = "/coordinator_shards/seats"
COORDINATOR_SHARD_EPOCHS = "/coordinator_shards/epochs"
COORDINATOR_SHARD_BROKERS = "/coordinator_shards/brokers"
#: Children of ``/consumers`` that are not consumer groups (so these group ids are refused):
#: the single coordinator's seat and epoch of releases before the coordinator was sharded,
#: which an upgraded cluster may still hold.
CONSUMERS_RESERVED = frozenset({"coordinator", "coordinator_epoch"})
#: The legacy seat: the single coordinator of releases before the sharded coordinator elects
#: itself here (ephemeral, same shape as ``/controller``) and fences on
#: ``LEGACY_COORDINATOR_EPOCH``. While it exists no broker stands for a shard, so an older
#: coordinator and a shard's coordinator never both write a group (a rolling upgrade).
LEGACY_COORDINATOR = "/consumers/coordinator"
LEGACY_COORDINATOR_EPOCH = "/consumers/coordinator_epoch"

#: Kafka's log-directory failure notifications: a broker whose log directory went offline
#: creates a sequential child ``log_dir_event_<seq>`` (:class:`LogDirEventNotification`); the
#: controller handles and deletes them.
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = f"{LOG_DIR_EVENT_NOTIFICATION}/log_dir_event_"
#: What a broker's offline log directories held: ``/brokers/offline_replicas/[id]``
#: (:class:`OfflineReplicas`, persistent, rewritten by the broker before each notification and
#: valid only for the registration epoch it names).
OFFLINE_REPLICAS = "/brokers/offline_replicas"

#: ACL bindings: ``/acls/[resource type]/[pattern type]/[resource name]`` (persistent), e.g.
#: ``/acls/Topic/literal/orders``, each holding ``{"version":1,"acls":[{"principal":
#: "User:alice","host":"*","operation":"Read","permissionType":"Allow"}, ...]}`` (Kafka's
#: ``/kafka-acl`` value); written by CreateAcls/DeleteAcls, watched by every broker
#: (:mod:`broker_core.acl_store`).
ACLS = "/acls"

#: Kafka's producer-id block znode: the last block of producer ids handed to a broker,
#: ``{"version":1,"broker":B,"block_start":"S","block_end":"E"}`` (Kafka's value); every broker
#: claims its next block with a write conditional on the version it read
#: (:mod:`broker_core.producer_id_blocks`), so no id is ever handed out twice.
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"


def acl_patterns(resource_type: str, pattern_type: str) -> str:
    """The parent of every pattern of one resource type and pattern type (``Topic``,
    ``literal``)."""
    return f"{ACLS}/{resource_type}/{pattern_type}"


def acl_resource(resource_type: str, pattern_type: str, name: str) -> str:
    return f"{ACLS}/{resource_type}/{pattern_type}/{name}"


#: Every top-level node Sluice creates (what ``sluice zookeeper secure`` walks when the
#: cluster has no chroot and the root is shared with other applications).
TOP_LEVEL_PATHS = (CONTROLLER, CONTROLLER_EPOCH, CONTROLLER_UNREACHABLE, BROKERS, CONFIG, ADMIN,
                   CONSUMERS, "/cluster", LOG_DIR_EVENT_NOTIFICATION, ACLS,
                   LATEST_PRODUCER_ID_BLOCK, COORDINATOR_SHARDS)

#: Persistent paths every broker ensures at start (watches need their parents to exist).
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, DELETE_TOPICS, PARTITIONS_REASSIGNED,
                    PARTITIONS_ADD, PARTITIONS_REMOVE, CONSUMERS, LOG_DIR_EVENT_NOTIFICATION,
                    OFFLINE_REPLICAS, USER_CONFIGS, BROKER_CONFIGS, COORDINATOR_SHARD_SEATS,
                    COORDINATOR_SHARD_EPOCHS, COORDINATOR_SHARD_BROKERS)


def broker(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def coordinator_shard_seat(shard: int) -> str:
    return f"{COORDINATOR_SHARD_SEATS}/{shard}"


def coordinator_shard_epoch(shard: int) -> str:
    return f"{COORDINATOR_SHARD_EPOCHS}/{shard}"


def coordinator_shard_broker(broker_id: int) -> str:
    return f"{COORDINATOR_SHARD_BROKERS}/{broker_id}"


def offline_replicas(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{broker_id}"


def topic(name: str) -> str:
    return f"{TOPICS}/{name}"


def partition(name: str, index: int) -> str:
    return f"{TOPICS}/{name}/{index}"


def leader_and_isr(name: str, index: int) -> str:
    return f"{TOPICS}/{name}/{index}/leaderAndISR"


def topic_config(name: str) -> str:
    return f"{TOPIC_CONFIGS}/{name}"


def broker_config(name: str) -> str:
    """``name`` is a broker id or ``<default>``."""
    return f"{BROKER_CONFIGS}/{name}"


def sanitize_user(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: a user name as one path component, URL-encoded as
    UTF-8 with only ASCII letters, digits, ``.``, ``_`` and ``-`` left as they are (so ``*``
    is ``%2A`` and a space ``%20``, as Kafka writes them)."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize_user(component: str) -> str | None:
    """The user name of a ``/config/users`` child, or None when the child is not a name
    :func:`sanitize_user` would write (hand-made or hostile: never trusted as a user)."""
    try:
        name = unquote(component, errors="strict")
    except UnicodeDecodeError:
        return None
    return name if sanitize_user(name) == component else None


def user_config(name: str) -> str:
    return f"{USER_CONFIGS}/{sanitize_user(name)}"


def delete_topic(name: str) -> str:
    return f"{DELETE_TOPICS}/{name}"


def partitions_add_topic(name: str) -> str:
    return f"{PARTITIONS_ADD}/{name}"


def partition_add(name: str, index: int) -> str:
    return f"{PARTITIONS_ADD}/{name}/{index}"


def partitions_remove_topic(name: str) -> str:
    return f"{PARTITIONS_REMOVE}/{name}"


def partition_remove(name: str, index: int) -> str:
    return f"{PARTITIONS_REMOVE}/{name}/{index}"


def consumer_group(group: str) -> str:
    """The group's own znode: its offsets and owners are below it."""
    return f"{CONSUMERS}/{group}"


def consumer_offset(group: str, name: str, index: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{name}/{index}"


def consumer_owner(group: str, name: str, index: int) -> str:
    return f"{CONSUMERS}/{group}/owners/{name}/{index}"


def consumer_offsets(group: str) -> str:
    return f"{CONSUMERS}/{group}/offsets"


def consumer_offsets_topic(group: str, name: str) -> str:
    return f"{CONSUMERS}/{group}/offsets/{name}"


def consumer_owners(group: str) -> str:
    return f"{CONSUMERS}/{group}/owners"


def consumer_owners_topic(group: str, name: str) -> str:
    return f"{CONSUMERS}/{group}/owners/{name}"


MAX_GROUP_ID_LENGTH = 249


def validate_group_id(group: str) -> None:
    """A group id must be usable as one ZooKeeper path component under ``/consumers`` and must
    not collide with the coordinator's own znodes; ValueError says which rule is broken."""
    if not group:
        raise ValueError("group id is empty")
    if group in (".", "..") or "/" in group:
        raise ValueError(f"group id {group!r} cannot be '.', '..' or contain '/'")
    if group in CONSUMERS_RESERVED:
        raise ValueError(f"group id {group!r} is reserved (/consumers/{group} is the "
                         "coordinator's own znode)")
    if len(group) > MAX_GROUP_ID_LENGTH:
        raise ValueError(f"group id is {len(group)} characters; the limit is "
                         f"{MAX_GROUP_ID_LENGTH}")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xF8FF
           for c in group):
        raise ValueError(f"group id {group!r} has control or reserved characters")


_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Kafka's rules; ValueError says which one is broken."""
    if not name:
        raise ValueError("topic name is empty")
    if name in (".", ".."):
        raise ValueError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_LENGTH:
        raise ValueError(f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_LENGTH}")
    if not _LEGAL.match(name):
        raise ValueError(f"topic name {name!r} has characters other than ASCII letters, digits, "
                         "'.', '_' and '-'")


def _load(data: bytes, kind: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{kind}: not valid JSON ({e})") from None
    except RecursionError:
        # A hostile entry nested past the parser's depth: as unreadable as bad JSON, and
        # every reader of the tree already handles ValueError.
        raise ValueError(f"{kind}: JSON nested too deeply") from None


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class BrokerRegistration:
    """``/brokers/ids/[id]`` (ephemeral, written by the broker), in Kafka's version 4 form.

    ``host``/``port`` are the inter-broker listener's advertised address: every connection
    one broker opens to another (controller, replica fetchers, controlled shutdown,
    heartbeats) goes there. ``endpoints`` lists every listener's advertised address
    (``"NAME://host:port"`` in the znode) and ``protocol_map`` each listener's security
    protocol. A registration without endpoints (an older broker's) reads as one PLAINTEXT
    listener at ``host:port``; an endpoint whose protocol the map does not give is refused.
    """

    id: int
    host: str
    port: int
    rack: str | None = None
    timestamp_ms: int = 0
    endpoints: tuple[ListenerEndpoint, ...] = ()
    #: (listener name, security protocol name) pairs.
    protocol_map: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.endpoints:
            object.__setattr__(self, "endpoints",
                               (ListenerEndpoint("PLAINTEXT", self.host, self.port),))
            object.__setattr__(self, "protocol_map", (("PLAINTEXT", "PLAINTEXT"),))

    def to_bytes(self) -> bytes:
        return _dump({"version": 4, "id": self.id, "host": self.host, "port": self.port,
                      "rack": self.rack,
                      "timestamp": str(self.timestamp_ms),
                      "endpoints": [str(e) for e in self.endpoints],
                      "listener_security_protocol_map": dict(self.protocol_map)})

    @classmethod
    def from_bytes(cls, data: bytes, broker_id: int | None = None) -> BrokerRegistration:
        v = _load(data, "broker registration")
        try:
            raw_endpoints = v.get("endpoints") or []
            raw_map = v.get("listener_security_protocol_map") or {}
            if not isinstance(raw_endpoints, list) or not isinstance(raw_map, dict):
                raise ValueError("endpoints is not a list or the protocol map not an object")
            endpoints = tuple(ListenerEndpoint.parse(str(e)) for e in raw_endpoints)
            pmap = {str(k): str(val) for k, val in raw_map.items()}
            for e in endpoints:
                # Kafka's registrations before version 4 name listeners after their protocol.
                pmap.setdefault(e.listener, e.listener)
                if pmap[e.listener] not in SECURITY_PROTOCOL_IDS:
                    raise ValueError(f"listener {e.listener} has unknown security protocol "
                                     f"{pmap[e.listener]!r}")
            return cls(int(broker_id if broker_id is not None else v.get("id", -1)),
                       str(v["host"]), int(v["port"]), v.get("rack"),
                       int(v.get("timestamp", 0)), endpoints,
                       tuple((e.listener, pmap[e.listener]) for e in endpoints))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"broker registration: bad value ({e})") from None


#: Kafka's security protocol ids (UpdateMetadata's ``security_protocol``).
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True)
class ListenerEndpoint:
    """One advertised listener of a broker: ``NAME://host:port`` in Kafka's znode."""

    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> ListenerEndpoint:
        name, sep, hostport = text.partition("://")
        host, colon, port = hostport.rpartition(":")
        if not sep or not name or not colon or not (port.isdigit() and port.isascii()) or \
                not 0 < int(port) <= 65535:
            raise ValueError(f"endpoint {text!r:.100} is not NAME://host:port")
        return cls(name, host.strip("[]"), int(port))


#: Kafka's event type of a log-directory failure notification.
LOG_DIR_FAILURE_EVENT = 1
#: Bounds of :class:`OfflineReplicas` (a broker's value is refused beyond them, never trusted).
MAX_OFFLINE_REPLICAS = 100_000
MAX_OFFLINE_DIRS = 1_000
#: The largest :class:`OfflineReplicas` value a broker writes: it fits both stores (the quorum's
#: bound on a value, and ZooKeeper's default 1 MiB ``jute.maxbuffer``).
MAX_OFFLINE_RECORD_BYTES = 700_000


@dataclass(frozen=True)
class LogDirEventNotification:
    """``/log_dir_event_notification/log_dir_event_<seq>``: Kafka's value,
    ``{"version":1,"broker":<id>,"event":1}``."""

    broker: int
    event: int = LOG_DIR_FAILURE_EVENT

    def to_bytes(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker, "event": self.event})

    @classmethod
    def from_bytes(cls, data: bytes) -> LogDirEventNotification:
        v = _load(data, "log dir event notification")
        if not isinstance(v, dict):
            raise ValueError("log dir event notification: not a JSON object")
        broker, event = v.get("broker"), v.get("event", LOG_DIR_FAILURE_EVENT)
        if not _is_int(broker) or broker < 0 or not _is_int(event):
            raise ValueError(f"log dir event notification: bad broker or event in {v!r:.200}")
        return cls(broker, event)


@dataclass(frozen=True)
class OfflineReplicas:
    """``/brokers/offline_replicas/[id]``: the log directories broker ``broker_id`` has taken
    offline and the partitions whose logs were in them, as of its registration
    ``broker_epoch`` (the czxid of ``/brokers/ids/[id]``): a value naming another epoch is a
    previous incarnation's and means nothing."""

    broker_id: int
    broker_epoch: int
    log_dirs: tuple[str, ...]
    partitions: tuple[tuple[str, int], ...]

    def to_bytes(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker_id, "broker_epoch": self.broker_epoch,
                      "offline_log_dirs": list(self.log_dirs),
                      "partitions": [{"topic": t, "partition": p} for t, p in self.partitions]})

    @classmethod
    def from_bytes(cls, data: bytes) -> OfflineReplicas:
        v = _load(data, "offline replicas")
        try:
            broker, epoch = v["broker"], v["broker_epoch"]
            dirs, parts = v["offline_log_dirs"], v["partitions"]
            if not (_is_int(broker) and broker >= 0 and _is_int(epoch)):
                raise ValueError("bad broker or broker_epoch")
            if not isinstance(dirs, list) or len(dirs) > MAX_OFFLINE_DIRS \
                    or not all(isinstance(d, str) for d in dirs):
                raise ValueError("offline_log_dirs is not a list of paths")
            if not isinstance(parts, list) or len(parts) > MAX_OFFLINE_REPLICAS:
                raise ValueError(f"partitions is not a list of at most "
                                 f"{MAX_OFFLINE_REPLICAS} entries")
            tps = []
            for entry in parts:
                t, p = entry["topic"], entry["partition"]
                validate_topic_name(t)
                if not _is_int(p) or p < 0:
                    raise ValueError(f"bad partition {p!r}")
                tps.append((t, p))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"offline replicas: bad value ({e})") from None
        return cls(broker, epoch, tuple(dirs), tuple(tps))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class ControllerRegistration:
    """``/controller`` (ephemeral, written by the elected controller)."""

    broker_id: int
    timestamp_ms: int = 0

    def to_bytes(self) -> bytes:
        return _dump({"version": 1, "brokerid": self.broker_id,
                      "timestamp": str(self.timestamp_ms)})

    @classmethod
    def from_bytes(cls, data: bytes) -> ControllerRegistration:
        v = _load(data, "controller")
        try:
            return cls(int(v["brokerid"]), int(v.get("timestamp", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"controller: bad value ({e})") from None


@dataclass(frozen=True)
class CoordinatorRegistration:
    """``/coordinator_shards/seats/[k]`` (ephemeral, written by shard k's elected
    coordinator); same shape as ``/controller``."""

    broker_id: int
    timestamp_ms: int = 0

    def to_bytes(self) -> bytes:
        return _dump({"version": 1, "brokerid": self.broker_id,
                      "timestamp": str(self.timestamp_ms)})

    @classmethod
    def from_bytes(cls, data: bytes) -> CoordinatorRegistration:
        v = _load(data, "consumer coordinator")
        try:
            return cls(int(v["brokerid"]), int(v.get("timestamp", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"consumer coordinator: bad value ({e})") from None


_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32_MAX = (1 << 31) - 1


def _int_within(v: Any, low: int, high: int) -> bool:
    return _is_int(v) and low <= v <= high


@dataclass(frozen=True)
class CommittedOffset:
    """``/consumers/[group]/offsets/[topic]/[partition]``: the next offset to consume, with
    what a Kafka client committed alongside it (OffsetCommit's ``committed_leader_epoch``,
    -1 when unknown, and ``committed_metadata``).

    An offset without either is written as ASCII decimal, Kafka's ZooKeeper-consumer format
    (byte for byte what was written before the extras were kept, so old entries read as
    epoch -1 and metadata ""); one with either as JSON
    ``{"version":1,"offset":..,"leader_epoch":..,"metadata":..}``. :meth:`from_bytes`
    refuses (ValueError) anything else, an out-of-range number or a wrong type: the store is
    not trusted to hold what this module wrote.
    """

    offset: int
    leader_epoch: int = -1
    metadata: str = ""

    @property
    def plain(self) -> bool:
        """Whether there is nothing but the offset."""
        return self.leader_epoch == -1 and self.metadata == ""

    def to_bytes(self) -> bytes:
        if self.plain:
            return str(int(self.offset)).encode()
        return _dump({"version": 1, "offset": int(self.offset),
                      "leader_epoch": int(self.leader_epoch), "metadata": self.metadata})

    @classmethod
    def from_bytes(cls, data: bytes | None) -> CommittedOffset:
        text = (data or b"").strip()
        if not text.startswith(b"{"):
            try:
                offset = int(text.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                raise ValueError("committed offset: neither a decimal nor JSON") from None
            if not _int_within(offset, *_INT64):
                raise ValueError(f"committed offset: {offset} is out of range")
            return cls(offset)
        v = _load(text, "committed offset")
        if not isinstance(v, dict) or v.get("version") != 1:
            raise ValueError("committed offset: not a version-1 object")
        offset, epoch, metadata = v.get("offset"), v.get("leader_epoch", -1), v.get("metadata", "")
        if not _int_within(offset, *_INT64):
            raise ValueError(f"committed offset: bad offset {offset!r}")
        if not _int_within(epoch, -1, _INT32_MAX):
            raise ValueError(f"committed offset: bad leader epoch {epoch!r}")
        if not isinstance(metadata, str):
            raise ValueError("committed offset: metadata is not a string")
        try:
            # JSON escapes can spell lone surrogates, which no answer could encode.
            metadata.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("committed offset: metadata is not valid text") from None
        return cls(offset, epoch, metadata)


def parse_offset_value(data: bytes | None) -> int | None:
    """The offset in an offsets znode, or None when it is empty or unreadable."""
    try:
        return CommittedOffset.from_bytes(data).offset
    except ValueError:
        return None


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/[topic]``: replicas per partition, the preferred replica first.

    While a partition is being reassigned its replicas are OAR ∪ RAR and ``adding`` /
    ``removing`` name the replicas the reassignment adds and will remove (Kafka's
    ``adding_replicas`` / ``removing_replicas``), so the original replicas (AR - adding) survive a
    controller failover and a cancellation can restore them. Both are written only when non-empty,
    so a topic without a reassignment keeps its version-1 value byte for byte.
    """

    partitions: dict[int, list[int]] = field(default_factory=dict)
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        value: dict[str, Any] = {"version": 1, "partitions": {
            str(p): list(r) for p, r in sorted(self.partitions.items())}}
        adding = {str(p): list(r) for p, r in sorted(self.adding.items()) if r}
        removing = {str(p): list(r) for p, r in sorted(self.removing.items()) if r}
        if adding:
            value["adding_replicas"] = adding
        if removing:
            value["removing_replicas"] = removing
        return _dump(value)

    @classmethod
    def from_bytes(cls, data: bytes) -> TopicAssignment:
        v = _load(data, "topic assignment")
        try:
            def table(key: str) -> dict[int, list[int]]:
                return {int(p): [int(b) for b in r] for p, r in (v.get(key) or {}).items()}

            parts = v["partitions"]
            return cls({int(p): [int(b) for b in r] for p, r in parts.items()},
                       table("adding_replicas"), table("removing_replicas"))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"topic assignment: bad value ({e})") from None


@dataclass(frozen=True)
class PartitionReassignment:
    """``/admin/reassign_partitions`` (written by an admin, shrunk and finally deleted by the
    controller): the new replicas (RAR) of each partition being reassigned, in Kafka's format
    ``{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[..]}]}`` (Kafka's
    ``log_dirs`` is accepted and ignored). The same format is the ``--reassignment-json-file``.

    Invariant: a partition appears at most once (a duplicate entry is a ValueError).
    """

    partitions: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return _dump({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": list(r)}
            for (t, p), r in sorted(self.partitions.items())]})

    @classmethod
    def from_bytes(cls, data: bytes) -> PartitionReassignment:
        v = _load(data, "partition reassignment")
        out: dict[tuple[str, int], list[int]] = {}
        try:
            entries = v["partitions"]
            if not isinstance(entries, list):
                raise TypeError("'partitions' is not a list")
            for e in entries:
                topic, part = e["topic"], e["partition"]
                replicas = e["replicas"]
                if not isinstance(topic, str) or isinstance(part, bool) or not isinstance(
                        part, int) or not isinstance(replicas, list) or not all(
                        isinstance(b, int) and not isinstance(b, bool) for b in replicas):
                    raise TypeError(f"bad entry {e}")
                if (topic, part) in out:
                    raise ValueError(f"partition {topic}-{part} is listed twice")
                out[(topic, part)] = list(replicas)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"partition reassignment: bad value ({e})") from None
        except ValueError as e:
            raise ValueError(f"partition reassignment: {e}") from None
        return cls(out)


@dataclass(frozen=True)
class PreferredReplicaElection:
    """``/admin/preferred_replica_election`` (written by an admin, deleted by the controller when
    it has acted): ``{"version":1,"partitions":[{"topic":T,"partition":P}]}``, Kafka's format.

    ElectLeaders' UNCLEAN type (KIP-460) writes the same document with
    ``"election":"unclean"`` added (``unclean``): the controller then gives each leaderless
    partition a live replica even outside the ISR. Kafka's ZooKeeper controller has no such
    request znode; a document without the field is a preferred election, so Kafka's tools'
    requests still read as they mean. Any other value of the field is refused on read."""

    partitions: list[tuple[str, int]] = field(default_factory=list)
    unclean: bool = False

    def to_bytes(self) -> bytes:
        value: dict = {"version": 1, "partitions": [{"topic": t, "partition": p}
                                                    for t, p in self.partitions]}
        if self.unclean:
            value["election"] = "unclean"
        return _dump(value)

    @classmethod
    def from_bytes(cls, data: bytes) -> PreferredReplicaElection:
        v = _load(data, "preferred replica election")
        try:
            out = []
            for e in v["partitions"]:
                topic, part = e["topic"], e["partition"]
                if not isinstance(topic, str) or isinstance(part, bool) or not isinstance(
                        part, int):
                    raise TypeError(f"bad entry {e}")
                out.append((topic, part))
            election = v.get("election", "preferred")
            if election not in ("preferred", "unclean"):
                raise TypeError(f"unknown election {election!r}")
            return cls(out, unclean=election == "unclean")
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"preferred replica election: bad value ({e})") from None


@dataclass(frozen=True)
class LeaderAndIsr:
    """``/brokers/topics/[topic]/[partition]/leaderAndISR`` (written by the controller)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    #: The leader's registration czxid when it was elected (-1: unknown / no leader).
    leader_broker_epoch: int = -1

    def to_bytes(self) -> bytes:
        # Exactly what ``_dump`` makes of the value (sorted keys, no spaces), formatted
        # directly: a failover writes thousands of these, and json.dumps was a sixth of the
        # controller's time. Every field is an int, so there is nothing to escape.
        return (f'{{"controller_epoch":{int(self.controller_epoch)},'
                f'"isr":[{",".join(str(int(b)) for b in self.isr)}],'
                f'"leader":{int(self.leader)},'
                f'"leader_broker_epoch":{int(self.leader_broker_epoch)},'
                f'"leader_epoch":{int(self.leader_epoch)},"version":1}}').encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LeaderAndIsr:
        v = _load(data, "leaderAndISR")
        try:
            return cls(int(v["leader"]), int(v["leader_epoch"]), [int(b) for b in v["isr"]],
                       int(v.get("controller_epoch", 0)), int(v.get("leader_broker_epoch", -1)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"leaderAndISR: bad value ({e})") from None


@dataclass(frozen=True)
class TopicConfig:
    """``/config/topics/[topic]``: per-topic config overrides."""

    config: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return _dump({"version": 1, "config": dict(self.config)})

    @classmethod
    def from_bytes(cls, data: bytes) -> TopicConfig:
        v = _load(data, "topic config")
        try:
            return cls({str(k): str(x) for k, x in v["config"].items()})
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"topic config: bad value ({e})") from None


def cluster_id_to_bytes(cluster_id: str) -> bytes:
    return json.dumps({"version": "1", "id": cluster_id}, separators=(",", ":")).encode()


def cluster_id_from_bytes(data: bytes) -> str:
    """The id of a ``/cluster/id`` value; ValueError names what is wrong."""
    try:
        value = json.loads(data)
        cluster_id = value["id"]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{CLUSTER_ID} holds {data[:80]!r}, not a cluster id ({e})") from None
    if not isinstance(cluster_id, str) or not cluster_id:
        raise ValueError(f"{CLUSTER_ID} holds {data[:80]!r}, not a cluster id")
    return cluster_id


def controller_unreachable(broker_id: int) -> str:
    """A broker's record that it cannot reach the controller (see CONTROLLER_UNREACHABLE)."""
    return f"{CONTROLLER_UNREACHABLE}/{broker_id}"
