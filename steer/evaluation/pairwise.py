"""Which of two rewrites of one source is the better, by the LLM judge: what the pair is asked, how
the answers combine, and how the judge's preferences agree with a read's `best`.

How: `LLMJudge.prefer` asks the prompt's `[pairwise_choice]` ("which is the better rewrite? first or
second") of each pair (A, B) four times — A shown first and B second, then B first and A second,
each in both orders of the answer words — and averages the log-odds that A is the better. A
preference for the rewrite shown first, or for the answer word named first, cancels; swapping A and
B asks the same four questions and negates the value exactly; two identical rewrites give exactly 0.
A pair is a tie where |log-odds| < `TIE_MARGIN`.

Why apart from `steer.evaluation.llm_judge`: what a pair is asked, and what its answers mean beside
reading, need no model; how it is asked (batches, prefix caches, the answer cache) is the judge's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from steer.errors import SteerError

TIE_MARGIN = 0.1  # nats: a pair whose |log-odds| is below it prefers neither rewrite
LABELS = ("A", "B", "tie")  # a read's `best`, in the pair's own letters


def check_pairs(pairs: Sequence[tuple[Any, Any]]) -> None:
    """Both sides of a pair (`JudgeItem`s) rewrite the same source between the same styles: one
    line naming the first pair that does not."""
    for index, (a, b) in enumerate(pairs, start=1):
        if (a.source, a.source_style, a.target_style) != (b.source, b.source_style, b.target_style):
            raise SteerError(
                f"pair {index} is not two rewrites of one source: {a.source!r} ({a.source_style} → "
                f"{a.target_style}) beside {b.source!r} ({b.source_style} → {b.target_style})"
            )


def pairwise_asks(table: dict[str, Any], pairs: Sequence[tuple[Any, Any]]) -> list[tuple[str, str, str, str]]:
    """The (rendered question, text, a, b) asks of each pair, four per pair in this order: A shown
    first with the answers ("first", "second"), then ("second", "first"); B shown first likewise."""
    first, second = table["answers"]
    question, shown = str(table["question"]), str(table["text"])
    asks = []
    for a, b in pairs:
        for one, two in ((a, b), (b, a)):
            text = shown.format(source_text=a.source, first=one.rewrite, second=two.rewrite)
            for x, y in ((first, second), (second, first)):
                asks.append((question.format(a=x, b=y, source=a.source_style, target=a.target_style), text, x, y))
    return asks


def pairwise_log_odds(odds: Sequence[float]) -> list[float]:
    """Each pair's log-odds that A is the better, from its four asks' log p(a) − log p(b) (as
    `pairwise_asks` orders them): ((A first: "first" over "second") + (B first: "second" over
    "first") − (A first: "second" over "first") − (B first: "first" over "second")) / 4. Each sum
    adds the two asks leaning the same way, so swapping A and B negates the value exactly (float
    addition commutes) and identical rewrites give exactly 0."""
    if len(odds) % 4:
        raise ValueError(f"{len(odds)} answers: a pair has four")
    return [((odds[k] + odds[k + 3]) - (odds[k + 1] + odds[k + 2])) / 4 for k in range(0, len(odds), 4)]


def preference_label(log_odds: float, margin: float = TIE_MARGIN) -> str:
    """ "A" where the judge prefers A by at least `margin`, "B" where it prefers B, else "tie"."""
    if abs(log_odds) < margin or log_odds != log_odds:
        return "tie"
    return "A" if log_odds > 0 else "B"


def preference_counts(preferences: Sequence[float], margin: float = TIE_MARGIN) -> dict[str, int]:
    """How many pairs, how many prefer A, B, neither (|log-odds| < `margin`)."""
    labels = [preference_label(x, margin) for x in preferences]
    return {
        "n": len(labels),
        "a_preferred": labels.count("A"),
        "b_preferred": labels.count("B"),
        "ties": labels.count("tie"),
    }


def pairwise_agreement(
    preferences: Sequence[float], best_labels: Sequence[str], margin: float = TIE_MARGIN
) -> dict[str, float]:
    """The judge's log-odds per pair against a read's `best` per pair ("A", "B" or "tie", in the
    pair's own letters): `sign_agreement`, the share of the `decided` pairs (the read's best not a
    tie) where the judge's sign points the same way (NaN where none is decided); `kappa`, Cohen's κ
    over the three classes A, B and tie (the judge's tie: |log-odds| < `margin`; NaN where chance
    agreement is 1); `agreement`, the share of pairs whose three-way labels match."""
    if len(preferences) != len(best_labels) or not best_labels:
        raise ValueError(
            f"{len(preferences)} preferences for {len(best_labels)} read labels; they must be the same, non-zero"
        )
    unknown = [label for label in best_labels if label not in LABELS]
    if unknown:
        raise ValueError(f"read label {unknown[0]!r} is not one of {', '.join(LABELS)}")
    n = len(best_labels)
    decided = [(x, label) for x, label in zip(preferences, best_labels, strict=True) if label != "tie"]
    same_sign = sum((x > 0) if label == "A" else (x < 0) for x, label in decided)
    judged = [preference_label(x, margin) for x in preferences]
    observed = sum(j == r for j, r in zip(judged, best_labels, strict=True)) / n
    chance = sum((judged.count(c) / n) * (best_labels.count(c) / n) for c in LABELS)
    return {
        "n": n,
        "decided": len(decided),
        "sign_agreement": same_sign / len(decided) if decided else float("nan"),
        "agreement": observed,
        "kappa": float("nan") if chance == 1 else (observed - chance) / (1 - chance),
    }
