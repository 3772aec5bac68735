"""The keys of the broker's metadata store: ``metadata.store``, ZooKeeper's (connection, ACLs)
and the metadata quorum's (voters, listener, timings, snapshots), and ``cluster.id``
(:func:`check_metadata_store` checks that the chosen store has what it needs)."""

from __future__ import annotations

from typing import Any

from broker_core.config.parsing import (
    INT_MAX,
    ConfigError,
    ConfigKey,
    bad_value,
    boolean,
    host_port,
    integer,
    key_table,
    optional_text,
    text,
)
from broker_core.config.quorum import (
    RaftConfigError,
    parse_bootstrap_servers,
    parse_quorum_voters,
)


def zookeeper_connect(key: str, raw: str) -> str:
    """``host:port[,host:port...][/chroot]``; a missing port means 2181 (kazoo's default)."""
    value = raw.strip()
    expected = "host:port[,host:port...][/chroot]"
    if not value or any(c.isspace() for c in value):
        raise bad_value(key, raw, expected)
    hosts, slash, chroot = value.partition("/")
    if slash and (not chroot or chroot.endswith("/") or "//" in chroot):
        raise bad_value(key, raw, expected + " with a chroot like /sluice")
    for server in hosts.split(","):
        host, sep, port = server.rpartition(":") if ":" in server else (server, "", "")
        if not host or (sep and (not port.isdigit() or not 1 <= int(port) <= 65535)):
            raise bad_value(key, raw, expected)
    return value


#: ``zookeeper.auth.mechanism`` values: SASL DIGEST-MD5 (the default), or ZooKeeper's
#: built-in ``digest`` scheme for servers that cannot be given a JAAS file.
SASL_DIGEST_MD5 = "DIGEST-MD5"
DIGEST = "digest"
MECHANISMS: tuple[str, ...] = (SASL_DIGEST_MD5, DIGEST)


def parse_mechanism(raw: str) -> str:
    """``raw`` as one of :data:`MECHANISMS` (case does not matter); ValueError otherwise."""
    for mechanism in MECHANISMS:
        if raw.strip().lower() == mechanism.lower():
            return mechanism
    raise ValueError(f"{raw!r} is not a ZooKeeper auth mechanism: {' or '.join(MECHANISMS)}")


def zookeeper_auth_mechanism(key: str, raw: str) -> str:
    """``DIGEST-MD5`` (SASL) or ``digest`` (ZooKeeper's built-in scheme), any case."""
    try:
        return parse_mechanism(raw)
    except ValueError:
        raise bad_value(key, raw, " or ".join(MECHANISMS)) from None


def metadata_store(key: str, raw: str) -> str:
    """``zookeeper`` or ``quorum``."""
    value = raw.strip().lower()
    if value not in ("zookeeper", "quorum"):
        raise bad_value(key, raw, "zookeeper or quorum")
    return value


#: The directory inside ``log.dirs`` that holds the metadata quorum's data by default.
QUORUM_DIR_NAME = "quorum"


def check_metadata_store(attrs: dict[str, Any]) -> None:
    """The keys one metadata store needs, and the quorum keys' agreement with each other."""
    if attrs["metadata_store"] == "zookeeper":
        if not attrs["zookeeper_connect"]:
            raise ConfigError("missing required config key 'zookeeper.connect'",
                              "zookeeper.connect")
        if attrs["zookeeper_set_acl"] and not attrs["zookeeper_auth_file"]:
            raise ConfigError("zookeeper.set.acl=true needs 'zookeeper.auth.file' (a private "
                              "file 'username:password'): the ACLs name that identity",
                              "zookeeper.auth.file")
        return
    if not attrs["quorum_voters"] and not attrs["quorum_bootstrap_servers"]:
        raise ConfigError("metadata.store=quorum needs 'quorum.voters' "
                          "(id@host:port,id@host:port,...) for the quorum's first start, or "
                          "'quorum.bootstrap.servers' (host:port,...) to find it",
                          "quorum.voters")
    voters = {}
    if attrs["quorum_voters"]:
        try:
            voters = parse_quorum_voters(attrs["quorum_voters"], "quorum.voters")
        except RaftConfigError as e:
            raise ConfigError(str(e), "quorum.voters") from None
    if attrs["quorum_bootstrap_servers"]:
        try:
            parse_bootstrap_servers(attrs["quorum_bootstrap_servers"], "quorum.bootstrap.servers")
        except RaftConfigError as e:
            raise ConfigError(str(e), "quorum.bootstrap.servers") from None
    own = voters.get(attrs["broker_id"])
    listener = attrs["quorum_listener"]
    if own is None and listener is None:
        raise ConfigError(f"broker {attrs['broker_id']} is not in quorum.voters, so it runs as "
                          "an observer and needs 'quorum.listener' (host:port)",
                          "quorum.listener")
    if own is not None and listener is not None:
        host, _, port = listener.rpartition(":")
        if int(port) != own.port:
            raise ConfigError(f"quorum.listener {listener} does not match this broker's "
                              f"entry {own} in quorum.voters (the voters reach it there)",
                              "quorum.listener")


