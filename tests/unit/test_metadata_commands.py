"""The metadata command decoder as a validator (``broker_core.raft.metadata_commands.decode``):
whatever the bytes, it returns a valid command or raises its own ``MalformedCommand``, naming
why, and never anything else (no ``ValueError``, ``RecursionError``, ``UnicodeError``).

A *valid* command is one this version could have written: it encodes back to bytes that decode
to the same command, within the size limits. Checked on the two inputs that escaped the old
decoder (a non-ASCII "base64" value, deep nesting), a table of each refusal, and by fuzzing:
random bytes, byte-level mutations of valid commands, and JSON-level mutations (fields
replaced by arbitrary JSON, added, removed)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker_core.raft.metadata_commands import (
    MAX_COMMAND_BYTES,
    MAX_MULTI_OPS,
    MAX_PATH_CHARS,
    MAX_VALUE_BYTES,
    CheckNode,
    CloseSession,
    CreateNode,
    DeleteNode,
    Envelope,
    ExpireSession,
    MalformedCommand,
    Multi,
    OpenSession,
    SetNode,
    UnsupportedCommandVersion,
    check_path,
    decode,
    encode,
)


def _outcome(payload: bytes) -> Envelope | MalformedCommand:
    """decode's answer; any exception but MalformedCommand fails the test."""
    try:
        envelope = decode(payload)
    except MalformedCommand as e:
        assert str(e), "a refusal names its reason"
        return e
    _assert_valid(envelope)
    return envelope


def _assert_valid(envelope: Envelope) -> None:
    assert isinstance(envelope, Envelope)
    again = encode(envelope.command, envelope.time_ms)
    assert len(again) <= MAX_COMMAND_BYTES
    assert decode(again) == envelope
    ops = envelope.command.ops if isinstance(envelope.command, Multi) else (envelope.command,)
    for op in ops:
        if hasattr(op, "path"):
            sequence = isinstance(op, CreateNode) and op.sequence
            assert check_path(op.path + "0000000000" if sequence else op.path) is None


# -- the two inputs the old decoder let escape ---------------------------------------------------


def test_a_value_that_is_not_ascii_is_refused_as_malformed_not_a_plain_value_error():
    # The old decoder raised ValueError("string argument should contain only ASCII
    # characters") from base64 here: not its own error type.
    payload = '{"v":1,"t":0,"c":"set","p":"/a","d":"\u00e9","n":-1}'.encode()
    with pytest.raises(MalformedCommand, match="not base64"):
        decode(payload)


@pytest.mark.parametrize("payload", [b"[" * 100_000, b'{"a":' * 100_000, b"{" * 100_000,
                                     b'{"v":1,"t":0,"c":"multi","ops":[' + b"[" * 100_000])
def test_deep_nesting_is_refused_before_parsing_without_recursion(payload):
    # The old decoder let json recurse until RecursionError.
    with pytest.raises(MalformedCommand, match="nests deeper"):
        decode(payload)


def test_a_lone_surrogate_in_a_path_is_refused():
    # It decoded before, and the path could then not even be encoded back as UTF-8.
    with pytest.raises(MalformedCommand, match="forbidden character"):
        decode(b'{"v":1,"t":0,"c":"check","p":"/a\\ud800","n":-1}')


# -- each refusal, named -------------------------------------------------------------------------


def _set(**fields) -> bytes:
    doc = {"v": 1, "t": 0, "c": "set", "p": "/a", "d": "aGk=", "n": -1, **fields}
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


