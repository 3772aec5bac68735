"""The broker's named listeners, as Kafka names them: parsed and checked, no I/O.

``listeners`` is either Kafka's list ``NAME://host:port[,NAME://host:port...]`` (an empty host
binds every interface, port 0 any free port) or, as before, one Twisted server endpoint string
(``tcp:9092:interface=127.0.0.1``), which is one listener named ``PLAINTEXT``. Each listener's
security protocol comes from ``listener.security.protocol.map`` (Kafka's default maps each
protocol's own name to itself); ``inter.broker.listener.name`` picks the one other brokers use
(default: the first); ``advertised.listeners`` says where clients reach each one, either
Kafka's ``NAME://host:port,...`` or the old single ``host:port`` (for the first listener).

TLS listeners (SSL, SASL_SSL) take their PEM files from ``ssl.certfile``, ``ssl.keyfile``,
``ssl.cafile`` and ``ssl.client.auth``, each overridable per listener as
``listener.name.<lowercase name>.ssl.certfile`` (Kafka's override form).

In quorum mode the metadata quorum's listener (bound at ``quorum.listener``, not in
``listeners``) is named too, as KRaft names its controller listener: ``quorum.listener.name``
(default ``QUORUM``). Its protocol comes from the same map (PLAINTEXT when the map does not
name it) and its TLS files from the same keys and overrides, resolved by the same code
(:attr:`Listeners.quorum`).

Invariants of a :class:`Listeners` value (every violation is a :class:`ConfigError` naming
the key at parse time):

- listener names are upper case (Kafka normalises them so) and unique; at least one listener;
- no two listeners name the same non-zero port;
- every name in an explicit protocol map, in ``advertised.listeners`` and in a
  ``listener.name.*`` override is a listener;
- the inter-broker listener is a listener; a TLS one has ``ssl.cafile`` (brokers connect to
  each other through it, verifying each other's certificates against that CA);
- every TLS listener has a certificate and a key; ``ssl.client.auth`` other than ``none``
  has a CA file to check client certificates against;
- the quorum listener's name is not one of ``listeners`` (it is a port of its own); a TLS
  quorum listener has ``ssl.cafile`` (quorum nodes verify each other's certificates, as
  brokers do on the inter-broker listener).

Binding the listeners and building their TLS contexts is
:mod:`broker_core.server.listener_endpoints`' job.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from broker_core.config.parsing import ConfigError
from broker_core.security.principal import ListenerSettings, SecurityProtocol

#: Kafka's listener names: letters, digits, ``_`` and ``-`` (upper-cased once parsed).
_NAME = re.compile(r"[A-Za-z0-9_-]+")
#: The security protocol of each listener named after one, unless the map says otherwise.
DEFAULT_PROTOCOL_MAP = {p.value: p for p in SecurityProtocol}
#: The per-listener TLS keys; ``listener.name.<name>.`` + one of these overrides the broker's.
SSL_KEYS = ("ssl.certfile", "ssl.keyfile", "ssl.cafile", "ssl.client.auth")
OVERRIDE_PREFIX = "listener.name."


class ClientAuth(enum.Enum):
    """``ssl.client.auth``: whether a TLS listener asks clients for a certificate."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


@dataclass(frozen=True)
class TlsFiles:
    """A TLS listener's PEM files (paths as configured; read when the broker starts) and
    ``ssl.client.auth``. ``key_prefix`` is where each came from, for error messages."""

    certfile: str
    keyfile: str
    cafile: str | None
    client_auth: ClientAuth
    #: The key naming each file: ``ssl.certfile`` or ``listener.name.x.ssl.certfile``.
    keys: tuple[tuple[str, str], ...] = ()

    def key_of(self, ssl_key: str) -> str:
        return dict(self.keys).get(ssl_key, ssl_key)


@dataclass(frozen=True)
class ListenerConfig:
    """One listener: its name, protocol, where it binds and what it advertises.

    ``endpoint`` is set for the old Twisted-endpoint form (bound as given); otherwise the
    listener binds TCP ``host:port`` (``host`` empty: every interface)."""

    name: str
    protocol: SecurityProtocol
    host: str
    port: int
    endpoint: str | None = None
    #: ``(host, port)`` from ``advertised.listeners``; None: the bound address.
    advertised: tuple[str, int] | None = None
    tls: TlsFiles | None = None

    @property
    def settings(self) -> ListenerSettings:
        """What each connection accepted on this listener is told about it."""
        return ListenerSettings(self.name, self.protocol)

    def advertised_address(self, bound_host: str, bound_port: int) -> tuple[str, int]:
        """Where clients reach this listener once bound to ``bound_host:bound_port``: the
        advertised address if configured, else the bound one with a wildcard interface
        (``0.0.0.0``, ``::`` or none) replaced by ``127.0.0.1``. A cluster spanning machines
        must set ``advertised.listeners``."""
        if self.advertised is not None:
            return self.advertised
        if bound_host in ("", "0.0.0.0", "::"):
            bound_host = "127.0.0.1"
        return bound_host, bound_port


