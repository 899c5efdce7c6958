"""A run's reports: its Markdown table (`results.md`), samples (`samples.md`) and chart (`chart.png`),
rendered from the rows `steer run` scored; the results document over several runs is `steer.lab.report`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from steer.labels import describe
from steer.ladder import Rung

_COLUMNS = [
    ("llm_usable", "LLM-usable%", 100),  # the LLM judge's (a run config's llm_judge), when it ran
    ("usable", "Usable%", 100),
    ("j", "J", 100),
    ("accuracy", "Acc", 100),
    ("similarity", "Sim", 100),
    ("bleu", "BLEU", 1),
    ("chrf", "chrF", 1),
    ("self_bleu", "sBLEU", 1),
    ("copy_rate", "Copy%", 100),
    ("ppl", "PPL", 1),
    ("repetition", "Loop%", 100),
    ("empty", "Empty%", 100),
    ("length", "Len", 1),
    ("meta", "Meta%", 100),
    ("near_loop", "NearLoop%", 100),
    ("junk", "Junk%", 100),
    ("invented", "Inv%", 100),
    ("dropped", "Drop%", 100),
    ("content_kept", "Kept%", 100),
    ("chrf_src", "chrF-src", 1),
    ("llm_style", "LLM-style%", 100),
    ("llm_meaning", "LLM-meaning%", 100),
    ("llm_fluency", "LLM-fluency%", 100),
]


def results_table(results: dict[str, Any]) -> str:
    """The paper-style Markdown table: rows = modes, columns = metrics, one block per direction."""
    lines = [f"# {results['experiment']} — {results['model_id']}", ""]
    if results.get("judge"):
        held = results.get("judge_heldout_accuracy", {})
        lines += [
            f"Judge (Acc and J): {results['judge']}; held-out accuracy "
            + ", ".join(f"{k} {v:.3f}" if measured(v) else f"{k} —" for k, v in held.items()),
            "",
        ]
    elif results.get("classifier_heldout_accuracy") is not None:
        lines += [f"Style classifier held-out accuracy: {results['classifier_heldout_accuracy']:.3f}", ""]
    directions = list(dict.fromkeys(r["direction"] for r in results["rows"]))
    for name in directions:
        rows = [r for r in results["rows"] if r["direction"] == name]
        cols = [c for c in _COLUMNS if any(c[0] in r["metrics"] for r in rows)]
        lines += [f"## {name.replace('-', ' → ')} (n = {rows[0]['metrics'].get('n', '?')})", ""]
        lines += ["| mode | settings | " + " | ".join(c[1] for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
        for r in rows:
            cells = [
                f"{r['metrics'][c[0]] * c[2]:.{2 if c[0] == 'length' else 1}f}"
                if measured(r["metrics"].get(c[0]))
                else "—"
                for c in cols
            ]
            lines.append(f"| {r['mode']} | {r.get('recipe') or describe(r['settings'])} | " + " | ".join(cells) + " |")
        lines.append("")
        for r in rows:
            if r.get("rerank"):
                chosen = sorted(r["rerank"]["chosen_strengths"].items(), key=_rung_order)
                counts = ", ".join(f"λ={k}: {v}" for k, v in chosen)
                rule = _choice_rule(r["rerank"])
                lines += [
                    f"Rerank chose {counts} ({rule}style probe held-out accuracy "
                    f"{r['rerank']['probe_heldout_accuracy']:.3f}).",
                    "",
                ]
    return "\n".join(lines)


def measured(value: Any) -> bool:
    """Whether a metric has a value to show: not missing, and not NaN (nothing to measure, which
    results.json stores as null and `RunResults.read` turns back into NaN); else the table shows —."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _choice_rule(rerank: dict[str, Any]) -> str:
    """`usable first, 3k4 × 1.3; ` — how rerank chose, as its results record it (older results
    recorded neither: the score alone)."""
    parts = ["usable first"] if rerank.get("usable_first") else []
    parts += [f"{k} × {v:g}" for k, v in (rerank.get("rung_weights") or {}).items()]
    return f"{', '.join(parts)}; " if parts else ""


def samples_markdown(samples: dict[str, dict[str, list[str]]]) -> str:
    """The first few outputs of every mode beside their source, per direction."""
    lines = ["# Sample outputs", ""]
    for name, by_mode in samples.items():
        lines += [f"## {name.replace('-', ' → ')}", ""]
        for i, source in enumerate(by_mode["source"]):
            lines.append(f"- **source**: {source}")
            for mode, outs in by_mode.items():
                if mode != "source":
                    lines.append(f"  - *{mode}*: {outs[i]}")
        lines.append("")
    return "\n".join(lines)


def write_chart(path: Path, rows: list[dict[str, Any]]) -> None:
    """Bar chart of style accuracy per direction and mode."""
    from steer.plots import grouped_bars

    directions = list(dict.fromkeys(r["direction"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    accuracy = {(r["direction"], r["mode"]): r["metrics"].get("accuracy") or 0.0 for r in rows}
    series = {m: [accuracy.get((d, m), 0.0) for d in directions] for m in modes}
    labels = [d.replace("-", "→") for d in directions]
    grouped_bars(path, labels, series, ylabel="style accuracy", ylim=(0, 1))


def _rung_order(item: tuple[str, Any]) -> tuple[float, bool, bool, float]:
    """Rungs by strength, the unguided (`u1`) before the guided (`1`) at equal strength, few-shot
    after, then by keep-words β (`3` before `3k4`)."""
    rung = Rung.parse(item[0])
    return rung.strength, rung.guided, rung.shots, rung.keep
