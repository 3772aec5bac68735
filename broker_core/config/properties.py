"""The Java-properties file format a broker's ``--config`` file (and a client's) is written in."""

from __future__ import annotations

from pathlib import Path

from broker_core.config.parsing import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java-properties style file (UTF-8); see :func:`parse_properties`."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} not found") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(path)!r}: {e.strerror}") from None
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 (byte {e.start})") from None
    return parse_properties(content, source=str(path))


def parse_properties(content: str, source: str = "<properties>") -> dict[str, str]:
    """Parse Java-properties text.

    ``key=value``, ``key: value`` or ``key value`` lines; ``#`` and ``!`` comments; blank lines;
    a trailing ``\\`` continues a line; backslash escapes (``\\t \\n \\r \\f \\uXXXX``, and
    ``\\=``, ``\\:``, ``\\ `` inside keys). A key given twice keeps the last value, as in Java.
    Raises ConfigError (with ``source:line``) for a line without a key or a bad ``\\u`` escape.
    """
    out: dict[str, str] = {}
    lines = content.splitlines()
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # Join continuation lines: an odd number of trailing backslashes continues the line.
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split(line)
        key = _unescape(key, source, number)
        if not key:
            raise ConfigError(f"{source}:{number}: expected key=value, got {line!r}")
        out[key] = _unescape(value, source, number)
    return out


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or whitespace; after it, whitespace and at
    # most one '=' or ':' separate it from the value.
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in " \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(s: str, source: str, number: int) -> str:
    if "\\" not in s:
        return s
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{source}:{number}: malformed \\u escape {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