@dataclass(frozen=True)
class Listeners:
    """Every listener of a broker, in configured order, and the inter-broker one's name."""

    listeners: tuple[ListenerConfig, ...]
    inter_broker: str
    #: The metadata quorum's listener in quorum mode (its address is ``quorum.listener``'s;
    #: not among :attr:`listeners`, which the broker binds itself), else None.
    quorum: ListenerConfig | None = None

    def __iter__(self):  # noqa: ANN204 (an iterator of ListenerConfig)
        return iter(self.listeners)

    def __len__(self) -> int:
        return len(self.listeners)

    def get(self, name: str) -> ListenerConfig | None:
        return next((lc for lc in self.listeners if lc.name == name), None)

    @property
    def inter_broker_listener(self) -> ListenerConfig:
        found = self.get(self.inter_broker)
        assert found is not None  # checked at parse time
        return found

    def protocol_map(self) -> dict[str, str]:
        """Listener name -> protocol name, as Kafka's registration znode carries it."""
        return {lc.name: lc.protocol.value for lc in self.listeners}


# -- parsing -----------------------------------------------------------------------------------

def _bad(key: str, raw: str, expected: str) -> ConfigError:
    return ConfigError(f"invalid value {raw!r} for {key!r}: expected {expected}", key)


def _name(key: str, raw: str, name: str) -> str:
    if not _NAME.fullmatch(name):
        raise _bad(key, raw, f"listener names of letters, digits, '_' and '-' (not {name!r})")
    return name.upper()


def _host_port(key: str, raw: str, text: str, *, port_zero: bool) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    lo = 0 if port_zero else 1
    if not sep or not port.isdigit() or not lo <= int(port) <= 65535:
        raise _bad(key, raw, f"host:port with a port from {lo} to 65535")
    if host.startswith("[") != host.endswith("]"):
        raise _bad(key, raw, "an IPv6 host in brackets, e.g. [::1]:9092")
    return host.strip("[]"), int(port)


def is_kafka_form(raw: str) -> bool:
    """Whether ``listeners`` is Kafka's ``NAME://host:port,...`` (else a Twisted endpoint)."""
    return "://" in raw


