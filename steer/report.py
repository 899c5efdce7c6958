"""Reports: a run's Markdown table, samples and chart, and `steer report`'s results document
(every run's tables, the computed verdict, the tuning trade-off) — written from run results only.

Data flows one way: `steer run` writes `results.json` (+ `tuned.json` from tuning) into a run
directory; this module reads them and renders Markdown and PNG. Thresholds in the verdict come
from the runs' `tuned.json` (`similarity_floor`, `ppl_ceiling`), never from constants here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from steer.config import SteerError
from steer.files import write_text
from steer.records import RunResults, TuneResult
from steer.transfer import describe

# The marker `steer report` puts on the first line: only a file that has it is replaced (--force).
REPORT_MARKER = "<!-- written by `steer report`; edit docs/findings.md or the runs, not this file -->"
# Defaults of `[tune] similarity_floor / ppl_ceiling` when a run has no tuned.json.
DEFAULT_FLOOR, DEFAULT_CEILING = 0.8, 1.2

_COLUMNS = [
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
]


def results_table(results: dict[str, Any]) -> str:
    """The paper-style Markdown table: rows = modes, columns = metrics, one block per direction."""
    lines = [f"# {results['experiment']} — {results['model_id']}", ""]
    if results.get("judge"):
        held = results.get("judge_heldout_accuracy", {})
        lines += [
            f"Judge (Acc and J): {results['judge']}; held-out accuracy "
            + ", ".join(f"{k} {v:.3f}" for k, v in held.items()),
            "",
        ]
    elif results.get("classifier_heldout_accuracy") is not None:
        lines += [f"Style classifier held-out accuracy: {results['classifier_heldout_accuracy']:.3f}", ""]
    directions = list(dict.fromkeys(r["direction"] for r in results["rows"]))
    for name in directions:
        rows = [r for r in results["rows"] if r["direction"] == name]
        cols = [c for c in _COLUMNS if any(c[0] in r["metrics"] for r in rows)]
        lines += [f"## {name.replace('-', ' → ')} (n = {rows[0]['metrics']['n']})", ""]
        lines += ["| mode | settings | " + " | ".join(c[1] for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
        for r in rows:
            cells = [
                f"{r['metrics'][c[0]] * c[2]:.{2 if c[0] == 'length' else 1}f}"
                if r["metrics"].get(c[0]) is not None
                else "—"
                for c in cols
            ]
            lines.append(f"| {r['mode']} | {r.get('recipe') or describe(r['settings'])} | " + " | ".join(cells) + " |")
        lines.append("")
        for r in rows:
            if r.get("rerank"):
                chosen = sorted(r["rerank"]["chosen_strengths"].items(), key=_rung_order)
                counts = ", ".join(f"λ={k}: {v}" for k, v in chosen)
                lines += [
                    f"Rerank chose {counts} (style probe held-out accuracy "
                    f"{r['rerank']['probe_heldout_accuracy']:.3f}).",
                    "",
                ]
    return "\n".join(lines)


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


# ---------------------------------------------------------------------------------------------
# The results document (`steer report RUN_DIR... -o docs/results.md`)


class RunReport:
    """One run directory as the report reads it: results.json and, when tuned, tuned.json."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        results = self.path / "results.json"
        if not results.is_file():
            raise SteerError(f"{self.path} has no results.json; run 'steer run CONFIG -o {self.path}' first")
        self.results = RunResults.read(results).to_dict()
        tuned = self.path / "tuned.json"
        self.tuned = TuneResult.read(tuned) if tuned.is_file() else None

    @property
    def floor(self) -> float:
        return self.tuned.similarity_floor if self.tuned is not None else DEFAULT_FLOOR

    @property
    def ceiling(self) -> float:
        return self.tuned.ppl_ceiling if self.tuned is not None else DEFAULT_CEILING

    def trials(self) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], bool]]:
        """Every steered candidate tuning scored: (direction, settings, metrics, prompt's metrics, chosen?)."""
        if self.tuned is None:
            return
        for t in self.tuned.trials:
            if t["settings"].get("mode") == "prompt":
                continue
            pick = self.tuned.chosen[t["direction"]]
            yield t["direction"], t["settings"], t["metrics"], pick.prompt_metrics, pick.settings == t["settings"]


