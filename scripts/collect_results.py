"""Collect runs/<name>/results.md (+ tuned.json) into docs/results.md.

scripts/run_results.sh && .venv/bin/python scripts/collect_results.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["formality", "politeness", "paradetox", "yelp"]
# runs in the verdict: the main runs, then rerank runs (runs/<name>-rerank) where they exist
RUNS = [*NAMES, *(f"{n}-rerank" for n in NAMES)]

HEADER = """# Results on real data (dev splits, embedded SmolLM2-135M-Instruct)

Regenerate (needs the corpora in `../shared/data`, which are not shipped; about 2½ hours on 2 cores):

```
scripts/run_results.sh        # = steer run configs/<name>.toml --data-dir ../shared/data/<name> --tune -o runs/<name>
.venv/bin/python scripts/collect_results.py
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
- `guided` (the default preset): add λ = 2 × (target − source mean activation) to the 5% of
  neurons whose means differ most, at generated positions, inside **guidance** (each text decoded
  unedited and edited in one batch; the next token maximises `log p + γ·(log p_edited − log p)`
  among the tokens the unedited model finds plausible, p ≥ 0.1·max p, γ = 1).
- `tuned`: the candidate (guided at λ = 1, 2, 3, or the plain prompt) with the highest J on the
  32 dev texts *after* the evaluated 100, scored with the selection judge.
- `rerank` (separate runs, `runs/<name>-rerank`): per text, the plain prompt and guided λ = 1, 2, 3
  decoded in one batch; the candidate with the highest style-probe probability × similarity ×
  fluency wins (the probe reads the model's own neurons; the evaluation judge never chooses).
"""


FINDINGS_FILE = ROOT / "docs" / "findings.md"  # written by hand after reading the tables and samples


def verdict() -> str:
    """Per direction: did a steered mode beat prompting, and at what cost? Computed, not written by hand."""
    lines = [
        "## Verdict (computed from the tables above)",
        "",
        "Δ = steered − prompt (points); 'kept' = similarity ≥ 0.8×, PPL ≤ 1.2× and loops ≤ prompting's; "
        "target = ΔAcc ≥ min(+10, 95 − prompt's Acc) and kept.",
        "",
        "| direction | run | mode | ΔJ | ΔAcc | Sim ratio | PPL ratio | Loop% (prompt) | ΔBLEU (refs) | kept? "
        "| target? |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in RUNS:
        path = ROOT / "runs" / name / "results.json"
        if not path.is_file():
            continue
        rows = json.loads(path.read_text())["rows"]
        for direction in dict.fromkeys(r["direction"] for r in rows):
            by_mode = {r["mode"]: r["metrics"] for r in rows if r["direction"] == direction}
            base = by_mode["prompt"]
            for mode, m in by_mode.items():
                if mode == "prompt":
                    continue
                sim, ppl = m["similarity"] / base["similarity"], m["ppl"] / base["ppl"]
                ok = round(sim, 3) >= 0.8 and round(ppl, 3) <= 1.2 and m["repetition"] <= base["repetition"]
                gain = round(100 * (m["accuracy"] - base["accuracy"]), 1)  # 0.49 − 0.39 is 9.999… in floats
                need = min(10.0, round(95 - 100 * base["accuracy"], 1))
                bleu = f"{m['bleu'] - base['bleu']:+.1f}" if "bleu" in m and "bleu" in base else "—"
                lines.append(
                    f"| {direction.replace('-', ' → ')} | {name} (n = {m['n']}) | {mode} | "
                    f"{100 * (m['j'] - base['j']):+.1f} | {gain:+.0f} | {sim:.2f} | {ppl:.2f} | "
                    f"{100 * m['repetition']:.0f} ({100 * base['repetition']:.0f}) | {bleu} | "
                    f"{'yes' if ok else 'no'} | {'**yes**' if ok and gain >= need else 'no'} |"
                )
    return "\n".join(lines) + "\n"


def _tune_limit() -> int:
    """How many tuning texts per direction the runs' tuned.json files used (they must agree)."""
    limits = {
        json.loads(p.read_text()).get("limit") for n in NAMES if (p := ROOT / "runs" / n / "tuned.json").is_file()
    }
    if len(limits) != 1:
        raise SystemExit(f"the runs were tuned on different numbers of texts: {sorted(map(str, limits))}")
    return int(limits.pop())


def _trials() -> Iterator[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], bool]]:
    """Every steered candidate `steer tune` scored: (direction, settings, metrics, prompt's metrics, chosen?)."""
    for name in NAMES:
        path = ROOT / "runs" / name / "tuned.json"
        if not path.is_file():
            continue
        tuned = json.loads(path.read_text())
        if not all("settings" in c for c in tuned["chosen"].values()):
            continue  # written by an older `steer tune`
        for t in tuned["trials"]:
            if t["settings"].get("mode") == "prompt":
                continue
            chosen = tuned["chosen"][t["direction"]]
            yield (
                t["direction"],
                t["settings"],
                t["metrics"],
                chosen["prompt_metrics"],
                chosen["settings"] == t["settings"],
            )


def tradeoff() -> str:
    """Every candidate `steer tune` scored (the trade-off curve), per direction, as Δ vs prompting."""
    from steer.transfer import describe

    lines = [
        f"## Trade-off: every tuning candidate ({_tune_limit()} held-out dev texts per direction)",
        "",
        "Δ in points against the plain prompt on the same texts, scored with the *selection* judge (the one "
        "tuning chooses by, not the evaluation judge); ratios against the prompt's similarity and PPL.",
        "",
        "| direction | recipe | ΔJ | ΔAcc | Sim ratio | PPL ratio | Loop% | chosen |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for direction, settings, m, base, chosen in _trials():
        lines.append(
            f"| {direction.replace('-', ' → ')} | {describe(settings)} | {100 * (m['j'] - base['j']):+.1f} | "
            f"{100 * (m['accuracy'] - base['accuracy']):+.0f} | {m['similarity'] / base['similarity']:.2f} | "
            f"{m['ppl'] / base['ppl']:.2f} | {100 * m['repetition']:.0f} | {'**yes**' if chosen else ''} |"
        )
    return "\n".join(lines) + "\n"


def tradeoff_chart(path: Path) -> bool:
    """Scatter of every tuning candidate: similarity ratio (x) against accuracy gain (y), per recipe.

    The target region is top right of the dashed lines (ΔAcc ≥ +10, Sim ≥ 0.8×); PPL is not shown.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from steer.transfer import describe

    points: dict[str, list[tuple[float, float]]] = {}
    for _direction, settings, m, base, _chosen in _trials():
        xy = (m["similarity"] / base["similarity"], 100 * (m["accuracy"] - base["accuracy"]))
        points.setdefault(describe(settings), []).append(xy)
    if not points:
        return False
    fig, ax = plt.subplots(figsize=(11, 5))
    for label, xy in points.items():
        ax.scatter([p[0] for p in xy], [p[1] for p in xy], label=label, alpha=0.8)
    ax.axvline(0.8, linestyle="--", color="grey")
    ax.axhline(10, linestyle="--", color="grey")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel("similarity to source, ratio to plain prompting")
    ax.set_ylabel("style accuracy gain over prompting (points)")
    ax.set_title(f"Tuning candidates, all 7 directions ({_tune_limit()} held-out dev texts each)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    parts = [HEADER]
    for name in RUNS:
        run = ROOT / "runs" / name
        if not (run / "results.md").is_file():
            if name in NAMES:
                print(f"missing {run}/results.md", file=sys.stderr)
            continue
        table = (run / "results.md").read_text().replace("# ", "## ", 1).replace("\n## ", "\n### ")
        if name.endswith("-rerank"):  # a separate run: say so in its heading
            table = table.replace(
                " — ", " — steer-and-rerank run (`steer run --modes prompt,guided,rerank --limit 32`) — ", 1
            )
        parts.append(table)
        tuned = run / "tuned.json"
        if tuned.is_file():
            from steer.transfer import describe

            chosen = json.loads(tuned.read_text())["chosen"]
            if all("settings" in c for c in chosen.values()):
                parts.append(
                    "Tuned choices: " + "; ".join(f"{d}: {describe(c['settings'])}" for d, c in chosen.items()) + "\n"
                )
    parts.append(verdict())
    if FINDINGS_FILE.is_file():
        parts.append(FINDINGS_FILE.read_text())
    parts.append(tradeoff())
    if tradeoff_chart(ROOT / "docs" / "tradeoff.png"):
        parts.append("![trade-off of the tuning candidates](tradeoff.png)\n")
    out = ROOT / "docs" / "results.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(parts))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
