"""Whether the LLM judge's probabilities carry the read's signal at all, beyond its 0.5 cut:
the ranking (AUC) of each answer's P(yes) against the read labels, and Cohen's κ of the best
threshold on the product of the three answers — chosen on a random half of the labels and
reported on the other half, so the threshold is never graded on the texts that chose it.

    python research/scripts/judge_signal.py research/reads/2026-12-04-qwen1.5b-seven/judge-agreement.json

Reads only the agreement JSON `research/scripts/judge_agreement.py` wrote (no model is loaded).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from steer.evaluation.llm_judge import agreement  # noqa: E402

# What counts as a positive read label per answer (the protocol's style scale is 0–2).
POSITIVE = {"style": 2, "meaning": 1, "fluency": 1, "usable": 1}


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The probability that a positive item scores above a negative one (ties count half)."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))


def split_half_kappa(scores: list[float], labels: list[bool], seed: int = 0) -> tuple[float, float, float]:
    """(threshold, κ on the half that chose it, κ on the other half)."""
    order = list(range(len(scores)))
    random.Random(seed).shuffle(order)
    chose, held = order[: len(order) // 2], order[len(order) // 2 :]

    def kappa_at(rows: list[int], cut: float) -> float:
        kappa = agreement([scores[i] >= cut for i in rows], [labels[i] for i in rows])["kappa"]
        return -1.0 if kappa != kappa else kappa  # NaN (both constant) ranks last

    cut = max(sorted({scores[i] for i in chose}), key=lambda c: kappa_at(chose, c))
    return cut, kappa_at(chose, cut), kappa_at(held, cut)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agreement", type=Path, nargs="+", help="judge-agreement.json files")
    args = parser.parse_args()
    for path in args.agreement:
        data = json.loads(path.read_text(encoding="utf-8"))
        for same in (False, True):  # a judge of its own rewrites and of another model's, apart
            items = [i for i in data["items"] if i.get("llm") and bool(i.get("same_model_judge")) == same]
            if items:
                whose = "the decoding model itself" if same else "another model"
                print(f"{path}: {data['judge']}, judging {whose}: {len(items)} rewrites")
                report(items)


def report(items: list[dict], answers: str = "llm") -> None:
    """AUC of each answer and the split-half κ of the product, for one group of judged rewrites
    (`answers`: the items' key that holds the judge's P(yes) per question)."""
    usable = [i["labels"]["usable"] >= POSITIVE["usable"] for i in items]
    print(f"  read usable: {sum(usable)}")
    for answer in ("style", "meaning", "fluency"):
        scores = [i[answers][answer] for i in items]
        own = [i["labels"][answer] >= POSITIVE[answer] for i in items]
        print(f"  P({answer}): AUC vs read usable {auc(scores, usable):.3f}, vs read {answer} {auc(scores, own):.3f}")
    product = [i[answers]["style"] * i[answers]["meaning"] * i[answers]["fluency"] for i in items]
    cut, chose, held = split_half_kappa(product, usable)
    print(f"  product of the three: AUC {auc(product, usable):.3f}; best cut on half A {cut:.3f} gives kappa "
          f"{chose:.3f} there and {held:.3f} on held-out half B")  # fmt: skip


if __name__ == "__main__":
    main()