def verdict(runs: Sequence[RunReport]) -> str:
    """Per direction and steered mode: ΔJ, ΔAcc and the cost against prompting, computed from the runs."""
    floors = sorted({(r.floor, r.ceiling) for r in runs})
    floor, ceiling = floors[0] if len(floors) == 1 else (None, None)
    rule = (
        f"similarity ≥ {floor:g}×, PPL ≤ {ceiling:g}×"
        if floor is not None
        else "similarity and PPL within each run's tuning limits"
    )
    lines = [
        "## Verdict (computed from the tables above)",
        "",
        f"Δ = steered − prompt (points); 'kept' = {rule} and loops ≤ prompting's; "
        "target = ΔAcc ≥ min(+10, 95 − prompt's Acc) and kept.",
        "",
        "| direction | run | mode | ΔJ | ΔAcc | Sim ratio | PPL ratio | Loop% (prompt) | ΔBLEU (refs) | kept? "
        "| target? |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        rows = run.results["rows"]
        for direction in dict.fromkeys(r["direction"] for r in rows):
            by_mode = {r["mode"]: r["metrics"] for r in rows if r["direction"] == direction}
            base = by_mode.get("prompt")
            if base is None:
                continue
            for mode, m in by_mode.items():
                if mode == "prompt":
                    continue
                sim, ppl = m["similarity"] / base["similarity"], m["ppl"] / base["ppl"]
                ok = (
                    round(sim, 3) >= run.floor
                    and round(ppl, 3) <= run.ceiling
                    and m["repetition"] <= base["repetition"]
                )
                gain = round(100 * (m["accuracy"] - base["accuracy"]), 1)  # 0.49 − 0.39 is 9.999… in floats
                need = min(10.0, round(95 - 100 * base["accuracy"], 1))
                bleu = f"{m['bleu'] - base['bleu']:+.1f}" if "bleu" in m and "bleu" in base else "—"
                lines.append(
                    f"| {direction.replace('-', ' → ')} | {run.path.name} (n = {m['n']}) | {mode} | "
                    f"{100 * (m['j'] - base['j']):+.1f} | {gain:+.0f} | {sim:.2f} | {ppl:.2f} | "
                    f"{100 * m['repetition']:.0f} ({100 * base['repetition']:.0f}) | {bleu} | "
                    f"{'yes' if ok else 'no'} | {'**yes**' if ok and gain >= need else 'no'} |"
                )
    return "\n".join(lines) + "\n"


def _tune_limit(runs: Sequence[RunReport]) -> int | None:
    limits = {r.tuned.limit for r in runs if r.tuned is not None}
    if len(limits) > 1:
        raise SteerError(f"the runs were tuned on different numbers of texts: {sorted(limits)}; tune them alike")
    return limits.pop() if limits else None


def tradeoff(runs: Sequence[RunReport]) -> str:
    """Every candidate `steer tune` scored (the trade-off curve), per direction, as Δ vs prompting."""
    lines = [
        f"## Trade-off: every tuning candidate ({_tune_limit(runs)} held-out dev texts per direction)",
        "",
        "Δ in points against the plain prompt on the same texts, scored with the *selection* judge (the one "
        "tuning chooses by, not the evaluation judge); ratios against the prompt's similarity and PPL.",
        "",
        "| direction | recipe | ΔJ | ΔAcc | Sim ratio | PPL ratio | Loop% | chosen |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for direction, settings, m, base, chosen in run.trials():
            lines.append(
                f"| {direction.replace('-', ' → ')} | {describe(settings)} | {100 * (m['j'] - base['j']):+.1f} | "
                f"{100 * (m['accuracy'] - base['accuracy']):+.0f} | {m['similarity'] / base['similarity']:.2f} | "
                f"{m['ppl'] / base['ppl']:.2f} | {100 * m['repetition']:.0f} | {'**yes**' if chosen else ''} |"
            )
    return "\n".join(lines) + "\n"


def tradeoff_chart(runs: Sequence[RunReport], path: Path) -> bool:
    """Scatter of every tuning candidate: similarity ratio (x) against accuracy gain (y), per recipe.

    The target region is top right of the dashed lines (ΔAcc ≥ +10, Sim ≥ the floor); PPL is not shown.
    """
    points: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        for _direction, settings, m, base, _chosen in run.trials():
            xy = (m["similarity"] / base["similarity"], 100 * (m["accuracy"] - base["accuracy"]))
            points.setdefault(describe(settings), []).append(xy)
    if not points:
        return False
    from steer.plots import scatter_chart

    scatter_chart(
        path,
        points,
        xline=runs[0].floor,
        yline=10,
        xlabel="similarity to source, ratio to plain prompting",
        ylabel="style accuracy gain over prompting (points)",
        title=f"Tuning candidates, all directions ({_tune_limit(runs)} held-out dev texts each)",
    )
    return True


DOCUMENT_HEADER = """# Results on real data (dev splits, embedded SmolLM2-135M-Instruct)

Regenerate (needs the corpora in `../shared/data`, which are not shipped):

```
for name in formality politeness paradetox yelp; do
  steer run configs/$name.toml --data-dir ../shared/data/$name --tune -o runs/$name
done
steer report runs/formality runs/politeness runs/paradetox runs/yelp -o docs/results.md --force
```

What the columns mean (all × 100 except BLEU, PPL and Len):
- **J**: the joint score of ParaDetox (Logacheva et al. 2022), the mean over sentences of
  accuracy_i × similarity_i × fluency_i, with accuracy_i the judge's probability of the target
  style, similarity_i the MiniLM cosine to the source clipped at 0, and fluency_i =
  min(1, PPL_ref / PPL_i) under the unedited model, PPL_ref being the median per-sentence
  perplexity of the source texts (0 for an empty or looping output).
- **Acc**: share of outputs the judge assigns to the target style. The judge is the more accurate,
  on held-out train texts, of a TF-IDF + logistic-regression classifier and a logistic regression
  on MiniLM embeddings (both accuracies are given per corpus; the judge is named above each table).
  Tuning selects with the *other* judge, so the reported accuracy never graded its own pick.
- **Sim**: mean MiniLM cosine of output and source. **BLEU**: sacrebleu against the references
  (ParaDetox only). **sBLEU**: BLEU against the source. **Copy%**: outputs equal to the source.
- **PPL**: corpus perplexity of the outputs under the unedited model (it *rewards* loops, hence):
- **Loop%**: outputs with a word three times in a row, or with at least four word 3-grams of which
  fewer than 60% are distinct. **Empty%**: empty outputs. **Len**: mean output/source word ratio.

n = the first 100 dev texts of each direction; greedy decoding, at most 48 new tokens, every row
stopping once its answer line is complete, with the loop guard on (no third consecutive copy of
anything the reply just said twice); prompts from `steer/data/prompts.toml`.

Modes (see `steer transfer --help` and the README):
- `prompt`: the rewrite instruction alone, no steering (the baseline).
- `paper`: the sNeuron-TST recipe: zero the source-only neurons (top 1% of 46,080 neurons by
  activation rate per style, shared neurons removed) at every position, plus contrastive layer
  decoding over the 4 blocks before the last (α = 0.1, β = 1).
- `guided`: add λ = 2 × (target − source mean activation) to the 5% of neurons whose means differ
  most, at generated positions, inside **guidance** (each text decoded unedited and edited in one
  batch; the next token maximises `log p + γ·(log p_edited − log p)` among the tokens the unedited
  model finds plausible, p ≥ 0.1·max p, γ = 1).
- `tuned`: the candidate (guided at λ = 1, 2, 3, or the plain prompt) with the highest J on the
  32 dev texts *after* the evaluated 100, scored with the selection judge.
- `rerank` (the CLI's default when the profile has a style probe): per text, four candidates, the
  rungs of the ladder 0, u0.5, 1, 3: the plain prompt, the guided recipe's shift at λ = 0.5
  *without* guidance (one decoded row) and the guided recipe at λ = 1 and 3; the candidate with the
  highest P_probe(target)^0.5 × similarity × fluency wins. The probe reads the model's own neurons;
  the evaluation judge never chooses. Ladder and exponent were chosen on the tuning texts with the
  selection judge (`bench/rerank_pool.py`). In a run, rungs already decoded by other modes (the
  prompt mode is rung 0) are reused.
"""


def results_document(runs: Sequence[RunReport], findings: str | None = None, chart: str | None = None) -> str:
    """The whole results document: header, each run's table (+ tuned choices), verdict, findings, trade-off."""
    if not runs:
        raise SteerError("no run directories given; pass the directories 'steer run -o' wrote")
    parts = [REPORT_MARKER + "\n\n" + DOCUMENT_HEADER]
    for run in runs:
        table = results_table(run.results).replace("# ", "## ", 1).replace("\n## ", "\n### ")
        parts.append(table)
        if run.tuned is not None:
            chosen = run.tuned.chosen.items()
            parts.append("Tuned choices: " + "; ".join(f"{d}: {describe(c.settings)}" for d, c in chosen) + "\n")
    parts.append(verdict(runs))
    if findings:
        parts.append(findings)
    if any(True for r in runs for _ in r.trials()):
        parts.append(tradeoff(runs))
        if chart:
            parts.append(f"![trade-off of the tuning candidates]({chart})\n")
    return "\n".join(parts)


def check_report_target(path: Path, force: bool) -> None:
    """Refuse to replace a file `steer report` did not write, or any file without `force`."""
    if path.is_dir():
        raise SteerError(f"-o {path} is a directory; give the Markdown file to write, e.g. docs/results.md")
    if not path.exists():
        return
    if not force:
        raise SteerError(f"{path} exists; add `force` to replace it")
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = fh.readline().strip()
    if first != REPORT_MARKER:
        raise SteerError(f"{path} was not written by 'steer report'; refusing to replace it (pick another -o)")


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    findings: str | Path | None = None,
    force: bool = False,
) -> Path:
    """Write the results document for `run_dirs` to `out` (and its trade-off chart beside it)."""
    out = Path(out)
    check_report_target(out, force)
    runs = [RunReport(p) for p in run_dirs]
    text = None
    if findings is not None:
        fpath = Path(findings)
        if not fpath.is_file():
            raise SteerError(f"`findings` {fpath} does not exist; write it or drop `findings`")
        text = fpath.read_text(encoding="utf-8")
    chart = out.with_name(f"{out.stem}-tradeoff.png")
    if chart.exists() and not force:
        raise SteerError(f"{chart} exists; add `force` to replace it")
    drew = tradeoff_chart(runs, chart)
    write_text(out, results_document(runs, text, chart.name if drew else None))
    return out


def _rung_order(item: tuple[str, Any]) -> tuple[float, bool]:
    """Rungs by strength, the unguided (`u1`) before the guided (`1`) at equal strength."""
    from steer.rerank import Rung

    rung = Rung.parse(item[0])
    return rung.strength, rung.guided
