"""Draw ``sluice-dashboard.json`` as a PNG from a real Prometheus: a stand-in for a Grafana
screenshot where no Grafana can be installed.

    .venv/bin/python contrib/grafana/render.py --prometheus http://127.0.0.1:9090 \\
        --minutes 30 --out dashboard.png

Each panel is drawn where its ``gridPos`` puts it on Grafana's 24-column grid, under its own
title, from its own PromQL: every target of a time-series panel is evaluated with
``/api/v1/query_range`` over the window and drawn as one line per returned series, named by the
target's ``legendFormat``, the axis labelled in the panel's unit (a target-level unit override
draws on a right-hand axis); a stat panel shows the last value of its query, coloured by its
thresholds; a text panel shows its text; a row is a heading. Dashboard variables are replaced
first (``$job`` by its current value unless ``--var job=...``; ``$__rate_interval`` by
``--rate-interval``, default 4 scrape intervals as Grafana does).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard  # noqa: E402

#: Grafana's dark theme, near enough.
PAGE, PANEL, TEXT, DIM, GRID = "#111217", "#181b1f", "#ccccdc", "#8e8e9e", "#2c3235"
PALETTE = ("#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff",
           "#96d98d", "#ffcb7d", "#ca95e5", "#ff7383", "#c0d8ff")
COLOURS = {"green": "#37872d", "red": "#c4162a", "yellow": "#e0b400", "orange": "#fa6400"}

#: Pixels per grid row and page width; Grafana's rows are 30 px (plus gaps).
ROW_PX, PAGE_PX, DPI = 34, 1800, 100

#: Legend text: longest entry drawn, and one character's width as a fraction of the page.
LEGEND_CHARS, CHAR_W = 40, 5.2 / PAGE_PX


class PrometheusError(RuntimeError):
    """Prometheus answered a query with an error, or not at all."""


def query_range(base: str, expr: str, start: float, end: float, step: float
                ) -> list[tuple[dict[str, str], list[float], list[float]]]:
    """``(labels, times, values)`` per series ``expr`` returns over ``[start, end]``."""
    qs = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query_range?{qs}", timeout=30) as r:
            body = json.load(r)
    except OSError as e:
        raise PrometheusError(f"query_range {expr!r} at {base}: {e}") from e
    if body.get("status") != "success":
        raise PrometheusError(f"query_range {expr!r}: {body.get('error', body)}")
    out = []
    for series in body["data"]["result"]:
        times = [float(t) for t, _ in series["values"]]
        values = [float(v) for _, v in series["values"]]
        out.append((series["metric"], times, values))
    return out


def default_variables(model: Mapping[str, Any], rate_interval: str) -> dict[str, str]:
    """Each templating variable's current value, and ``__rate_interval``."""
    out = {"__rate_interval": rate_interval}
    for var in model.get("templating", {}).get("list", ()):
        current = var.get("current", {}).get("value")
        if isinstance(current, str):
            out[var["name"]] = current
    return out


