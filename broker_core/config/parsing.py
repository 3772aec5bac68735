"""The configuration machinery every component's keys are declared with: :class:`ConfigKey`
(a key's Kafka name, attribute, parser and default), :func:`parse_keys` (a mapping of raw
values checked against such keys), the value parsers (``(key, raw text) -> typed value``, or a
:class:`ConfigError` naming the key) and :func:`parse_decimal`.

A parser's Kafka type (DescribeConfigs' ``config_type``) rides on it as an attribute
(:func:`typed`, :func:`config_type_of`). Nothing here knows any particular key.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker_core.wire.messages.describe_configs import ConfigType

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


class ConfigError(ValueError):
    """A configuration problem; the message names the key (``key`` holds it when there is one)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


# -- value parsers: (key, raw text) -> typed value, or ConfigError -------------------------------

Parser = Callable[[str, str], Any]
_DECIMAL = re.compile(r"[0-9]+")
_SIGNED_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_decimal(text: str, *, signed: bool = False) -> int | None:
    """The integer ``text`` spells in plain ASCII decimal digits (a leading ``+``/``-`` only
    when ``signed``), else None. Use it instead of ``str.isdigit()`` + ``int()``: ``isdigit``
    is true for ``"²"``, on which ``int`` raises, and ``int`` also takes ``"1_000"`` and
    non-ASCII digits. No whitespace is stripped."""
    pattern = _SIGNED_DECIMAL if signed else _DECIMAL
    return int(text) if pattern.fullmatch(text) else None


def bad_value(key: str, raw: str, expected: str) -> ConfigError:
    """The error for ``raw``, a bad value of ``key``, saying what was ``expected``."""
    return ConfigError(f"invalid value {raw!r} for {key!r}: expected {expected}", key)


def config_type_of(parse: Parser) -> ConfigType:
    """The Kafka type a parser's values have (DescribeConfigs v3+ ``config_type``); a parser
    says so in its ``config_type`` attribute, text is the rest."""
    return getattr(parse, "config_type", ConfigType.STRING)


def typed(parse: Parser, config_type: ConfigType) -> Parser:
    """``parse``, marked as giving values of ``config_type`` (see :func:`config_type_of`)."""
    parse.config_type = config_type  # type: ignore[attr-defined]
    return parse


def integer(lo: int, hi: int = LONG_MAX, *, what: str | None = None) -> Parser:
    """An integer in ``[lo, hi]`` (Kafka's ``atLeast``; ``hi`` is the Java type's maximum)."""
    expected = what or f"an integer ≥ {lo}"

    def parse(key: str, raw: str) -> int:
        value = parse_decimal(raw.strip(), signed=True)
        if value is None or value < lo:
            raise bad_value(key, raw, expected)
        if value > hi:
            raise bad_value(key, raw, f"an integer ≤ {hi}")
        return value
    return typed(parse, ConfigType.INT if hi <= INT_MAX else ConfigType.LONG)


def long_or_none(lo: int) -> Parser:
    """A Java long where Kafka's default ``Long.MAX_VALUE`` means "never": that value (and
    anything above 2**62, which no interval reaches) becomes None."""
    parse_int = integer(lo, LONG_MAX, what=f"an integer ≥ {lo} (or {LONG_MAX} for never)")

    def parse(key: str, raw: str) -> int | None:
        value = parse_int(key, raw)
        return None if value >= (1 << 62) else value
    return typed(parse, ConfigType.LONG)


def boolean(key: str, raw: str) -> bool:
    """``true`` or ``false``, any case (as Kafka's ``ConfigDef``)."""
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise bad_value(key, raw, "true or false")


boolean.config_type = ConfigType.BOOLEAN  # type: ignore[attr-defined]


def text(key: str, raw: str) -> str:
    """Any non-empty text."""
    value = raw.strip()
    if not value:
        raise bad_value(key, raw, "a non-empty value")
    return value


def optional_text(key: str, raw: str) -> str | None:
    """Text, or None when empty."""
    return raw.strip() or None


def _port(key: str, raw: str, port: str) -> int:
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise bad_value(key, raw, "a port number from 0 to 65535")
    return int(port)


