"""HTTP basic auth of /metrics: the password file (hashes only, each bad line refused), the
header check (right, wrong, malformed, unknown user), the cache of a verified password, the
throttle of full checks on a clock, and the site's 401/429/200 answers."""

from __future__ import annotations

import base64
import os

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet import task

from broker_core.config.broker_config import BrokerConfig
from broker_core.config.parsing import ConfigError
from broker_core.metrics import BrokerMetrics, metrics_site
from broker_core.security import basic_auth
from broker_core.security.basic_auth import (
    MIN_ITERATIONS,
    BasicAuthUsers,
    Outcome,
    PasswordFileError,
    PasswordHash,
    hash_password,
    load_password_file,
    parse_password_file,
    user_line,
)
from tests.support.http import http_get

FAST = MIN_ITERATIONS  # the tests' hashes: the cheapest a file may hold


def header(user: str, password: str, scheme: str = "Basic") -> bytes:
    return f"{scheme} ".encode() + base64.b64encode(f"{user}:{password}".encode())


def users(clock: task.Clock, **passwords: str) -> BasicAuthUsers:
    return BasicAuthUsers({u: hash_password(p, iterations=FAST) for u, p in passwords.items()},
                          clock=clock.seconds)


def test_a_line_holds_a_salted_hash_not_the_password():
    line = user_line("prometheus", "s3cret-pass", iterations=FAST)
    user, _, rest = line.partition(":")
    assert user == "prometheus" and "s3cret" not in line
    h = PasswordHash.parse(rest)
    assert h.matches("s3cret-pass") and not h.matches("s3cret-pasS")
    assert str(h) == rest
    assert user_line("p", "x", iterations=FAST) != user_line("p", "x", iterations=FAST)  # salt


@pytest.mark.parametrize("text, why", [
    ("", "no user"),
    ("# only a comment\n", "no user"),
    ("prometheus\n", "line 1: expected user:<hash>"),
    ("prometheus:plaintext-password\n", "line 1: expected pbkdf2-sha256"),
    ("p:pbkdf2-sha256$10$AAAAAAAAAAAAAAAAAAAAAA==$" + "A" * 44 + "\n", "iterations must be"),
    ("p:pbkdf2-sha256$x$AAAA$AAAA\n", "not a number"),
    ("p:pbkdf2-sha256$10000$!!$AAAA\n", "not base64"),
    ("p:pbkdf2-sha256$10000$AAAA$AAAA\n", "at least 16 bytes"),
    ("sp ace:" + str(hash_password("x", iterations=FAST)), "invalid user name"),
])
def test_bad_password_files_are_refused_naming_the_line(text, why):
    with pytest.raises(PasswordFileError, match=why):
        parse_password_file(text, "f")


def test_a_user_listed_twice_is_refused():
    line = user_line("p", "x", iterations=FAST)
    with pytest.raises(PasswordFileError, match="line 3: user 'p' is listed twice"):
        parse_password_file(f"{line}\n\n{line}\n", "f")


def test_the_file_must_be_private(tmp_path):
    p = tmp_path / "metrics-users"
    p.write_text(user_line("p", "x", iterations=FAST) + "\n")
    os.chmod(p, 0o600)
    assert list(load_password_file(str(p))) == ["p"]
    os.chmod(p, 0o644)
    with pytest.raises(PasswordFileError, match="accessible by other users"):
        load_password_file(str(p))
    base = {"broker.id": "1", "zookeeper.connect": "h:2181", "log.dirs": "d",
            "metrics.basic.auth.file": str(p)}
    with pytest.raises(ConfigError, match="accessible by other users") as e:
        basic_auth.metrics_password_hashes(BrokerConfig.from_mapping(base))
    assert e.value.key == "metrics.basic.auth.file"
    os.chmod(p, 0o600)
    assert list(basic_auth.metrics_password_hashes(BrokerConfig.from_mapping(base))) == ["p"]


@pytest.mark.parametrize("value", [
    None, b"", b"Basic", b"Basic !!!", b"Bearer abc", header("prometheus", "wrong"),
    header("nobody", "right"), base64.b64encode(b"prometheus:right"),
    b"Basic " + base64.b64encode(b"no-colon"), b"Basic " + base64.b64encode(b"\xff:\xfe"),
])
def test_missing_malformed_or_wrong_credentials_are_denied(value):
    assert users(task.Clock(), prometheus="right").check(value) == (Outcome.DENIED, None)


def test_right_credentials_are_allowed_any_case_of_scheme():
    u = users(task.Clock(), prometheus="right", grafana="pässwörd:with:colons")
    assert u.check(header("prometheus", "right")) == (Outcome.ALLOWED, "prometheus")
    assert u.check(header("grafana", "pässwörd:with:colons", "basic")) == \
        (Outcome.ALLOWED, "grafana")


def test_a_verified_password_costs_no_full_check_and_a_changed_one_does(monkeypatch):
    clock = task.Clock()
    u = users(clock, prometheus="right")
    full = []
    real = PasswordHash.matches
    monkeypatch.setattr(PasswordHash, "matches", lambda self, pw: full.append(pw) or real(self, pw))
    for _ in range(50):
        assert u.check(header("prometheus", "right"))[0] is Outcome.ALLOWED
    assert full == ["right"]
    assert u.check(header("prometheus", "wrong"))[0] is Outcome.DENIED
    assert full == ["right", "wrong"]