@pytest.mark.parametrize("payload, reason", [
    (b"x" * (MAX_COMMAND_BYTES + 1), "longer than"),
    (b'{"v":1,"t":0,"c":"check","p":"/\xc3","n":-1}', "not UTF-8"),
    (b'{"v":1,"t":0,"c":"check","p":"/a","n":-1', "not JSON"),
    (b'\xef\xbb\xbf{"v":1,"t":0,"c":"check","p":"/a","n":-1}', "not JSON"),
    (b"[[1], [2]]", "not a JSON object"),
    (b'{"v":1,"v":1,"t":0,"c":"check","p":"/a","n":-1}', "repeats a key"),
    (b'{"v":1,"t":NaN,"c":"check","p":"/a","n":-1}', "NaN"),
    (b'{"v":1,"t":0,"c":"check","p":"/a","n":-Infinity}', "Infinity"),
    (b'{"v":1,"t":0,"c":"check","p":"/a","n":1.0}', "'n' should be int"),
    (b'{"v":1,"t":0,"c":"check","p":"/a","n":' + b"9" * 5000 + b"}", "not JSON"),
    (_set(n=1 << 31), "outside"),
    (_set(n=-2), "outside"),
    (_set(t=-1), "outside"),
    (_set(t=1 << 63), "outside"),
    (_set(x=1), "unknown field"),
    (_set(c="frobnicate"), "unknown command"),
    (_set(c=7), "'c' should be str"),
    (_set(p="/a\x00b"), "forbidden character"),
    (_set(p="/a\x1f"), "forbidden character"),
    (_set(p="/a\ufff5"), "forbidden character"),
    (_set(p="/" + "a" * MAX_PATH_CHARS), "longer than"),
    (_set(p="/a/../b"), "'..'"),
    (_set(p=["/a"]), "'p' should be str"),
    (_set(d="aGl="), "not canonical"),
    (_set(d="aGk"), "not base64"),
    (_set(d="A" * (4 * (MAX_VALUE_BYTES // 3 + 1))), "longer than"),
    (b'{"v":1,"t":0,"c":"create","p":"/a/","d":"","o":0,"s":false}', "must not end with /"),
    (b'{"v":1,"t":0,"c":"create","p":"/a","d":"","o":-1,"s":false}', "'o' is -1"),
    (b'{"v":1,"t":0,"c":"create","p":"/a","d":"","o":0,"s":0}', "'s' should be bool"),
    (b'{"v":1,"t":0,"c":"close_session","id":0}', "'id' is 0"),
    (b'{"v":1,"t":0,"c":"open_session","ms":2147483648}', "outside"),
    (b'{"v":1,"t":0,"c":"multi","ops":{}}', "'ops' should be list"),
    (b'{"v":1,"t":0,"c":"multi","ops":[{"c":"multi","ops":5}]}', "unknown command"),
    (b'{"v":1,"t":0,"c":"multi","ops":[{"c":"check","p":"/a","n":-1,"v":1}]}',
     "unknown field"),
    (b'{"v":1,"t":0,"c":"multi","ops":[' + b",".join(
        [b'{"c":"check","p":"/a","n":-1}'] * (MAX_MULTI_OPS + 1)) + b"]}",
     f"more than {MAX_MULTI_OPS}"),
])
def test_each_invalid_command_is_refused_with_its_reason(payload, reason):
    with pytest.raises(MalformedCommand, match=reason):
        decode(payload)


@pytest.mark.parametrize("version", [2, 0, -1, None, "1", True, 1.0, [1]])
def test_any_other_version_is_unsupported(version):
    with pytest.raises(UnsupportedCommandVersion, match="version"):
        decode(_set(v=version))
    with pytest.raises(UnsupportedCommandVersion):
        decode(_set(v=...))  # absent


def test_the_limits_themselves_are_accepted():
    value = b"\xff" * MAX_VALUE_BYTES
    assert decode(encode(SetNode("/a", value), 1)).command.value == value
    path = "/" + "p" * (MAX_PATH_CHARS - 1)
    assert decode(encode(CheckNode(path, -1))).command.path == path
    ops = tuple(CheckNode(f"/n{i}", -1) for i in range(MAX_MULTI_OPS))
    assert decode(encode(Multi(ops))).command.ops == ops
    # A path may hold any character ZooKeeper allows, escaped or not.
    assert decode(encode(CheckNode("/caf\u00e9/\U0001f600/[x]{y}\"z\\", -1))).command.path == \
        "/caf\u00e9/\U0001f600/[x]{y}\"z\\"


# -- fuzzing -------------------------------------------------------------------------------------

NAMES = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=6)
PATHS = st.lists(NAMES, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts)).filter(
    lambda p: check_path(p) is None)
VERSIONS = st.integers(min_value=-1, max_value=(1 << 31) - 1)
VALUES = st.binary(max_size=16)
IDS = st.integers(min_value=1, max_value=(1 << 63) - 1)
NODE_OPS = st.one_of(
    st.builds(CreateNode, PATHS, VALUES, st.integers(min_value=0, max_value=(1 << 63) - 1),
              st.booleans()),
    st.builds(SetNode, PATHS, VALUES, VERSIONS),
    st.builds(DeleteNode, PATHS, VERSIONS, st.booleans()),
    st.builds(CheckNode, PATHS, VERSIONS),
)
COMMANDS = st.one_of(
    NODE_OPS,
    st.builds(Multi, st.lists(NODE_OPS.filter(
        lambda op: not (isinstance(op, DeleteNode) and op.recursive)), max_size=4).map(tuple)),
    st.builds(OpenSession, st.integers(min_value=1, max_value=(1 << 31) - 1)),
    st.builds(CloseSession, IDS),
    st.builds(ExpireSession, IDS),
)
TIMES = st.integers(min_value=0, max_value=(1 << 63) - 1)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=8)
#: Bytes that change JSON's structure most: brackets, quotes, escapes, separators, bad UTF-8.
SPLICES = st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"\\u", b"\\ud800", b",",
                           b":", b"\xff", b"\xc3", b"\x00", b"1e999", b"NaN", b"-", b" ",
                           b"[" * 50, b'{"a":' * 10])