def endpoint(key: str, raw: str) -> str:
    """A Twisted server endpoint string (``tcp:9092:interface=127.0.0.1``).

    Kafka's listener form ``PLAINTEXT://host:port`` is accepted and translated (an empty host
    means every interface). Only one listener is supported; for ``tcp``/``tcp6`` the port is
    checked here, anything else is checked by Twisted when the broker binds.
    """
    value = raw.strip()
    if not value:
        raise bad_value(key, raw, "a Twisted server endpoint such as 'tcp:9092'")
    if "," in value and "://" in value:
        raise bad_value(key, raw, "a single listener (Sluice serves one plaintext listener)")
    if "://" in value:
        scheme, _, hostport = value.partition("://")
        if scheme.upper() != "PLAINTEXT":
            raise bad_value(key, raw, "a PLAINTEXT:// listener (TLS and SASL are not supported)")
        host, sep, port = hostport.rpartition(":")
        if not sep:
            raise bad_value(key, raw, "PLAINTEXT://host:port")
        number = _port(key, raw, port)
        host = host.strip("[]")
        return f"tcp:{number}:interface={host}" if host else f"tcp:{number}"
    kind, sep, rest = value.partition(":")
    if not sep or not kind.isidentifier():
        raise bad_value(key, raw, "a Twisted server endpoint such as 'tcp:9092'")
    if kind in ("tcp", "tcp6"):
        first = rest.split(":", 1)[0]
        port = first.partition("=")[2] if first.startswith("port=") else first
        _port(key, raw, port)
    return value


def optional_endpoint(key: str, raw: str) -> str | None:
    """An :func:`endpoint`, or None when empty."""
    return endpoint(key, raw) if raw.strip() else None


def split_host_port(text: str) -> tuple[str, int] | None:
    """``host:port`` as ``(host, port)``, an IPv6 host written in brackets (``[::1]:9092``)
    returned without them; None unless the host is not empty (and has no stray bracket) and
    the port is an ASCII number from 1 to 65535. The one reading of a server address that the
    quorum's lists and the clients' bootstrap lists share; each caller names its own error."""
    host, colon, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (not colon or not host or "[" in host or "]" in host or not port.isdigit()
            or not port.isascii() or not 1 <= int(port) <= 65535):
        return None
    return host, int(port)


def host_port(key: str, raw: str) -> str | None:
    """``host:port`` (``PLAINTEXT://host:port`` also accepted), or None when empty."""
    value = raw.strip()
    if not value:
        return None
    if "," in value:
        raise bad_value(key, raw, "a single host:port")
    if "://" in value:
        scheme, _, value = value.partition("://")
        if scheme.upper() != "PLAINTEXT":
            raise bad_value(key, raw, "host:port or PLAINTEXT://host:port")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise bad_value(key, raw, "host:port with a port from 1 to 65535")
    return f"{host}:{int(port)}"


# -- key declarations ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConfigKey:
    """One configuration key: its Kafka name, the attribute that holds it, how to parse it, and
    its default as text (``None``: unset, the attribute is None unless ``required``).

    ``doc`` is the key's short description (what it does, its unit, its essential constraint),
    which DescribeConfigs answers with ``include_documentation``; the key's row in
    ``docs/configuration.md`` is the long form. Every broker key has one; client keys may not."""

    name: str
    attr: str
    parse: Parser
    default: str | None
    required: bool = False
    doc: str = ""


def parse_keys(keys: Mapping[str, ConfigKey], values: Mapping[str, object],
               kind: str = "config") -> dict[str, Any]:
    """Check ``values`` (Kafka key -> text) against ``keys``; returns attribute -> typed value,
    defaults filled in. Raises ConfigError for an unknown key (with a suggestion), a missing
    required key, or a bad value. Non-text values (ints, bools) are accepted as their text."""
    for name in values:
        if name not in keys:
            raise ConfigError(unknown_key_message(name, keys, kind), name)
    raws = {name: as_text(v) for name, v in values.items()}
    missing = [k.name for k in keys.values() if k.required and not raws.get(k.name, "").strip()]
    if len(missing) == 1:
        raise ConfigError(f"missing required {kind} key {missing[0]!r}", missing[0])
    if missing:
        names = ", ".join(repr(m) for m in missing)
        raise ConfigError(f"missing required {kind} keys {names}", missing[0])
    out: dict[str, Any] = {}
    for key in keys.values():
        raw = raws.get(key.name, key.default)
        out[key.attr] = None if raw is None else key.parse(key.name, raw)
    return out


def unknown_key_message(name: str, known: Iterable[str], kind: str = "config") -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {kind} key {name!r}{hint}"


def as_text(value: object) -> str:
    """A value as a key's text: booleans as ``true``/``false``, None as empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


def key_table(*entries: tuple[Any, ...]) -> dict[str, ConfigKey]:
    """Keys by name from ``(name, attr, parse, default, doc[, required])`` tuples, in order."""
    return {name: ConfigKey(name, attr, parse, default, *required, doc=doc)
            for name, attr, parse, default, doc, *required in entries}


def one_of(*choices: str, fold_case: bool = False) -> Parser:
    """One of ``choices``, spelled as listed (any case with ``fold_case``, normalised to the
    listed spelling)."""
    by_text = {(c.lower() if fold_case else c): c for c in choices}

    def parse(key: str, raw: str) -> str:
        text = raw.strip()
        found = by_text.get(text.lower() if fold_case else text)
        if found is None:
            raise bad_value(key, raw, "one of " + ", ".join(choices))
        return found
    return parse