def test_full_checks_are_throttled_per_second_and_a_throttled_guess_learns_nothing():
    """Once the scraper is logged in, its remembered password must not answer ALLOWED while
    the budget is spent: else a guesser sends guesses at network speed and a right one shows
    among the 429s. Throttled, every header is answered 429 unlooked-at."""
    clock = task.Clock()
    u = users(clock, prometheus="right")
    assert u.check(header("prometheus", "right"))[0] is Outcome.ALLOWED  # spends one check
    outcomes = [u.check(header("prometheus", f"guess-{i}"))[0] for i in range(12)]
    assert outcomes == [Outcome.DENIED] * (basic_auth.CHECKS_PER_SECOND - 1) + \
        [Outcome.THROTTLED] * (13 - basic_auth.CHECKS_PER_SECOND)
    assert u.check(header("nobody", "x"))[0] is Outcome.THROTTLED  # unknown users too
    # The right password too, while throttled: no oracle.
    assert u.check(header("prometheus", "right"))[0] is Outcome.THROTTLED
    clock.advance(0.1)  # one check's worth of budget back
    assert u.check(header("prometheus", "right"))[0] is Outcome.ALLOWED  # remembered: free
    assert u.check(header("prometheus", "right"))[0] is Outcome.ALLOWED
    assert u.check(header("prometheus", "guess"))[0] is Outcome.DENIED
    assert u.check(header("prometheus", "guess"))[0] is Outcome.THROTTLED
    clock.advance(10)  # the bucket refills to its size, no more
    outcomes = [u.check(header("x", "y"))[0] for _ in range(basic_auth.CHECKS_PER_SECOND + 1)]
    assert outcomes.count(Outcome.THROTTLED) == 1


def _site(clock: task.Clock):
    metrics = BrokerMetrics(CollectorRegistry())
    metrics.connections.set(1)
    return metrics_site(metrics.registry, users(clock, prometheus="right"))


def test_site_asks_for_credentials_and_serves_with_the_right_ones():
    clock = task.Clock()
    site = _site(clock)
    for path in (b"/metrics", b"/", b"/other"):
        for extra in (b"", b"Authorization: " + header("prometheus", "wrong") + b"\r\n"):
            head, body = http_get(site, path, extra)
            assert head.startswith(b"HTTP/1.1 401"), (path, head)
            assert b'WWW-Authenticate: Basic realm="sluice metrics", charset="UTF-8"' in head
            assert b"sluice_connections" not in body
    head, body = http_get(site, b"/metrics",
                           b"Authorization: " + header("prometheus", "right") + b"\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"sluice_connections 1.0" in body
    head, _ = http_get(site, b"/other", b"Authorization: " + header("prometheus", "right") +
                        b"\r\n")
    assert head.startswith(b"HTTP/1.1 404")


def test_site_answers_429_while_throttled():
    site = _site(task.Clock())
    for _ in range(basic_auth.CHECKS_PER_SECOND):
        http_get(site, b"/metrics", b"Authorization: " + header("prometheus", "x") + b"\r\n")
    head, body = http_get(site, b"/metrics",
                           b"Authorization: " + header("prometheus", "right") + b"\r\n")
    assert head.startswith(b"HTTP/1.1 429") and b"Retry-After: 1" in head
    assert b"sluice_connections" not in body


# -- sluice metrics-password ------------------------------------------------------------------------

def test_metrics_password_command_prints_a_line_the_broker_accepts(monkeypatch, capsys):
    import io

    from sluice_tools import cli

    monkeypatch.setattr("sys.stdin", io.StringIO("chosen-password\n"))
    assert cli.main(["metrics-password", "prometheus", "--password-stdin",
                     "--iterations", str(FAST)]) == 0
    out, err = capsys.readouterr()
    assert "chosen-password" not in out and err == ""
    hashes = parse_password_file(out, "out")
    assert hashes["prometheus"].iterations == FAST
    clock = task.Clock()
    u = BasicAuthUsers(hashes, clock=clock.seconds)
    assert u.check(header("prometheus", "chosen-password"))[0] is Outcome.ALLOWED


def test_metrics_password_command_generates_a_password_shown_once(capsys):
    from sluice_tools import cli

    assert cli.main(["metrics-password", "grafana", "--iterations", str(FAST)]) == 0
    out, err = capsys.readouterr()
    password = err.strip().rpartition(": ")[2]
    assert len(password) >= 32 and password not in out
    u = BasicAuthUsers(parse_password_file(out, "out"), clock=task.Clock().seconds)
    assert u.check(header("grafana", password))[0] is Outcome.ALLOWED


@pytest.mark.parametrize("argv, code", [
    (["metrics-password", "bad:name", "--iterations", str(FAST)], 2),
    (["metrics-password", "p", "--iterations", "5"], 2),
])
def test_metrics_password_command_refuses_bad_input(argv, code, capsys):
    from sluice_tools import cli

    assert cli.main(argv) == code
    assert capsys.readouterr().err.startswith("sluice: ")