def panel_units(panel: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The panel's unit and the per-refId unit overrides (``byFrameRefID`` matchers)."""
    fc = panel.get("fieldConfig", {})
    unit = fc.get("defaults", {}).get("unit", "short")
    per_ref = {}
    for o in fc.get("overrides", ()):
        if o.get("matcher", {}).get("id") == "byFrameRefID":
            for prop in o.get("properties", ()):
                if prop.get("id") == "unit":
                    per_ref[o["matcher"]["options"]] = prop["value"]
    return unit, per_ref


def _style_axes(ax: Any) -> None:
    ax.set_facecolor(PANEL)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.tick_params(colors=DIM, labelsize=7, length=0)
    ax.grid(True, color=GRID, linewidth=0.6)


def _title(fig: Any, box: tuple[float, float, float, float], title: str, ax_h: float) -> None:
    left, bottom, width, height = box
    fig.text(left + 0.004, bottom + height - ax_h, title, color=TEXT, fontsize=9,
             fontweight="bold", va="bottom", ha="left")


def draw_timeseries(fig: Any, box: tuple[float, float, float, float], panel: Mapping[str, Any],
                    results: list[tuple[str, list[tuple[dict[str, str], list[float], list[float]]]]],
                    start: float, end: float, title_h: float) -> None:
    """One time-series panel: ``results`` is ``(refId, series)`` per target, in order."""
    import matplotlib.dates as mdates
    from matplotlib.ticker import FuncFormatter

    left, bottom, width, height = box
    fig.patches.append(_panel_patch(fig, box))
    _title(fig, box, panel["title"], title_h)
    unit, per_ref = panel_units(panel)
    targets = {t["refId"]: t for t in panel.get("targets", ())}
    names = [dashboard.legend(targets[ref].get("legendFormat", ""), labels_)[:LEGEND_CHARS]
             for ref, series in results for labels_, _, _ in series]
    # Legend entries per line: as many of the longest as fit the panel's width.
    entry_w = CHAR_W * max((len(n) for n in names), default=1) + 0.012
    columns = max(1, int(width / entry_w))
    legend_rows = max(1, math.ceil(len(names) / columns))
    legend_h = min(0.4 * height, title_h * 0.62 * legend_rows)
    pad_left, pad_right = 0.04, (0.04 if per_ref else 0.008)  # figure fractions: tick labels
    ax = fig.add_axes((left + pad_left, bottom + legend_h + title_h * 0.8,
                       width - pad_left - pad_right, height - 2.1 * title_h - legend_h))
    _style_axes(ax)
    right = None
    handles, labels, colour = [], [], 0
    for ref, series in results:
        target_unit = per_ref.get(ref, unit)
        axis = ax
        if target_unit != unit:
            if right is None:
                right = ax.twinx()
                _style_axes(right)
                right.grid(False)
                right.yaxis.set_major_formatter(FuncFormatter(
                    lambda v, _p, u=target_unit: dashboard.format_value(v, u)))
            axis = right
        for labels_, times, values in series:
            name = dashboard.legend(targets[ref].get("legendFormat", ""), labels_)
            xs = [t / 86400 for t in times]  # matplotlib dates: days since 1970-01-01
            (line,) = axis.plot(xs, values, color=PALETTE[colour % len(PALETTE)], linewidth=1.1)
            axis.fill_between(xs, values, color=PALETTE[colour % len(PALETTE)], alpha=0.08)
            colour += 1
            handles.append(line)
            labels.append(name)
    ax.set_xlim(start / 86400, end / 86400)
    # Whole minutes, none at the very left where it would run into the lowest y label.
    every = 60 * max(1, int((end - start) / 60 / 5))
    first = math.ceil((start + 0.04 * (end - start)) / every) * every
    ax.set_xticks([t / 86400 for t in range(int(first), int(end) + 1, every)])
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: dashboard.format_value(v, unit)))
    floor = panel.get("fieldConfig", {}).get("defaults", {}).get("min")  # the panel's soft min
    for axis in (ax, right):
        if axis is not None and floor is not None:
            axis.set_ylim(bottom=floor)
    if not handles:
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, color=DIM, ha="center",
                va="center", fontsize=10)
        ax.set_yticks([])
    else:
        fig.legend(handles, [s[:LEGEND_CHARS] for s in labels], loc="upper left",
                   bbox_to_anchor=(left + 0.002, bottom + legend_h + 0.1 * title_h),
                   bbox_transform=fig.transFigure, ncol=min(columns, len(handles)),
                   frameon=False, fontsize=6.5, labelcolor=TEXT, handlelength=1.2,
                   columnspacing=1.0, borderaxespad=0, borderpad=0.2)


def _panel_patch(fig: Any, box: tuple[float, float, float, float]) -> Any:
    from matplotlib.patches import FancyBboxPatch

    left, bottom, width, height = box
    return FancyBboxPatch((left, bottom), width, height, boxstyle="round,pad=0,rounding_size=0.002",
                          transform=fig.transFigure, facecolor=PANEL, edgecolor=GRID,
                          linewidth=0.6, zorder=-1)


def threshold_colour(panel: Mapping[str, Any], value: float) -> str:
    """The colour of the last threshold step ``value`` reaches (the first step's when none)."""
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
    colour = "green"
    for step in steps:
        if step.get("value") is None or (not math.isnan(value) and value >= step["value"]):
            colour = step.get("color", colour)
    return COLOURS.get(colour, colour)