@settings(max_examples=300, deadline=None)
@given(COMMANDS, TIMES)
def test_every_valid_command_round_trips(command, time_ms):
    assert decode(encode(command, time_ms)) == Envelope(command, time_ms)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
@example(b"[" * 100_000)
@example('{"v":1,"t":0,"c":"set","p":"/a","d":"\u00e9","n":-1}'.encode())
def test_random_bytes_give_a_valid_command_or_malformed_command(payload):
    _outcome(payload)


@st.composite
def mutated(draw) -> bytes:
    """A valid command's bytes with 1 to 4 byte-level mutations."""
    data = bytearray(encode(draw(COMMANDS), draw(TIMES)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        kind = draw(st.sampled_from(["flip", "delete", "insert", "splice", "truncate"]))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif kind == "delete":
            del data[at:at + draw(st.integers(min_value=1, max_value=8))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "splice":
            data[at:at] = draw(SPLICES)
        elif kind == "truncate":
            del data[at:]
    return bytes(data)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_commands_give_a_valid_command_or_malformed_command(payload):
    _outcome(payload)


@st.composite
def json_mutated(draw) -> bytes:
    """A valid command's JSON with one field (top level or of a multi's operation) replaced by
    arbitrary JSON, removed, or a field added."""
    doc = json.loads(encode(draw(COMMANDS), draw(TIMES)))
    target = doc
    if doc.get("ops") and draw(st.booleans()):
        target = doc["ops"][draw(st.integers(min_value=0, max_value=len(doc["ops"]) - 1))]
    key = draw(st.sampled_from(sorted(target)))
    kind = draw(st.sampled_from(["replace", "remove", "add"]))
    if kind == "replace":
        target[key] = draw(JSON)
    elif kind == "remove":
        del target[key]
    else:
        target[draw(st.text(max_size=3))] = draw(JSON)
    return json.dumps(doc, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_mutated())
def test_json_mutations_give_a_valid_command_or_malformed_command(payload):
    _outcome(payload)
