"""The pure parts of working with ``sluice-dashboard.json``: walking its panels, checking its
structure, pulling metric names out of its PromQL, substituting its variables, laying its grid
out on a page and formatting values in a panel's unit.

No I/O beyond :func:`load`, no Prometheus, no plotting: ``render.py`` draws with these, and
``tests/unit/test_grafana_dashboard.py`` checks the dashboard with them (every metric it names
must be one a broker registers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

#: The dashboard next to this module.
DASHBOARD_PATH = Path(__file__).with_name("sluice-dashboard.json")

#: Grafana's grid is 24 columns wide; a height unit is 30 px.
GRID_COLUMNS = 24

#: PromQL words that look like metric names but are not: aggregation modifiers, binary
#: operators and set operators.
PROMQL_KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "atan2", "inf", "nan",
})

#: Series Prometheus itself writes for every target (not exported by the broker).
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def load(path: Path = DASHBOARD_PATH) -> dict[str, Any]:
    """The dashboard model in ``path``."""
    return json.loads(path.read_text(encoding="utf-8"))


def iter_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel in document order, rows included; a collapsed row's own panels follow it."""
    for panel in dashboard.get("panels", ()):
        yield panel
        yield from panel.get("panels", ())


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects.

    Strings, label matchers, range and subquery brackets and grouping label lists are removed
    first (their words are labels, values or durations); of what is left, an identifier is a
    metric name unless a ``(`` follows it (a function or aggregation) or it is a keyword.
    Numbers cannot match: an identifier does not start with a digit.
    """
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def exported_series_names(families: Iterable[Any]) -> set[str]:
    """The series names a registry's metric families produce on ``/metrics``, whether or not a
    labelled metric has children yet: a counter ``x`` gives ``x_total`` (and ``x_created``), a
    histogram ``x_bucket``, ``x_count`` and ``x_sum``, a gauge or state set its own name.

    ``families`` are ``prometheus_client`` metric families (``registry.collect()``).
    """
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
        "summary": ("", "_count", "_sum", "_created"),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in families:
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
        names.update(sample.name for sample in family.samples)
    return names


def dashboard_metric_names(dashboard: Mapping[str, Any]) -> dict[str, set[str]]:
    """Metric name -> titles of the panels that query it, over every target of every panel and
    every templating query."""
    used: dict[str, set[str]] = {}
    for panel in iter_panels(dashboard):
        for target in panel.get("targets", ()):
            for name in metric_names(target.get("expr", "")):
                used.setdefault(name, set()).add(panel.get("title", "?"))
    for var in dashboard.get("templating", {}).get("list", ()):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        if var.get("type") == "query" and isinstance(query, str):
            inner = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", query)
            for name in metric_names(inner.group(1) if inner else query):
                used.setdefault(name, set()).add(f"variable {var.get('name')}")
    return used


def structure_errors(dashboard: Mapping[str, Any]) -> list[str]:
    """What is wrong with the dashboard's structure, as sentences (empty when nothing is).

    Checked: a schema version and a ``DS_PROMETHEUS`` datasource input; every panel has a
    unique integer id, a type, a title and a ``gridPos`` inside the 24-column grid; panels
    that query have targets, each with a unique ``refId``, an ``expr`` and the dashboard's
    datasource; no two panels overlap.
    """
    errors = []
    if not isinstance(dashboard.get("schemaVersion"), int):
        errors.append("no integer schemaVersion")
    inputs = [i for i in dashboard.get("__inputs", ()) if i.get("name") == "DS_PROMETHEUS"]
    if not inputs or inputs[0].get("pluginId") != "prometheus":
        errors.append("no DS_PROMETHEUS prometheus datasource input")
    seen_ids: set[int] = set()
    boxes: list[tuple[str, tuple[int, int, int, int]]] = []
    for panel in iter_panels(dashboard):
        title = panel.get("title") or "<untitled>"
        pid = panel.get("id")
        if not isinstance(pid, int) or isinstance(pid, bool):
            errors.append(f"panel {title!r}: no integer id")
        elif pid in seen_ids:
            errors.append(f"panel {title!r}: id {pid} used twice")
        else:
            seen_ids.add(pid)
        if not panel.get("type"):
            errors.append(f"panel {title!r}: no type")
        if not panel.get("title"):
            errors.append(f"panel id {pid}: no title")
        pos = panel.get("gridPos")
        if not isinstance(pos, dict) or not all(isinstance(pos.get(k), int) for k in "hwxy"):
            errors.append(f"panel {title!r}: gridPos needs integer h, w, x, y")
        elif pos["w"] < 1 or pos["h"] < 1 or pos["x"] < 0 or pos["y"] < 0 \
                or pos["x"] + pos["w"] > GRID_COLUMNS:
            errors.append(f"panel {title!r}: gridPos {pos} outside the {GRID_COLUMNS}-column grid")
        else:
            boxes.append((title, (pos["x"], pos["y"], pos["w"], pos["h"])))
        if panel.get("type") in ("row", "text"):
            continue
        targets = panel.get("targets")
        if not targets:
            errors.append(f"panel {title!r}: no targets")
            continue
        ref_ids = [t.get("refId") for t in targets]
        if not all(isinstance(r, str) and r for r in ref_ids):
            errors.append(f"panel {title!r}: a target has no refId")
        elif len(set(ref_ids)) != len(ref_ids):
            errors.append(f"panel {title!r}: refIds repeat: {ref_ids}")
        for t in targets:
            if not t.get("expr"):
                errors.append(f"panel {title!r}: target {t.get('refId')} has no expr")
        if panel.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
            errors.append(f"panel {title!r}: datasource is not ${{DS_PROMETHEUS}}")
    for i, (a, (ax, ay, aw, ah)) in enumerate(boxes):
        for b, (bx, by, bw, bh) in boxes[i + 1:]:
            if ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah:
                errors.append(f"panels {a!r} and {b!r} overlap")
    return errors


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """``expr`` with ``$name`` and ``${name}`` replaced by ``variables[name]`` (Grafana's
    ``$__rate_interval`` included); an unknown variable is an error, not left in the query."""
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise KeyError(f"no value for dashboard variable ${name} in {expr!r}")
        return variables[name]
    return _VARIABLE.sub(value, expr)


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """A series' legend from Grafana's ``legendFormat`` (``{{api}} p99``); an empty format gives
    the labels as ``{a="x"}``, a missing label an empty string, as Grafana does."""
    if not fmt:
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return "{" + inner + "}"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt)


def grid_height(panels: Iterable[Mapping[str, Any]]) -> int:
    """Grid rows the panels cover (the lowest ``y + h``)."""
    return max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels), default=0)


def panel_box(pos: Mapping[str, int], total_rows: int, *, margin: float = 0.0
              ) -> tuple[float, float, float, float]:
    """A panel's ``(left, bottom, width, height)`` in figure fractions for a page
    ``total_rows`` grid rows high, ``margin`` (a fraction of one grid cell) left free on
    every side. Grid ``y`` grows downwards, figure ``bottom`` upwards."""
    cell_w, cell_h = 1 / GRID_COLUMNS, 1 / total_rows
    left = pos["x"] * cell_w + margin * cell_w
    width = pos["w"] * cell_w - 2 * margin * cell_w
    height = pos["h"] * cell_h - 2 * margin * cell_h
    bottom = 1 - (pos["y"] + pos["h"]) * cell_h + margin * cell_h
    return left, bottom, width, height


_BINARY = (("Ti", 2 ** 40), ("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10))
_DECIMAL = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def _scaled(v: float, steps: tuple[tuple[str, float], ...], base: str) -> str:
    for suffix, size in steps:
        if abs(v) >= size:
            return f"{v / size:.3g} {suffix}{base}".rstrip()
    return f"{v:.3g} {base}".rstrip()


def format_value(v: float, unit: str) -> str:
    """``v`` as Grafana shows it in ``unit`` (the subset this dashboard uses): ``bytes``,
    ``Bps`` (bytes/s), ``s``, ``percentunit`` (0.25 is 25%), ``reqps``, ``ops``, ``short``."""
    if v != v:  # NaN: no data
        return "–"
    if unit == "bytes":
        return _scaled(v, _BINARY, "B")
    if unit == "Bps":
        return _scaled(v, _BINARY, "B/s")
    if unit == "s":
        if v == 0:
            return "0 s"
        if abs(v) < 1e-3:
            return f"{v * 1e6:.3g} µs"
        if abs(v) < 1:
            return f"{v * 1e3:.3g} ms"
        return f"{v:.3g} s"
    if unit == "percentunit":
        return f"{v * 100:.3g}%"
    if unit in ("reqps", "ops"):
        return _scaled(v, _DECIMAL, "/s").replace(" /s", "/s")
    return _scaled(v, _DECIMAL, "")
