"""Charts written atomically as PNG (grouped bars for `steer inspect --plot` and `steer run`, a
scatter for `steer report`), drawn on a bare `Figure` so matplotlib's global backend and pyplot's
figure registry are never touched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from steer.files import atomic_path


def grouped_bars(
    path: str | Path,
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str | None = None,
    ylabel: str,
    title: str | None = None,
    ylim: tuple[float, float] | None = None,
) -> None:
    """Bars for each series side by side within each category, saved as a PNG."""
    from matplotlib.figure import Figure

    n = max(len(series), 1)
    width = 0.8 / n
    fig = Figure(figsize=(min(12, max(6, 0.3 * n * len(categories) + 1)), 3.5))
    ax = fig.subplots()
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(categories))], list(values), width, label=label)
    step = max(1, len(categories) // 30)  # keep tick labels readable for many layers
    ticks = range(0, len(categories), step)
    ax.set_xticks([x + width * (n - 1) / 2 for x in ticks])
    ax.set_xticklabels([categories[x] for x in ticks])
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    if ylim:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def scatter_chart(
    path: str | Path,
    points: Mapping[str, Sequence[tuple[float, float]]],
    *,
    xline: float | None = None,
    yline: float | None = None,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    software: str | None = None,
) -> None:
    """One scatter series per label, with optional dashed threshold lines, saved as a PNG
    (`software`: the PNG's Software text, by which its writer knows the file as its own)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 5))
    ax = fig.subplots()
    for label, xy in points.items():
        ax.scatter([p[0] for p in xy], [p[1] for p in xy], label=label, alpha=0.8)
    if xline is not None:
        ax.axvline(xline, linestyle="--", color="grey")
    if yline is not None:
        ax.axhline(yline, linestyle="--", color="grey")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    _save(fig, path, {"Software": software} if software else None)


def _save(fig: Any, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png", metadata=metadata)