def parse_named_list(key: str, raw: str, *, port_zero: bool) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` -> ``[(NAME, host, port), ...]``; names upper-cased and unique."""
    out: list[tuple[str, str, int]] = []
    for item in raw.split(","):
        item = item.strip()
        name, sep, hostport = item.partition("://")
        if not sep:
            raise _bad(key, raw, "NAME://host:port[,NAME://host:port...]")
        name = _name(key, raw, name)
        if any(name == n for n, _, _ in out):
            raise ConfigError(f"{key}: listener name {name} is given twice in {raw!r}", key)
        host, port = _host_port(key, raw, hostport, port_zero=port_zero)
        out.append((name, host, port))
    return out


def _twisted_port(raw: str) -> int:
    """The port of a ``tcp:``/``tcp6:`` endpoint string (0 for other kinds: unknown here)."""
    kind, _, rest = raw.partition(":")
    if kind not in ("tcp", "tcp6"):
        return 0
    first = rest.split(":", 1)[0]
    port = first.partition("=")[2] if first.startswith("port=") else first
    return int(port) if port.isdigit() else 0


def parse_protocol_map(key: str, raw: str | None) -> dict[str, SecurityProtocol] | None:
    """``NAME:PROTOCOL,...`` -> name -> protocol; None when not given (Kafka's default)."""
    if raw is None or not raw.strip():
        return None
    out: dict[str, SecurityProtocol] = {}
    for item in raw.split(","):
        name, sep, proto = item.strip().partition(":")
        if not sep:
            raise _bad(key, raw, "NAME:PROTOCOL[,NAME:PROTOCOL...]")
        name = _name(key, raw, name.strip())
        try:
            protocol = SecurityProtocol(proto.strip().upper())
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            raise ConfigError(f"{key}: unknown security protocol {proto.strip()!r} for "
                              f"listener {name} (one of {known})", key) from None
        if name in out:
            raise ConfigError(f"{key}: listener {name} is mapped twice", key)
        out[name] = protocol
    return out


def split_overrides(values: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Separate ``listener.name.<name>.<ssl key>`` overrides from the other keys; an override
    of a key that has no per-listener form is a ConfigError."""
    rest: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for key, value in values.items():
        if not key.startswith(OVERRIDE_PREFIX):
            rest[key] = value
            continue
        name, _, suffix = key[len(OVERRIDE_PREFIX):].partition(".")
        if not name or suffix not in SSL_KEYS:
            raise ConfigError(
                f"unknown config key {key!r}: per-listener keys are "
                f"listener.name.<listener>.{{{','.join(SSL_KEYS)}}}", key)
        overrides[key] = value
    return rest, overrides


def parse_listeners(
    listeners: str,
    *,
    protocol_map: str | None = None,
    inter_broker_listener_name: str | None = None,
    advertised_listeners: str | None = None,
    ssl: Mapping[str, str | None] | None = None,
    overrides: Mapping[str, str] | None = None,
    quorum: tuple[str, str, int] | None = None,
) -> Listeners:
    """Build and check the listener model from the keys' texts; see the module docstring.

    ``ssl`` holds the broker-wide ``ssl.*`` keys (by Kafka name), ``overrides`` the
    ``listener.name.*`` keys, ``quorum`` (quorum mode only) the quorum listener's
    ``(quorum.listener.name, host, port)``."""
    raw = listeners.strip()
    if not raw:
        raise _bad("listeners", listeners, "NAME://host:port[,...] or a Twisted server "
                                           "endpoint such as 'tcp:9092'")
    explicit = parse_protocol_map("listener.security.protocol.map", protocol_map)
    pmap = explicit if explicit is not None else DEFAULT_PROTOCOL_MAP
    if is_kafka_form(raw):
        named = parse_named_list("listeners", raw, port_zero=True)
        entries = [(n, h, p, None) for n, h, p in named]
    else:
        # The old form: one Twisted endpoint (checked by config.endpoint), one PLAINTEXT listener.
        entries = [("PLAINTEXT", "", _twisted_port(raw), raw)]
    ports: dict[int, str] = {}
    for name, _, port, _ in entries:
        if port and port in ports:
            raise ConfigError(f"listeners: {ports[port]} and {name} both listen on port {port}",
                              "listeners")
        ports[port] = name
    names = [e[0] for e in entries]
    quorum_name = _quorum_name(quorum, names, ports)
    # Names the protocol map and the overrides may speak of: the listeners and the quorum's.
    known = names + ([quorum_name] if quorum_name else [])
    for name in explicit or {}:
        if name not in known:
            raise ConfigError(f"listener.security.protocol.map names {name}, which is not in "
                              f"listeners ({', '.join(known)})", "listener.security.protocol.map")
    advertised = _advertised(advertised_listeners, names)
    by_override = _overrides_by_listener(overrides or {}, known)
    built = []
    for name, host, port, endpoint in entries:
        protocol = pmap.get(name) or DEFAULT_PROTOCOL_MAP.get(name)
        if protocol is None:
            raise ConfigError(
                f"listener {name} has no security protocol: add {name}:PROTOCOL (PLAINTEXT, "
                "SSL, SASL_PLAINTEXT or SASL_SSL) to listener.security.protocol.map",
                "listener.security.protocol.map")
        tls = (_tls_files(name, ssl or {}, by_override.get(name, {}))
               if protocol.uses_tls else None)
        built.append(ListenerConfig(name, protocol, host, port, endpoint,
                                    advertised.get(name), tls))
    inter = (inter_broker_listener_name or "").strip()
    inter = _name("inter.broker.listener.name", inter, inter) if inter else names[0]
    if inter not in names:
        raise ConfigError(f"inter.broker.listener.name {inter} is not one of the listeners "
                          f"({', '.join(names)})", "inter.broker.listener.name")
    inter_tls = next(lc.tls for lc in built if lc.name == inter)
    if inter_tls is not None and not inter_tls.cafile:
        # Brokers verify each other's certificates against it (and present their own).
        raise ConfigError(
            f"inter.broker.listener.name {inter} is a TLS listener and needs ssl.cafile (the "
            "CA that signs the brokers' certificates, which brokers verify each other "
            "against)", inter_tls.key_of("ssl.cafile"))
    quorum_lc = None
    if quorum is not None and quorum_name is not None:
        quorum_lc = _quorum_listener(quorum, quorum_name, pmap, ssl or {},
                                     by_override.get(quorum_name, {}))
    return Listeners(tuple(built), inter, quorum_lc)


def _quorum_name(quorum: tuple[str, str, int] | None, names: list[str],
                 ports: dict[int, str]) -> str | None:
    """The quorum listener's checked name (None outside quorum mode): not a listener's name,
    and not on a listener's port."""
    quorum_name = None
    if quorum is not None:
        quorum_name = _name("quorum.listener.name", quorum[0], quorum[0].strip())
        if quorum_name in names:
            raise ConfigError(
                f"quorum.listener.name {quorum_name} is also in listeners: the quorum listener "
                "is a port of its own (quorum.listener); give it another name",
                "quorum.listener.name")
        if quorum[2] and quorum[2] in ports:
            raise ConfigError(f"quorum.listener and listener {ports[quorum[2]]} both listen on "
                              f"port {quorum[2]}", "quorum.listener")
    return quorum_name


def _quorum_listener(quorum: tuple[str, str, int], quorum_name: str,
                     pmap: Mapping[str, SecurityProtocol], ssl: Mapping[str, str | None],
                     override: Mapping[str, tuple[str, str]]) -> ListenerConfig:
    """The quorum listener's model; a TLS one must have ssl.cafile (quorum nodes verify each
    other)."""
    # Not named in the map: PLAINTEXT, as the quorum port was before it had a name.
    protocol = (pmap.get(quorum_name) or DEFAULT_PROTOCOL_MAP.get(quorum_name)
                or SecurityProtocol.PLAINTEXT)
    tls = _tls_files(quorum_name, ssl, override) if protocol.uses_tls else None
    if tls is not None and not tls.cafile:
        raise ConfigError(
            f"the quorum listener {quorum_name} uses {protocol.value} and needs ssl.cafile "
            "(the CA that signs the quorum nodes' certificates, which they verify each "
            "other against)", tls.key_of("ssl.cafile"))
    return ListenerConfig(quorum_name, protocol, quorum[1], quorum[2], tls=tls)


def _advertised(raw: str | None, names: list[str]) -> dict[str, tuple[str, int]]:
    key = "advertised.listeners"
    if raw is None or not raw.strip():
        return {}
    text = raw.strip()
    if not is_kafka_form(text):
        # The old form: host:port for the single (or first) listener.
        return {names[0]: _host_port(key, raw, text, port_zero=False)}
    out = {}
    for name, host, port in parse_named_list(key, text, port_zero=False):
        if name not in names:
            raise ConfigError(f"advertised.listeners names {name}, which is not in listeners "
                              f"({', '.join(names)})", key)
        if not host:
            raise _bad(key, raw, f"a host for {name} (clients cannot connect to an empty host)")
        out[name] = (host, port)
    return out


def _overrides_by_listener(overrides: Mapping[str, str],
                           names: list[str]) -> dict[str, dict[str, tuple[str, str]]]:
    """``listener.name.x.ssl.certfile=v`` -> ``{"X": {"ssl.certfile": (key, v)}}``."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for key, value in overrides.items():
        name, _, suffix = key[len(OVERRIDE_PREFIX):].partition(".")
        if name.upper() not in names:
            raise ConfigError(f"{key} names listener {name.upper()}, which is not in listeners "
                              f"({', '.join(names)})", key)
        if name != name.lower():
            raise ConfigError(f"{key}: Kafka's override form names the listener in lower case "
                              f"(listener.name.{name.lower()}.{suffix})", key)
        out.setdefault(name.upper(), {})[suffix] = (key, value)
    return out


def _tls_files(name: str, ssl: Mapping[str, str | None],
               own: Mapping[str, tuple[str, str]]) -> TlsFiles:
    values: dict[str, str | None] = {}
    keys: dict[str, str] = {}
    for ssl_key in SSL_KEYS:
        if ssl_key in own:
            keys[ssl_key], value = own[ssl_key]
            values[ssl_key] = value.strip() or None
        else:
            keys[ssl_key], values[ssl_key] = ssl_key, ssl.get(ssl_key)
    for needed in ("ssl.certfile", "ssl.keyfile"):
        if not values[needed]:
            raise ConfigError(
                f"listener {name} uses TLS and needs {needed} (or "
                f"{OVERRIDE_PREFIX}{name.lower()}.{needed})", keys[needed])
    auth_text = (values["ssl.client.auth"] or "none").strip().lower()
    try:
        auth = ClientAuth(auth_text)
    except ValueError:
        raw = values["ssl.client.auth"] or ""
        raise _bad(keys["ssl.client.auth"], raw, "none, requested or required") from None
    if auth is not ClientAuth.NONE and not values["ssl.cafile"]:
        raise ConfigError(
            f"listener {name} has ssl.client.auth={auth.value} and needs ssl.cafile (the CA "
            "that signs client certificates)", keys["ssl.cafile"])
    return TlsFiles(str(values["ssl.certfile"]), str(values["ssl.keyfile"]),
                    values["ssl.cafile"], auth, tuple(sorted(keys.items())))
