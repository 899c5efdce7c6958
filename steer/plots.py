"""One grouped bar chart, written atomically: used by `steer inspect --plot` and `steer run`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from steer.files import atomic_path


def grouped_bars(
    path: str | Path,
    categories: Sequence[str],
    series: dict[str, Sequence[float]],
    *,
    xlabel: str | None = None,
    ylabel: str,
    title: str | None = None,
    ylim: tuple[float, float] | None = None,
) -> None:
    """Bars for each series side by side within each category, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(series), 1)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(min(12, max(6, 0.3 * n * len(categories) + 1)), 3.5))
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
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
