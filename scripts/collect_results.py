"""Collect runs/<name>/results.md (+ tuned.json) into docs/results.md.

scripts/run_results.sh && .venv/bin/python scripts/collect_results.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["formality", "politeness", "paradetox", "yelp"]

HEADER = """# Results on real data (dev splits, embedded SmolLM2-135M-Instruct)

Regenerate (needs the corpora in `../shared/data`, which are not shipped; about an hour on 2 cores):

```
scripts/run_results.sh        # = steer run configs/<name>.toml --data-dir ../shared/data/<name> --tune -o runs/<name>
.venv/bin/python scripts/collect_results.py
```

What the columns mean: **Acc** = share of outputs the TF-IDF + logistic-regression classifier
(trained on the train split; held-out accuracy given per corpus) assigns to the target style;
**Sim** = mean cosine similarity (all-MiniLM-L6-v2) between output and source; **BLEU** = sacrebleu
against the references (ParaDetox only); **sBLEU** = BLEU against the source; **Copy%** = outputs
equal to the source after case/whitespace normalisation; **PPL** = perplexity of the outputs under
the unedited model. All numbers × 100 except BLEU and PPL. n = dev texts per direction (the first
100 of each dev file). Greedy decoding, 48 new tokens, prompts from `configs/prompts.toml`.

Modes: `prompt` = the instruction alone; `deactivate` = zero the source-only neurons (selection
`paper`: top-k by activation rate per style, shared neurons removed) at every position;
`deactivate+contrast` = that plus the paper's contrastive layer decoding (last 4 blocks before the
final one, α = 0.1). top-k and β were chosen per direction by `steer tune` on the first 32 dev texts
(grid: top-k ∈ {0.5%, 1%, 2%} of 46,080 neurons without contrast, then β ∈ {0.25, 0.5} at the best
k; objective: highest accuracy with similarity ≥ 0.8× and PPL ≤ 1.2× prompting's), so the first 32
rows of each direction are not held out from that choice.
"""


def verdict() -> str:
    """Per direction: did a steered mode beat prompting, and at what cost? Computed, not written by hand."""
    lines = [
        "## Verdict (computed from the tables above)",
        "",
        "Δ = steered − prompt, accuracy in points; 'kept' = similarity ≥ 0.8× and PPL ≤ 1.2× prompting's.",
        "",
        "| direction | mode | ΔAcc | Sim ratio | PPL ratio | kept? |",
        "|---|---|---|---|---|---|",
    ]
    for name in NAMES:
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
                kept = "yes" if sim >= 0.8 and ppl <= 1.2 else "no"
                lines.append(
                    f"| {direction.replace('-', ' → ')} | {mode} | {100 * (m['accuracy'] - base['accuracy']):+.0f} | "
                    f"{sim:.2f} | {ppl:.2f} | {kept} |"
                )
    return "\n".join(lines) + "\n"


def exploration() -> str:
    """Other steering settings tried on the tuning texts (scripts/explore_steering.py), if run."""
    lines = []
    for name in NAMES:
        path = ROOT / "runs" / name / "explore.json"
        if not path.is_file():
            continue
        rows = json.loads(path.read_text())
        lines += [
            f"## Exploration: other steering settings on {name} (first {rows[0]['n']} dev texts, the tuning texts)",
            "",
            f"`.venv/bin/python scripts/explore_steering.py configs/{name}.toml --data-dir ../shared/data/{name} "
            f"--limit {rows[0]['n']} -o runs/{name}`",
            "",
            "| direction | setting | Acc | Sim | sBLEU | PPL |",
            "|---|---|---|---|---|---|",
        ]
        skip = {"direction", "n", "accuracy", "similarity", "self_bleu", "copy_rate", "ppl"}
        for r in rows:
            setting = ", ".join(f"{k}={v}" for k, v in r.items() if k not in skip)
            lines.append(
                f"| {r['direction'].replace('-', ' → ')} | {setting} | {100 * r['accuracy']:.1f} | "
                f"{100 * r['similarity']:.1f} | {r['self_bleu']:.1f} | {r['ppl']:.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parts = [HEADER]
    for name in NAMES:
        run = ROOT / "runs" / name
        if not (run / "results.md").is_file():
            print(f"missing {run}/results.md", file=sys.stderr)
            continue
        parts.append((run / "results.md").read_text().replace("# ", "## ", 1).replace("\n## ", "\n### "))
        tuned = run / "tuned.json"
        if tuned.is_file():
            chosen = json.loads(tuned.read_text())["chosen"]
            lines = [
                "Tuned choices (on 32 dev texts): "
                + "; ".join(
                    f"{d}: top-k {c['top_k']}"
                    + (f" + contrast β={c['beta']}" if c.get("contrast") else " without contrast")
                    + (f" (best contrast β={c['contrast_beta']})" if c.get("contrast_beta") is not None else "")
                    for d, c in chosen.items()
                ),
                "",
            ]
            parts.append("\n".join(lines))
    parts.append(verdict())
    parts.append(exploration())
    out = ROOT / "docs" / "results.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(parts))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
