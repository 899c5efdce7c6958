"""The one exception users see (`SteerError`) and how a style probe is fitted (`probe_fit`)."""

from __future__ import annotations

import math


class SteerError(ValueError):
    """A mistake the user can fix: the CLI prints it as one line and exits with code 1.

    Messages name parameters in backticks (`top_k`), as a Python caller knows them; the CLI shows
    each as the option of the command that was run (--top-k)."""


# How a probe is fitted by default — chosen by 5-fold cross-validation on the five corpora's
# training texts only (no dev text, no output, no evaluation judge; docs/findings.md "A stronger
# prior on the probe"): with C = 1 and 1,000 texts per style it overfitted its 512 features.
PROBE_TOP = 1024  # the most style-different neurons it reads
PROBE_LIMIT = 2000  # texts per style to fit and hold out from
PROBE_C = 0.01  # inverse L2 strength of the logistic regression (smaller: a stronger pull towards 0)


def probe_fit(top: int = PROBE_TOP, limit: int = PROBE_LIMIT, c: float = PROBE_C) -> dict[str, float]:
    """The settings a probe was fitted with, as its metadata records them (checked: a bad value is
    a one-line error before any model loads). `steer run` rebuilds a probe whose fit differs."""
    if top < 1:
        raise SteerError(f"`top` must be at least 1 neuron, got {top} (default {PROBE_TOP})")
    if limit < 2:
        raise SteerError(f"`limit` must be at least 2 texts per style, got {limit} (default {PROBE_LIMIT})")
    if not (math.isfinite(c) and c > 0):
        raise SteerError(f"`c` must be a finite number > 0, got {c} (default {PROBE_C}; smaller regularises more)")
    return {"top": int(top), "limit": int(limit), "c": float(c)}