#: The metadata store's keys: (Kafka name, attribute, parser, default text, doc, required).
METADATA_KEYS: dict[str, ConfigKey] = key_table(
    ("metadata.store", "metadata_store", metadata_store, "zookeeper",
     "Where the cluster's metadata lives: zookeeper, or quorum for Sluice's own Raft metadata "
     "quorum in the brokers."),
    # Required in ZooKeeper mode only (checked in ``from_mapping``).
    ("zookeeper.connect", "zookeeper_connect", zookeeper_connect, None,
     "ZooKeeper connect string host:port[,host:port...][/chroot] (a missing port means 2181); "
     "required with the zookeeper store."),
    ("zookeeper.session.timeout.ms", "zookeeper_session_timeout_ms", integer(1, INT_MAX),
     "18000",
     "The metadata session timeout in milliseconds; a broker whose session is lost this long is "
     "considered dead."),
    ("zookeeper.connection.timeout.ms", "zookeeper_connection_timeout_ms", integer(1, INT_MAX),
     "18000",
     "How long in milliseconds the broker waits at start to open its metadata session before "
     "giving up."),
    # ZooKeeper ACLs (broker_core.zk.acl_policy): the brokers' credential, how they prove it,
    # and whether the nodes they create are writable by them only.
    ("zookeeper.set.acl", "zookeeper_set_acl", boolean, "false",
     "Whether the znodes the broker creates are writable by the brokers' credential only; needs "
     "zookeeper.auth.file."),
    ("zookeeper.auth.file", "zookeeper_auth_file", optional_text, None,
     "A private file holding username:password on one line: the brokers' ZooKeeper credential, "
     "the same on every broker."),
    ("zookeeper.auth.mechanism", "zookeeper_auth_mechanism", zookeeper_auth_mechanism,
     "DIGEST-MD5",
     "How the broker proves its ZooKeeper credential: DIGEST-MD5 (a SASL login) or digest "
     "(ZooKeeper's built-in scheme)."),
    ("quorum.voters", "quorum_voters", optional_text, None,
     "Quorum mode: the bootstrap voters as id@host:port,...; a broker not listed runs as an "
     "observer."),
    ("quorum.bootstrap.servers", "quorum_bootstrap_servers", optional_text, None,
     "Quorum mode: host:port,... of quorum listeners to find the quorum through; with it "
     "quorum.voters may be left out."),
    ("quorum.listener", "quorum_listener", host_port, None,
     "Quorum mode: host:port this broker's quorum listener binds (default: its voter entry's; "
     "an observer must set it)."),
    # The quorum listener's name: its protocol comes from listener.security.protocol.map and
    # its TLS files from listener.name.<name>.ssl.* (broker_core/config/listeners.py).
    ("quorum.listener.name", "quorum_listener_name", text, "QUORUM",
     "Quorum mode: the quorum listener's name, which picks its protocol and TLS files from the "
     "listener keys."),
    ("quorum.data.dir", "quorum_data_dir", optional_text, None,
     "Quorum mode: the directory of the quorum-state file and the metadata log (default: quorum "
     "in the first log directory)."),
    # The quorum node's timings and snapshots (RaftConfig's fields; defaults are its own).
    ("quorum.election.timeout.ms", "quorum_election_timeout_ms", integer(1, INT_MAX), "1000",
     "Quorum mode: how long in milliseconds a voter without a leader waits (randomised up to "
     "twice this) before standing for election."),
    ("quorum.fetch.timeout.ms", "quorum_fetch_timeout_ms", integer(1, INT_MAX), "2000",
     "Quorum mode: milliseconds without word from the leader before a follower stands for "
     "election, or without a majority's fetches before a leader resigns."),
    ("quorum.election.backoff.max.ms", "quorum_election_backoff_max_ms", integer(1, INT_MAX),
     "1000",
     "Quorum mode: the most milliseconds a lost candidacy waits before standing again."),
    ("quorum.request.timeout.ms", "quorum_request_timeout_ms", integer(1, INT_MAX), "2000",
     "Quorum mode: one quorum request's timeout in milliseconds."),
    ("quorum.retry.backoff.ms", "quorum_retry_backoff_ms", integer(1, INT_MAX), "20",
     "Quorum mode: the pause in milliseconds before a failed quorum request is sent again."),
    ("quorum.snapshot.interval.entries", "quorum_snapshot_interval_entries",
     integer(0, INT_MAX, what="an integer ≥ 0 (0: no snapshot by entry count)"), "100000",
     "Quorum mode: snapshot the metadata once this many entries were applied since the last one "
     "(0: never by count)."),
    ("quorum.snapshot.interval.bytes", "quorum_snapshot_interval_bytes",
     integer(0, what="an integer ≥ 0 (0: no snapshot by size)"), "20971520",
     "Quorum mode: snapshot the metadata once this many payload bytes were applied since the "
     "last one (0: never by size)."),
    ("quorum.snapshot.retain.entries", "quorum_snapshot_retain_entries",
     integer(-1, what="an integer ≥ -1 (-1: keep the whole log)"), "100000",
     "Quorum mode: entries the metadata log keeps below its end after a snapshot (-1: keep the "
     "whole log)."),
    ("quorum.fetch.snapshot.max.bytes", "quorum_fetch_snapshot_max_bytes",
     integer(1, INT_MAX), "1048576",
     "Quorum mode: the most snapshot bytes one FetchSnapshot answer carries."),
    ("cluster.id", "cluster_id", text, "sluice",
     "Quorum mode: the cluster's id, the same on every broker; a quorum request carrying another "
     "is refused. Ignored in ZooKeeper mode, where the first broker generates the id."),
)
