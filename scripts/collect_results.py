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
                    + (f" + contrast β={c['beta']}" if c.get("contrast") else " (no contrast)")
                    for d, c in chosen.items()
                ),
                "",
            ]
            parts.append("\n".join(lines))
    out = ROOT / "docs" / "results.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(parts))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