def draw_stat(fig: Any, box: tuple[float, float, float, float], panel: Mapping[str, Any],
              value: float, title_h: float) -> None:
    left, bottom, width, height = box
    unit, _ = panel_units(panel)
    fig.patches.append(_panel_patch(fig, box))
    colour = PANEL if math.isnan(value) else threshold_colour(panel, value)
    from matplotlib.patches import Rectangle
    fig.patches.append(Rectangle((left, bottom), width, height - 1.4 * title_h,
                                 transform=fig.transFigure, facecolor=colour, zorder=-1))
    _title(fig, box, panel["title"], title_h)
    decimals = panel.get("fieldConfig", {}).get("defaults", {}).get("decimals")
    text = "No data" if math.isnan(value) else (
        f"{value:.{decimals}f}" if decimals is not None and unit == "short"
        else dashboard.format_value(value, unit))
    fig.text(left + width / 2, bottom + (height - 1.4 * title_h) / 2, text, color="white",
             fontsize=26, fontweight="bold", ha="center", va="center")


def draw_text(fig: Any, box: tuple[float, float, float, float], panel: Mapping[str, Any],
              title_h: float) -> None:
    left, bottom, width, height = box
    fig.patches.append(_panel_patch(fig, box))
    _title(fig, box, panel["title"], title_h)
    content = panel.get("options", {}).get("content", "").replace("`", "")
    fig.text(left + 0.006, bottom + height - 1.6 * title_h, textwrap.fill(content, 230),
             color=TEXT, fontsize=8, va="top", ha="left")


def render(model: Mapping[str, Any], prometheus: str, start: float, end: float, out: Path, *,
           variables: Mapping[str, str] | None = None, rate_interval: str = "30s",
           step: float | None = None) -> None:
    """Evaluate every panel of ``model`` over ``[start, end]`` against ``prometheus`` and write
    the page to ``out`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = default_variables(model, rate_interval)
    values.update(variables or {})
    step = step or max(5.0, (end - start) / 240)
    panels = [p for p in dashboard.iter_panels(model)]
    rows = dashboard.grid_height(panels)
    fig = plt.figure(figsize=(PAGE_PX / DPI, (rows * ROW_PX + 60) / DPI), dpi=DPI, facecolor=PAGE)
    top = 60 / (rows * ROW_PX + 60)
    title_h = (ROW_PX * 0.75) / (rows * ROW_PX + 60)
    fig.text(0.01, 1 - top / 2, f"{model.get('title', 'Dashboard')}  ·  "
             f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(start))}–"
             f"{time.strftime('%H:%M UTC', time.gmtime(end))}  ·  job={values.get('job', '')}",
             color=TEXT, fontsize=13, va="center")
    for panel in panels:
        x0, y0, w, h = dashboard.panel_box(panel["gridPos"], rows, margin=0.08)
        box = (x0, y0 * (1 - top), w, h * (1 - top))
        kind = panel.get("type")
        if kind == "row":
            fig.text(box[0], box[1] + box[3] / 2, panel["title"], color=TEXT, fontsize=12,
                     fontweight="bold", va="center")
        elif kind == "text":
            draw_text(fig, box, panel, title_h)
        elif kind == "stat":
            target = panel["targets"][0]
            series = query_range(prometheus, dashboard.substitute(target["expr"], values),
                                 start, end, step)
            last = series[0][2][-1] if series and series[0][2] else math.nan
            draw_stat(fig, box, panel, last, title_h)
        else:
            results = [(t["refId"], query_range(prometheus, dashboard.substitute(t["expr"], values),
                                                start, end, step))
                       for t in panel.get("targets", ())]
            draw_timeseries(fig, box, panel, results, start, end, title_h)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI, facecolor=PAGE)
    plt.close(fig)
    _quantize(out)


def _quantize(path: Path) -> None:
    """Re-save the PNG with a 256-colour palette: a third of the size, no visible loss on flat
    panels and thin lines."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def _parse_var(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"\w+", name):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prometheus", default="http://127.0.0.1:9090", help="Prometheus base URL")
    ap.add_argument("--dashboard", type=Path, default=dashboard.DASHBOARD_PATH)
    ap.add_argument("--minutes", type=float, default=30.0, help="window ending now (default 30)")
    ap.add_argument("--end", type=float, help="window end, seconds since the epoch (default now)")
    ap.add_argument("--rate-interval", default="30s", help="value of $__rate_interval")
    ap.add_argument("--var", type=_parse_var, action="append", default=[],
                    help="NAME=VALUE for a dashboard variable (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("dashboard.png"))
    args = ap.parse_args(argv)
    end = args.end or time.time()
    try:
        render(dashboard.load(args.dashboard), args.prometheus.rstrip("/"), end - args.minutes * 60,
               end, args.out, variables=dict(args.var), rate_interval=args.rate_interval)
    except (PrometheusError, KeyError) as e:
        print(f"render: {e}", file=sys.stderr)
        return 1
    print(f"render: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
