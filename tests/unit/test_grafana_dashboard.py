"""contrib/grafana/sluice-dashboard.json cannot rot: every metric its PromQL names is one a
broker registers, and its model has the structure Grafana imports (ids, gridPos, targets with
refIds, the DS_PROMETHEUS input). Also the pure parts of the renderer (contrib/grafana/
dashboard.py): PromQL metric-name extraction, variables, legends, grid layout, units."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram

from broker_core.metrics import BrokerMetrics

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "sluice_grafana_dashboard", ROOT / "contrib" / "grafana" / "dashboard.py")
dashboard = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = dashboard
_spec.loader.exec_module(dashboard)

#: Metrics of failed log directories and skipped metadata entries: the dashboard must show them.
NEWER = frozenset({
    "sluice_offline_log_directory_count",
    "sluice_log_directory_online",
    "sluice_metadata_entries_skipped_total",
})


def broker_series() -> set[str]:
    """Every series name a broker's /metrics can carry, from a broker's own registry."""
    return dashboard.exported_series_names(BrokerMetrics().registry.collect())


def unknown_metrics(model: dict) -> dict[str, set[str]]:
    """Metric name -> panels, for names neither the broker nor Prometheus provides."""
    known = broker_series() | dashboard.PROMETHEUS_SERIES
    return {name: panels for name, panels in dashboard.dashboard_metric_names(model).items()
            if name not in known}


@pytest.fixture(scope="module")
def model() -> dict:
    return dashboard.load()


def test_every_metric_the_dashboard_queries_is_one_a_broker_exports(model: dict) -> None:
    used = dashboard.dashboard_metric_names(model)
    assert len(used) > 30  # the extraction found the queries at all
    assert unknown_metrics(model) == {}


def test_a_panel_naming_a_metric_the_broker_lacks_is_caught(model: dict) -> None:
    broken = copy.deepcopy(model)
    panel = next(p for p in dashboard.iter_panels(broken) if p.get("title") == "Bytes in")
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace(
        "sluice_bytes_in_total", "sluice_bytes_inn_total")
    assert unknown_metrics(broken) == {"sluice_bytes_inn_total": {"Bytes in"}}


def test_the_dashboard_has_the_structure_grafana_imports(model: dict) -> None:
    assert dashboard.structure_errors(model) == []
    assert model["schemaVersion"] >= 36
    panels = list(dashboard.iter_panels(model))
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == ["Cluster health", "Throughput and requests", "Purgatories", "Replication",
                    "Controller", "Consumer coordinator", "Metadata quorum", "Process"]
    for p in panels:
        for t in p.get("targets", ()):
            assert t["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
            # Every query is scoped to the dashboard's job, so two clusters in one Prometheus
            # do not add up.
            assert '$job' in t["expr"], (p["title"], t["expr"])


def test_the_dashboard_shows_the_log_directory_and_skipped_entry_metrics(model: dict) -> None:
    used = dashboard.dashboard_metric_names(model)
    for name in NEWER:
        assert name in used, name


# --- structure checks catch what they name ------------------------------------------------

def _tiny() -> dict:
    ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    return {
        "schemaVersion": 39,
        "__inputs": [{"name": "DS_PROMETHEUS", "type": "datasource", "pluginId": "prometheus"}],
        "panels": [
            {"id": 1, "type": "row", "title": "R", "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0},
             "panels": []},
            {"id": 2, "type": "timeseries", "title": "A", "datasource": ds,
             "gridPos": {"h": 8, "w": 12, "x": 0, "y": 1},
             "targets": [{"refId": "A", "expr": "up", "datasource": ds}]},
            {"id": 3, "type": "stat", "title": "B", "datasource": ds,
             "gridPos": {"h": 8, "w": 12, "x": 12, "y": 1},
             "targets": [{"refId": "A", "expr": "up", "datasource": ds}]},
        ],
    }


def test_a_well_formed_dashboard_has_no_structure_errors() -> None:
    assert dashboard.structure_errors(_tiny()) == []


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d["panels"][1].pop("id"), "'A': no integer id"),
    (lambda d: d["panels"][2].__setitem__("id", 2), "'B': id 2 used twice"),
    (lambda d: d["panels"][1].pop("gridPos"), "'A': gridPos needs integer h, w, x, y"),
    (lambda d: d["panels"][2]["gridPos"].__setitem__("x", 13), "outside the 24-column grid"),
    (lambda d: d["panels"][2]["gridPos"].__setitem__("x", 11), "panels 'A' and 'B' overlap"),
    (lambda d: d["panels"][1]["targets"][0].pop("refId"), "'A': a target has no refId"),
    (lambda d: d["panels"][1]["targets"].append({"refId": "A", "expr": "up"}), "refIds repeat"),
    (lambda d: d["panels"][1]["targets"][0].pop("expr"), "target A has no expr"),
    (lambda d: d["panels"][1].pop("targets"), "'A': no targets"),
    (lambda d: d["panels"][1]["datasource"].__setitem__("uid", "abc"), "datasource is not"),
    (lambda d: d.pop("__inputs"), "no DS_PROMETHEUS prometheus datasource input"),
    (lambda d: d.pop("schemaVersion"), "no integer schemaVersion"),
])
def test_structure_errors_name_each_fault(breakage, message: str) -> None:
    d = _tiny()
    breakage(d)
    errors = dashboard.structure_errors(d)
    assert any(message in e for e in errors), errors


def test_panels_inside_a_collapsed_row_are_walked_and_checked() -> None:
    d = _tiny()
    d["panels"][0]["panels"] = [{"id": 9, "type": "timeseries", "title": "C",
                                 "gridPos": {"h": 8, "w": 12, "x": 0, "y": 9}, "targets": []}]
    assert [p["id"] for p in dashboard.iter_panels(d)] == [1, 9, 2, 3]
    assert "panel 'C': no targets" in dashboard.structure_errors(d)


# --- PromQL metric names --------------------------------------------------------------------

@pytest.mark.parametrize("expr, names", [
    ("up", {"up"}),
    ('sum by (api) (rate(sluice_requests_total{job="$job"}[$__rate_interval]))',
     {"sluice_requests_total"}),
    ('histogram_quantile(0.99, sum by (api, le) (rate(x_bucket{api="PRODUCE",le!="+Inf"}[5m])))',
     {"x_bucket"}),
    ("sum(rate(a_total[1m])) / sum(rate(b_total[1m])) > bool 0", {"a_total", "b_total"}),
    ("sum(a) without (instance) or on (job) group_left (x) b offset 5m", {"a", "b"}),
    ('max by(topic)(lag{topic=~"or|and"}) unless ignoring(topic) c', {"lag", "c"}),
    ('label_replace(m, "dst", "$1", "src", "(.*)")', {"m"}),
    ("rate(m[5m:30s])", {"m"}),
    ("sum(x) by (a, le)", {"x"}),
    ("1 + 2e3 - Inf", set()),
    ("ns:recorded_rule:rate5m", {"ns:recorded_rule:rate5m"}),
])
def test_metric_names_of_promql(expr: str, names: set[str]) -> None:
    assert dashboard.metric_names(expr) == names


def test_exported_series_names_cover_unlabelled_and_unused_metrics() -> None:
    r = CollectorRegistry()
    Counter("c", "h", ["api"], registry=r)  # labelled, no child yet: no samples
    Histogram("h_seconds", "h", registry=r)
    Gauge("g", "h", registry=r)
    Enum("state", "h", states=["a", "b"], registry=r)
    names = dashboard.exported_series_names(r.collect())
    assert {"c_total", "h_seconds_bucket", "h_seconds_count", "h_seconds_sum", "g",
            "state"} <= names
    assert "c" not in names and "h_seconds" not in names


def test_the_broker_registry_gives_suffixed_names() -> None:
    names = broker_series()
    assert {"sluice_requests_total", "sluice_request_duration_seconds_bucket",
            "sluice_follower_lag_messages", "process_cpu_seconds_total"} <= names
    assert "sluice_requests" not in names


# --- variables, legends, layout, units -------------------------------------------------------

def test_substitute_replaces_both_spellings_and_refuses_unknown_variables() -> None:
    expr = 'rate(x{job="$job",i="${inst}"}[$__rate_interval])'
    assert dashboard.substitute(expr, {"job": "s", "inst": "i1", "__rate_interval": "30s"}) \
        == 'rate(x{job="s",i="i1"}[30s])'
    with pytest.raises(KeyError, match="job"):
        dashboard.substitute(expr, {"inst": "i1", "__rate_interval": "30s"})


def test_legend_follows_grafana() -> None:
    labels = {"__name__": "m", "api": "FETCH", "instance": "h:1"}
    assert dashboard.legend("{{api}} on {{ instance }}", labels) == "FETCH on h:1"
    assert dashboard.legend("{{missing}}x", labels) == "x"
    assert dashboard.legend("", labels) == '{api="FETCH", instance="h:1"}'


def test_panel_box_maps_the_grid_onto_the_page() -> None:
    assert dashboard.panel_box({"x": 0, "y": 0, "w": 24, "h": 10}, 10) == (0, 0, 1, 1)
    left, bottom, width, height = dashboard.panel_box({"x": 12, "y": 2, "w": 6, "h": 4}, 10)
    assert (left, width) == (0.5, 0.25)
    assert bottom == pytest.approx(0.4) and height == pytest.approx(0.4)
    inset = dashboard.panel_box({"x": 12, "y": 2, "w": 6, "h": 4}, 10, margin=0.5)
    assert inset[0] > left and inset[2] < width and inset[3] < height
    assert dashboard.grid_height([{"gridPos": {"y": 3, "h": 4}}, {"gridPos": {"y": 0, "h": 2}}]) == 7


@pytest.mark.parametrize("value, unit, text", [
    (1536, "bytes", "1.5 KiB"),
    (3 * 2 ** 20, "Bps", "3 MiB/s"),
    (0.0025, "s", "2.5 ms"),
    (0.00004, "s", "40 µs"),
    (2.5, "s", "2.5 s"),
    (0, "s", "0 s"),
    (0.257, "percentunit", "25.7%"),
    (1500, "reqps", "1.5 k/s"),
    (12, "ops", "12/s"),
    (3, "short", "3"),
    (2_000_000, "short", "2 M"),
    (float("nan"), "short", "–"),
])
def test_format_value(value: float, unit: str, text: str) -> None:
    assert dashboard.format_value(value, unit) == text


# --- the renderer's pure helpers ------------------------------------------------------------

def _render_module():
    spec = importlib.util.spec_from_file_location(
        "sluice_grafana_render", ROOT / "contrib" / "grafana" / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_render_takes_variables_from_the_dashboard(model: dict) -> None:
    render = _render_module()
    values = render.default_variables(model, "1m")
    assert values == {"__rate_interval": "1m", "job": "sluice"}
    # Every query of the dashboard resolves with them: no variable is left unanswered.
    for panel in dashboard.iter_panels(model):
        for t in panel.get("targets", ()):
            assert "$" not in dashboard.substitute(t["expr"], values)


def test_render_colours_a_stat_by_its_thresholds() -> None:
    render = _render_module()
    panel = {"fieldConfig": {"defaults": {"thresholds": {"steps": [
        {"color": "red", "value": None}, {"color": "green", "value": 1},
        {"color": "red", "value": 2}]}}}}
    assert render.threshold_colour(panel, 0) == render.COLOURS["red"]
    assert render.threshold_colour(panel, 1) == render.COLOURS["green"]
    assert render.threshold_colour(panel, 3) == render.COLOURS["red"]
    assert render.threshold_colour(panel, float("nan")) == render.COLOURS["red"]


def test_render_reads_a_per_target_unit_override(model: dict) -> None:
    render = _render_module()
    panel = next(p for p in dashboard.iter_panels(model)
                 if p["title"] == "Partitions led and log size by broker")
    assert render.panel_units(panel) == ("short", {"B": "bytes"})
