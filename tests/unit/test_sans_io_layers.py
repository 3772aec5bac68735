"""The sans-IO packages import no Twisted: the wire codec, the partition log, the Raft core and
the consumer's membership state machine run without a reactor, so a unit test drives them with
plain calls and the Twisted shells around them stay thin.

Each group is imported module by module in a fresh interpreter; after each import the probe
notes whether Twisted is loaded. The first module after which it is loaded brought it in,
itself or through its own imports (every module before it was checked clean).
Modules of these packages are sans-IO unless listed in ``TWISTED_SHELLS``: a new module is
checked without anyone remembering to add it. Which packages may import which is checked
separately, by ``lint-imports`` (the contracts in ``.importlinter``).
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The Raft package's Twisted shells around the sans-IO core: the network driver, listener,
#: transport, gossip, the service, the quorum's metadata store and its client, the embedded
#: quorum, the bootstrap runner, a broker's start-up retries on the quorum and
#: ``python -m broker_core.raft``.
TWISTED_SHELLS = frozenset({
    "broker_core.raft.__main__",
    "broker_core.raft.bootstrap_runner",
    "broker_core.raft.driver",
    "broker_core.raft.embedded",
    "broker_core.raft.gossip",
    "broker_core.raft.listener",
    "broker_core.raft.listener_admin",
    "broker_core.raft.metadata_store",
    "broker_core.raft.quorum_client",
    "broker_core.raft.service",
    "broker_core.raft.start_retry",
    "broker_core.raft.transport",
})

SANS_IO_PACKAGES = ("broker_core.wire", "broker_core.log", "broker_core.raft")
SANS_IO_MODULES = ("consumer_client.membership", "consumer_client.cluster_view",
                   "consumer_client.fetch_outcome")

#: Run in a fresh interpreter: imports each named module in turn and prints, as JSON, the
#: modules after whose import Twisted was loaded.
PROBE = """
import importlib, json, sys
loaded_twisted = []
for name in sys.argv[1:]:
    importlib.import_module(name)
    if any(m == "twisted" or m.startswith("twisted.") for m in sys.modules):
        loaded_twisted.append(name)
print(json.dumps(loaded_twisted))
"""


def modules_of(package: str) -> list[str]:
    """The package and every module under it, parents before children."""
    pkg = import_module(package)
    names = [package] + [info.name for info in pkgutil.walk_packages(pkg.__path__, package + ".")]
    return sorted(names)


def loaded_twisted(modules: list[str]) -> list[str]:
    """The modules, imported in this order in a fresh interpreter, after which Twisted was
    loaded (the first one is the module that loaded it)."""
    out = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout)


def sans_io_modules() -> list[str]:
    names = [m for package in SANS_IO_PACKAGES for m in modules_of(package)]
    return [m for m in names if m not in TWISTED_SHELLS] + list(SANS_IO_MODULES)


@pytest.mark.parametrize("group", [*SANS_IO_PACKAGES, *SANS_IO_MODULES])
def test_sans_io_modules_import_no_twisted(group: str) -> None:
    modules = [m for m in sans_io_modules() if m == group or m.startswith(group + ".")]
    assert modules, f"no modules found for {group}"
    loaded = loaded_twisted(modules)
    assert loaded == [], f"importing {loaded[0]} loads Twisted (itself or through its imports)"


def test_the_probe_sees_a_module_that_loads_twisted() -> None:
    # The bad case: a sans-IO module first, then a Twisted shell, which is named as the
    # first module after which Twisted is loaded (and so is every module after it).
    assert loaded_twisted(["broker_core.raft.node", "broker_core.raft.driver",
                           "broker_core.wire.framing"]) == ["broker_core.raft.driver",
                                                            "broker_core.wire.framing"]


def test_the_twisted_shells_exist() -> None:
    # A renamed or removed shell must leave the list, or the list would excuse a new module
    # that happens to take its name.
    raft = set(modules_of("broker_core.raft"))
    assert TWISTED_SHELLS <= raft, sorted(TWISTED_SHELLS - raft)
