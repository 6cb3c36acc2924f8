"""Training curves as an SVG picture, drawn with plain polylines and axes (no plotting library).

``training_curves(history, title)`` takes a ``History.history``-style mapping (a list of
per-epoch values for each name) and returns the text of an SVG file: the losses in a left panel,
every other series (accuracy, mean absolute error, ...) in a right panel, each with its own axes.
The numbers are rounded so that the same history always gives the same file.
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT = 320, 240  # one panel
MARGIN = {"left": 52, "right": 12, "top": 30, "bottom": 72}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About ``count`` round values covering ``[low, high]``."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * step:
            step *= factor
            break
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value < high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def _label(value: float) -> str:
    return f"{value:.4g}"


def _panel(series: dict[str, list[float]], x0: float, heading: str, first_color: int) -> list[str]:
    """The SVG elements of one panel whose left edge is at ``x0``."""
    left, top = x0 + MARGIN["left"], MARGIN["top"]
    width = WIDTH - MARGIN["left"] - MARGIN["right"]
    height = HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    values = [v for ys in series.values() for v in ys if math.isfinite(v)]
    ticks = _ticks(min(values), max(values))
    low, high = ticks[0], ticks[-1]
    epochs = max(len(ys) for ys in series.values())

    def x_of(i: int) -> float:
        return left + (width * i / (epochs - 1) if epochs > 1 else width / 2)

    def y_of(v: float) -> float:
        return top + height * (1 - (v - low) / (high - low))

    out = [
        f'<text x="{left + width / 2:.1f}" y="18" text-anchor="middle" font-weight="bold">{escape(heading)}</text>'
    ]
    for tick in ticks:  # horizontal grid lines and their labels
        y = y_of(tick)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(tick)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#444"/>')
    step = max(1, math.ceil(epochs / 6))
    for i in range(0, epochs, step):  # epochs are counted from 1, as progress bars count them
        out.append(f'<text x="{x_of(i):.1f}" y="{top + height + 16}" text-anchor="middle">{i + 1}</text>')
    out.append(f'<text x="{left + width / 2:.1f}" y="{top + height + 32}" text-anchor="middle">epoch</text>')
    for k, (name, ys) in enumerate(series.items()):
        color = COLORS[(first_color + k) % len(COLORS)]
        points = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in enumerate(ys) if math.isfinite(v))
        dash = ' stroke-dasharray="5 3"' if name.startswith("val_") else ""
        out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        legend_x = left + (width / 2) * (k % 2)
        legend_y = top + height + 46 + 14 * (k // 2)  # two series a row
        out.append(
            f'<line x1="{legend_x:.1f}" y1="{legend_y - 4:.1f}" x2="{legend_x + 16:.1f}" '
            f'y2="{legend_y - 4:.1f}" stroke="{color}" stroke-width="2"{dash}/>'
        )
        out.append(f'<text x="{legend_x + 20:.1f}" y="{legend_y:.1f}">{escape(name)}</text>')
    return out


def training_curves(history: dict[str, list[float]], title: str) -> str:
    """The text of an SVG file showing each series of ``history`` against the epoch."""
    losses = {name: ys for name, ys in history.items() if "loss" in name}
    others = {name: ys for name, ys in history.items() if "loss" not in name}
    panels = [(losses, "loss")] if losses else []
    for start in range(0, len(others), 2):  # two series a panel keeps the legends readable
        chunk = dict(list(others.items())[start : start + 2])
        panels.append((chunk, " / ".join(chunk)))
    if not losses and not others:
        raise ValueError("training_curves needs at least one series in the history")
    width = WIDTH * len(panels)
    body: list[str] = []
    color = 0
    for k, (series, heading) in enumerate(panels):
        body += _panel(series, WIDTH * k, heading, color)
        color += len(series)
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
            f'viewBox="0 0 {width} {HEIGHT}" font-family="sans-serif" font-size="11" role="img">',
            f"<title>{escape(title)}</title>",
            f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
            *body,
            "</svg>",
            "",
        ]
    )
