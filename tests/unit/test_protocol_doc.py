"""docs/protocol.md cannot drift from the API registry: every API a broker serves
(``apis.SUPPORTED``) has a row naming it with exactly the versions served (and the version it
turns flexible at), and no row presents as served an API or version the registry does not hold.

The served APIs are spread over three tables: the client APIs ("APIs and versions served"),
the inter-broker APIs (a version column; a row whose range differs from the one sent says
``(vA–vB served)``) and Sluice's own APIs (the version follows the name). An API listed in
the first table is checked there only: the inter-broker table's Fetch row is the version
followers send, not the range served. The quorum's APIs are checked against ``apis.DEFINED``,
AlterPartitionReassignments there against what the quorum listener advertises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from broker_core.raft.listener_admin import ADMIN_VERSIONS
from broker_core.wire.apis import DEFINED, SUPPORTED, ApiKey

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

# "Name (key)", then maybe a version range (Sluice's own table puts it after the name).
_API_CELL = re.compile(r"^(?P<name>[A-Za-z]+) \((?P<key>\d+)\)(?P<rest>.*)$")
_RANGE = re.compile(r"v(\d+)(?:[–-]v(\d+))?")
_SERVED_NOTE = re.compile(r"\((v\d+(?:[–-]v\d+)?) (?:served|advertised)\)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str) -> dict[str, list[list[str]]]:
    """Every markdown table of ``text`` whose first column lists APIs, by its header row's
    first cells joined with ``|`` (e.g. ``"API (key)|served|flexible from|notes"``), rows as
    cell lists."""
    found: dict[str, list[list[str]]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not (line.startswith("| API (key)") and i + 1 < len(lines)
                and lines[i + 1].startswith("|---")):
            continue
        rows = []
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            rows.append(_cells(row))
        found["|".join(_cells(line))] = rows
    return found


def version_range(cell: str) -> tuple[int, int]:
    """``"v3–v9"`` → (3, 9), ``"v0"`` → (0, 0); a ``(vA–vB served)`` note wins over the
    leading range (the range served when the cell leads with another, e.g. the version sent)."""
    note = _SERVED_NOTE.search(cell)
    m = _RANGE.search(note.group(1) if note else cell)
    if m is None:
        raise ValueError(f"no version range in {cell!r}")
    low = int(m.group(1))
    return low, int(m.group(2)) if m.group(2) else low


def api_rows(rows: list[list[str]]) -> dict[int, tuple[str, list[str]]]:
    """Rows naming an API, by key: (name, the cells), each key once."""
    by_key: dict[int, tuple[str, list[str]]] = {}
    for cells in rows:
        m = _API_CELL.match(cells[0])
        if m is None:
            continue
        key = int(m.group("key"))
        assert key not in by_key, f"two rows for api key {key}"
        by_key[key] = (m.group("name"), [m.group("rest").strip(), *cells[1:]])
    return by_key


TABLES = tables(DOC.read_text())
CLIENT = api_rows(TABLES["API (key)|served|flexible from|notes"])
INTER_BROKER = api_rows(TABLES["API (key)|version|flexible|used for"])
SLUICE = api_rows(TABLES["API (key)|direction|request|response"])
QUORUM = api_rows(TABLES["API (key)|defined|flexible|status|notes"])


def documented(key: int) -> tuple[str, tuple[int, int], str | None]:
    """The name, the version range and the flexible cell (None where the table has none)
    documented for a served API."""
    if key in CLIENT:
        name, cells = CLIENT[key]
        return name, version_range(cells[1]), cells[2]
    if key in INTER_BROKER:
        name, cells = INTER_BROKER[key]
        return name, version_range(cells[1]), None
    name, cells = SLUICE[key]
    return name, version_range(cells[0]), None


@pytest.mark.parametrize("key", sorted(SUPPORTED), ids=lambda k: SUPPORTED[k].name)
def test_every_served_api_has_a_row_with_its_versions(key):
    spec = SUPPORTED[key]
    assert key in CLIENT or key in INTER_BROKER or key in SLUICE, (
        f"{spec.name} ({int(key)}) has no row in docs/protocol.md")
    name, served, flexible = documented(key)
    assert name == spec.name
    assert served == (spec.min_version, spec.max_version)
    if flexible is not None:
        expected = "–" if spec.flexible_min_version is None else f"v{spec.flexible_min_version}"
        assert flexible == expected


def test_no_row_presents_an_unserved_api_as_served():
    for table in (CLIENT, INTER_BROKER, SLUICE):
        assert set(table) - set(SUPPORTED) == set()


@pytest.mark.parametrize("key", sorted(QUORUM), ids=str)
def test_the_quorum_table_holds_what_the_quorum_listener_speaks(key):
    name, cells = QUORUM[key]
    if key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        assert version_range(cells[1]) == ADMIN_VERSIONS[ApiKey.ALTER_PARTITION_REASSIGNMENTS]
        return
    spec = DEFINED[key]
    assert name == spec.name
    assert version_range(cells[1]) == (spec.min_version, spec.max_version)


def test_the_parser_reads_every_form_of_version_cell():
    assert version_range("v3–v9") == (3, 9)
    assert version_range("v0") == (0, 0)
    assert version_range("v1 (v0–v1 served)") == (0, 1)
    assert version_range("v0–v1 (v0 refused)") == (0, 1)
    with pytest.raises(ValueError):
        version_range("–")
    rows = api_rows([["Foo (7) v0–v2", "x"], ["not an api", "y"]])
    assert rows == {7: ("Foo", ["v0–v2", "x"])}
