"""A broker's configuration: :data:`BROKER_KEYS`, every component's keys in one table, and
:class:`BrokerConfig`, the typed and checked object a broker runs with.

Sources, lowest precedence first: the keys' defaults, a Java-properties file (``--config``),
then ``--set key=value`` pairs (``twistd broker``'s own options are turned into ``--set`` pairs
by ``broker_core.tap``). Every value is parsed and checked once, at start; a bad one stops the
broker with a :class:`~broker_core.config.parsing.ConfigError` naming the key.
``docs/configuration.md`` lists every key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from broker_core.config.broker_keys import BROKER_OWN_KEYS
from broker_core.config.coordinator_keys import COORDINATOR_KEYS
from broker_core.config.listener_keys import LISTENER_KEYS, check_limits
from broker_core.config.listeners import (
    OVERRIDE_PREFIX,
    SSL_KEYS,
    Listeners,
    parse_listeners,
    split_overrides,
)
from broker_core.config.metadata_keys import (
    METADATA_KEYS,
    QUORUM_DIR_NAME,
    check_metadata_store,
)
from broker_core.config.parsing import (
    HOUR_MS,
    LONG_MAX,
    MINUTE_MS,
    ConfigError,
    ConfigKey,
    as_text,
    parse_keys,
    unknown_key_message,
)
from broker_core.config.properties import read_properties
from broker_core.config.quorum import (
    RaftConfig,
    RaftConfigError,
    VoterAddress,
    parse_bootstrap_servers,
    parse_quorum_voters,
)
from broker_core.config.topic_keys import TOPIC_CONFIG_KEYS

#: Every broker key, each component's in turn (:class:`BrokerConfig`'s fields follow this
#: order): Kafka name -> its declaration.
BROKER_KEYS: dict[str, ConfigKey] = {**BROKER_OWN_KEYS, **LISTENER_KEYS, **METADATA_KEYS,
                                     **COORDINATOR_KEYS}

REQUIRED = tuple(k.name for k in BROKER_KEYS.values() if k.required)


def required_keys(cfg: BrokerConfig) -> tuple[str, ...]:
    """The keys ``cfg``'s metadata store needs besides :data:`REQUIRED` included: with them
    alone (and the defaults) a broker of the same mode can be configured."""
    if cfg.metadata_store == "zookeeper":
        return (*REQUIRED, "zookeeper.connect")
    given = tuple(key for key, value in (("quorum.voters", cfg.quorum_voters),
                                         ("quorum.bootstrap.servers",
                                          cfg.quorum_bootstrap_servers),
                                         ("quorum.listener", cfg.quorum_listener))
                  if value is not None)
    return (*REQUIRED, "metadata.store", *given)


@dataclass(frozen=True)
class BrokerConfig:
    """A broker's configuration: one typed, validated, immutable attribute per key.

    Attributes are the Kafka keys with dots as underscores; :meth:`get` takes the Kafka key.
    Invariant: every value has passed its key's check, and the two families with Kafka's
    precedence rules hold their effective value: ``log_roll_ms`` (``log.roll.ms``, else
    ``log.roll.hours``) and ``log_retention_ms`` (``log.retention.ms``, else ``.minutes``,
    else ``.hours``; any negative result is -1, no limit).
    """

    broker_id: int
    log_dirs: str
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    message_max_bytes: int
    log_segment_bytes: int
    log_roll_ms: int
    log_roll_hours: int
    log_retention_ms: int
    log_retention_minutes: int | None
    log_retention_hours: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_flush_interval_messages: int | None
    log_flush_interval_ms: int | None
    log_flush_scheduler_interval_ms: int | None
    log_index_interval_bytes: int
    log_message_timestamp_before_max_ms: int
    log_message_timestamp_after_max_ms: int
    log_open_segments_max: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    replica_fetch_wait_max_ms: int
    replica_lag_time_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    request_timeout_ms: int
    controller_socket_timeout_ms: int
    broker_heartbeat_interval_ms: int
    broker_session_timeout_ms: int
    fetch_purgatory_purge_interval_requests: int
    producer_purgatory_purge_interval_requests: int
    broker_rack: str | None
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    #: Kafka's ``NAME://host:port,...`` or a Twisted endpoint string (see
    #: :meth:`listener_configs`, the parsed model).
    listeners: str
    #: ``NAME://host:port,...`` or ``host:port`` (the first listener); None: each listener
    #: advertises its bound address.
    advertised_listeners: str | None
    #: ``NAME:PROTOCOL,...``; None: Kafka's default (each protocol's name maps to itself).
    listener_security_protocol_map: str | None
    #: None: the first listener.
    inter_broker_listener_name: str | None
    #: PEM files of TLS listeners (each overridable per listener; see listener_name_overrides).
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_cafile: str | None
    #: none, requested or required.
    ssl_client_auth: str
    #: Kafka's per-listener overrides ``listener.name.<name>.ssl.*``: (key, value) pairs, sorted.
    #: Not in BROKER_KEYS (the names are open-ended); checked by :meth:`listener_configs`.
    listener_name_overrides: tuple[tuple[str, str], ...]
    #: A file holding the cluster secret; every broker needs it (checked and read by
    #: ``broker_core.security.cluster_secret.load_cluster_credential``, which refuses a broker
    #: without it).
    cluster_secret_file: str | None
    #: Normalised ``A,B`` text; :meth:`sasl_mechanisms` gives the tuple.
    sasl_enabled_mechanisms: str
    metrics_listener: str | None
    #: A private file of ``user:<hash>`` lines; with it /metrics asks for HTTP basic auth.
    metrics_basic_auth_file: str | None
    authorizer_enabled: bool
    #: Principal texts (``User:admin``) allowed everything when the authorizer is on.
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool
    socket_request_max_bytes: int
    #: -1: unbounded. Else at least ``socket_request_max_bytes`` (checked at load).
    queued_max_request_bytes: int
    #: -1: never.
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    #: ``host:n,...``, each host's own per-IP limit (checked; read with ``parse_overrides``).
    max_connections_per_ip_overrides: str
    #: -1: never. How long a frame whose size has arrived may take to arrive whole.
    socket_request_read_timeout_ms: int
    #: -1: no cap. Else at least ``socket_request_max_bytes`` (checked at load).
    queued_max_request_bytes_per_ip: int
    #: ``zookeeper`` (the default) or ``quorum`` (the self-managed metadata quorum).
    metadata_store: str
    #: None only in quorum mode.
    zookeeper_connect: str | None
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    #: Every znode the broker creates is writable by the brokers' credential only (Kafka's
    #: key); needs ``zookeeper_auth_file``.
    zookeeper_set_acl: bool
    #: A private file ``username:password``: the brokers' ZooKeeper credential.
    zookeeper_auth_file: str | None
    #: How the credential is proven: ``DIGEST-MD5`` (a SASL login, the default) or
    #: ``digest`` (ZooKeeper's built-in scheme, for servers without a JAAS file).
    zookeeper_auth_mechanism: str
    #: Quorum mode: ``quorum.voters`` as given (checked by :meth:`quorum_voter_addresses`).
    quorum_voters: str | None
    #: Quorum mode: ``host:port,...`` of quorum listeners to find the quorum through
    #: (DiscoverBrokers); with it ``quorum.voters`` may be left out (checked at construction).
    quorum_bootstrap_servers: str | None
    #: Quorum mode: this broker's quorum listener ``host:port`` (default: its voter entry's).
    quorum_listener: str | None
    #: Quorum mode: the quorum listener's name (its protocol and TLS files: listener_configs).
    quorum_listener_name: str
    #: Quorum mode: the quorum-state file and the metadata log (default: see
    #: :meth:`quorum_data_path`).
    quorum_data_dir: str | None
    #: Quorum mode: the quorum node's settings (see :meth:`raft_config`).
    quorum_election_timeout_ms: int
    quorum_fetch_timeout_ms: int
    quorum_election_backoff_max_ms: int
    quorum_request_timeout_ms: int
    quorum_retry_backoff_ms: int
    quorum_snapshot_interval_entries: int
    quorum_snapshot_interval_bytes: int
    #: -1: keep the whole metadata log.
    quorum_snapshot_retain_entries: int
    quorum_fetch_snapshot_max_bytes: int
    cluster_id: str
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    group_initial_rebalance_quiet_ms: int
    group_max_size: int
    rebalance_backoff_ms: int
    rebalance_max_retries: int
    offsets_commit_interval_ms: int
    offset_metadata_max_bytes: int
    coordinator_rebalance_handlers: int
    coordinator_ping_max_failures: int
    coordinator_empty_group_retention_ms: int
    group_coordinator_shards: int

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> BrokerConfig:
        """Build from Kafka keys -> text (defaults fill the rest); raises ConfigError."""
        values, overrides = split_overrides(values)
        attrs = parse_keys(BROKER_KEYS, values)
        attrs["listener_name_overrides"] = tuple(sorted(
            (k, as_text(v)) for k, v in overrides.items()))
        if attrs["log_roll_ms"] is None:
            attrs["log_roll_ms"] = attrs["log_roll_hours"] * HOUR_MS
        if attrs["log_retention_ms"] is None:
            minutes = attrs["log_retention_minutes"]
            attrs["log_retention_ms"] = (minutes * MINUTE_MS if minutes is not None
                                         else attrs["log_retention_hours"] * HOUR_MS)
        attrs["log_retention_ms"] = max(-1, attrs["log_retention_ms"])
        if attrs["group_min_session_timeout_ms"] > attrs["group_max_session_timeout_ms"]:
            raise ConfigError(
                f"group.min.session.timeout.ms ({attrs['group_min_session_timeout_ms']}) is "
                f"above group.max.session.timeout.ms ({attrs['group_max_session_timeout_ms']})",
                "group.min.session.timeout.ms")
        if attrs["broker_heartbeat_interval_ms"] >= attrs["broker_session_timeout_ms"]:
            # At least one heartbeat must fit in a session, or every broker is fenced at once.
            raise ConfigError(
                f"broker.heartbeat.interval.ms ({attrs['broker_heartbeat_interval_ms']}) must be "
                f"below broker.session.timeout.ms ({attrs['broker_session_timeout_ms']})",
                "broker.heartbeat.interval.ms")
        check_limits(attrs)
        check_metadata_store(attrs)
        cfg = cls(**attrs)
        cfg.listener_configs()  # the listener keys' agreement (ConfigError)
        if cfg.metadata_store == "quorum":
            cfg.raft_config()  # the quorum keys' agreement (ConfigError)
        return cfg

    @classmethod
    def from_sources(cls, file: Path | None, overrides: Mapping[str, str]) -> BrokerConfig:
        """Defaults, then the properties ``file`` (if any), then ``overrides`` (``--set``)."""
        values: dict[str, object] = {}
        if file is not None:
            values.update(read_properties(Path(file)))
        values.update(overrides)
        return cls.from_mapping(values)

    # -- SASL --------------------------------------------------------------------------------

    def sasl_mechanisms(self) -> tuple[str, ...]:
        """``sasl.enabled.mechanisms`` as a tuple, in the order given."""
        return tuple(self.sasl_enabled_mechanisms.split(","))

    # -- the metadata quorum -------------------------------------------------------------------

    def quorum_voter_addresses(self) -> dict[int, VoterAddress]:
        """``quorum.voters`` parsed: voter id -> ``VoterAddress`` (quorum mode only; empty
        when only ``quorum.bootstrap.servers`` is given)."""
        if not self.quorum_voters:
            return {}
        try:
            return parse_quorum_voters(self.quorum_voters or "", "quorum.voters")
        except RaftConfigError as e:
            raise ConfigError(str(e), "quorum.voters") from None

    def quorum_bootstrap_server_list(self) -> list[tuple[str, int]]:
        """``quorum.bootstrap.servers`` parsed (empty when not given)."""
        if not self.quorum_bootstrap_servers:
            return []
        return parse_bootstrap_servers(self.quorum_bootstrap_servers, "quorum.bootstrap.servers")

    def quorum_listen_address(self) -> tuple[str, int]:
        """Where this broker's quorum listener binds: ``quorum.listener``, else its own entry
        in ``quorum.voters`` (quorum mode only; checked at construction)."""
        if self.quorum_listener is not None:
            host, _, port = self.quorum_listener.rpartition(":")
            return host.strip("[]"), int(port)
        own = self.quorum_voter_addresses()[self.broker_id]
        return own.host, own.port

    def raft_config(self) -> RaftConfig:
        """The quorum node's :class:`~broker_core.config.quorum.RaftConfig` from the
        ``quorum.*`` keys; ConfigError when they disagree (e.g. a request timeout not above
        the fetch wait)."""
        retain = self.quorum_snapshot_retain_entries
        try:
            return RaftConfig(
                election_timeout_ms=self.quorum_election_timeout_ms,
                fetch_timeout_ms=self.quorum_fetch_timeout_ms,
                election_backoff_max_ms=self.quorum_election_backoff_max_ms,
                request_timeout_ms=self.quorum_request_timeout_ms,
                retry_backoff_ms=self.quorum_retry_backoff_ms,
                snapshot_interval_entries=self.quorum_snapshot_interval_entries,
                snapshot_interval_bytes=self.quorum_snapshot_interval_bytes,
                snapshot_retain_entries=None if retain < 0 else retain,
                fetch_snapshot_max_bytes=self.quorum_fetch_snapshot_max_bytes)
        except RaftConfigError as e:
            # The message names the key (RaftConfig's checks use the quorum.* names).
            found = re.search(r"quorum\.[a-z.]+", str(e))
            raise ConfigError(str(e), found.group(0) if found else "quorum") from None

    def log_dir_paths(self) -> list[Path]:
        """The directories of ``log.dirs``, in the order given (the first also holds the
        metadata quorum's data by default)."""
        return [Path(p) for p in self.log_dirs.split(",")]

    def quorum_data_path(self) -> Path:
        """``quorum.data.dir``, else ``quorum`` inside the first directory of ``log.dirs`` (a
        name the log manager never takes for a partition: see
        ``broker_core.log.manager.RESERVED_DIRS``)."""
        return Path(self.quorum_data_dir) if self.quorum_data_dir else \
            self.log_dir_paths()[0] / QUORUM_DIR_NAME

    # -- access --------------------------------------------------------------------------------

    def get(self, key: str) -> Any:
        """The value of a Kafka key (``cfg.get("num.partitions")``); ConfigError if unknown."""
        override = dict(self.listener_name_overrides).get(key)
        if override is not None:
            return override
        spec = BROKER_KEYS.get(key)
        if spec is None:
            raise ConfigError(unknown_key_message(key, BROKER_KEYS), key)
        return getattr(self, spec.attr)

    def as_properties(self) -> dict[str, str]:
        """Every key with its effective value as text (None as ""), e.g. for a startup log line
        or DescribeConfigs."""
        props = {name: as_text(getattr(self, spec.attr)) for name, spec in BROKER_KEYS.items()}
        props.update(self.listener_name_overrides)
        return props

    @property
    def log_roll_effective_ms(self) -> int:
        """Same as ``log_roll_ms`` (kept for callers that used this name)."""
        return self.log_roll_ms

    def listener_configs(self) -> Listeners:
        """The listeners as a checked :class:`~broker_core.config.listeners.Listeners`
        (ConfigError naming the key if the listener keys disagree)."""
        return parse_listeners(
            self.listeners, protocol_map=self.listener_security_protocol_map,
            inter_broker_listener_name=self.inter_broker_listener_name,
            advertised_listeners=self.advertised_listeners,
            ssl={"ssl.certfile": self.ssl_certfile, "ssl.keyfile": self.ssl_keyfile,
                 "ssl.cafile": self.ssl_cafile, "ssl.client.auth": self.ssl_client_auth},
            overrides=dict(self.listener_name_overrides),
            quorum=((self.quorum_listener_name, *self.quorum_listen_address())
                    if self.metadata_store == "quorum" else None))

    def advertised_address(self, bound_host: str, bound_port: int) -> tuple[str, int]:
        """The first listener's advertised ``(host, port)`` once bound to
        ``bound_host:bound_port`` (see ``ListenerConfig.advertised_address``)."""
        return self.listener_configs().listeners[0].advertised_address(bound_host, bound_port)


assert [f.name for f in fields(BrokerConfig) if f.name != "listener_name_overrides"] == \
    [k.attr for k in BROKER_KEYS.values()]


def broker_key_doc(name: str) -> str | None:
    """DescribeConfigs' documentation of broker key ``name``: for a broker-level default of a
    topic key, that topic key's documentation, said as such; for a per-listener override
    (``listener.name.<name>.ssl.*``), the overridden key's, said as such; for every other
    broker key its own (:attr:`~broker_core.config.parsing.ConfigKey.doc`). None for a name
    that is none of these."""
    listener, _, suffix = name.removeprefix(OVERRIDE_PREFIX).partition(".")
    if name.startswith(OVERRIDE_PREFIX) and listener and suffix in SSL_KEYS:
        return (f"Listener {listener.upper()}'s own {suffix}, in place of the broker's. "
                f"{BROKER_KEYS[suffix].doc}")
    spec = BROKER_KEYS.get(name)
    if spec is None:
        return None
    for topic_key in TOPIC_CONFIG_KEYS.values():
        if topic_key.synonym == name:
            return f"The broker-level default of the topic key {topic_key.name}. {topic_key.doc}"
    return spec.doc


def topic_defaults(cfg: BrokerConfig) -> dict[str, str]:
    """The broker-level defaults expressed as topic keys (what a topic without overrides gets),
    in :data:`TOPIC_CONFIG_KEYS` order: the effective value of the broker synonym where Sluice
    has it, else the key's built-in value. "Never" flush settings are Kafka's
    ``Long.MAX_VALUE``; ``segment.ms`` is the effective ``log.roll.ms``/``log.roll.hours``."""
    out = {}
    for key, spec in TOPIC_CONFIG_KEYS.items():
        if spec.synonym not in BROKER_KEYS:
            out[key] = spec.builtin or ""
            continue
        value = cfg.get(spec.synonym)
        if value is None:  # only the flush keys may be unset: Kafka's "never"
            value = LONG_MAX
        out[key] = as_text(value)
    return out
