"""scripts/apt-install.sh waits (bounded) while another package manager holds the lock.

``apt-get`` here is a stand-in script first on PATH: it records its arguments and fails the
way apt does while a lock is held, as many times as the test says. What is under test is the
shell script's own loop, not apt."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "apt-install.sh"

FAKE_APT = """#!/bin/sh
echo "$*" >> "{calls}"
n=$(cat "{left}")
if [ "$n" -gt 0 ]; then
    echo $((n - 1)) > "{left}"
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 42 (apt)" >&2
    echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
    exit 100
fi
if [ -n "{broken}" ]; then echo "E: Unable to locate package nosuch" >&2; exit 100; fi
exit 0
"""


def _run(tmp_path: Path, *, locked: int, wait_s: int = 60, broken: bool = False
         ) -> tuple[subprocess.CompletedProcess, list[str]]:
    if os.geteuid() != 0:
        pytest.skip("apt-install.sh calls sudo when not root; this test runs it as root")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls, left = tmp_path / "calls", tmp_path / "left"
    calls.write_text("")
    left.write_text(str(locked))
    fake = bindir / "apt-get"
    fake.write_text(FAKE_APT.format(calls=calls, left=left, broken="yes" if broken else ""))
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "SLUICE_APT_LOCK_WAIT": str(wait_s)}
    done = subprocess.run([str(SCRIPT), "kcat"], env=env, capture_output=True, text=True,
                          timeout=60)
    return done, calls.read_text().splitlines()


def test_a_held_lock_is_waited_for_then_update_and_install_run(tmp_path):
    done, calls = _run(tmp_path, locked=1)
    assert done.returncode == 0, done.stderr
    assert "holds the lock; waiting up to 60 s" in done.stderr
    assert calls == ["update -qq", "update -qq", "install -y -qq kcat"]


def test_the_wait_is_bounded_and_the_failure_names_the_lock(tmp_path):
    done, calls = _run(tmp_path, locked=100, wait_s=0)
    assert done.returncode == 100
    assert "Could not get lock /var/lib/apt/lists/lock" in done.stderr
    assert "apt-get update failed" in done.stderr
    assert calls == ["update -qq"]


def test_any_other_failure_is_not_waited_on(tmp_path):
    done, calls = _run(tmp_path, locked=0, broken=True)
    assert done.returncode == 100
    assert "Unable to locate package nosuch" in done.stderr
    assert calls == ["update -qq"]
