"""How a judge's yes/no labels agree with a read's: accuracy and Cohen's κ (torch-free)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def agreement(predicted: Sequence[bool], labels: Sequence[bool]) -> dict[str, float]:
    """Accuracy and Cohen's κ of two yes/no labellings of the same items (κ is NaN when both are
    constant and equal, where chance agreement is 1)."""
    if len(predicted) != len(labels) or not labels:
        raise ValueError(f"{len(predicted)} predictions for {len(labels)} labels; they must be the same, non-zero")
    n = len(labels)
    observed = sum(p == t for p, t in zip(predicted, labels, strict=True)) / n
    p_yes, t_yes = sum(predicted) / n, sum(labels) / n
    chance = p_yes * t_yes + (1 - p_yes) * (1 - t_yes)
    kappa = math.nan if chance == 1 else (observed - chance) / (1 - chance)
    return {"n": n, "accuracy": observed, "kappa": kappa}
