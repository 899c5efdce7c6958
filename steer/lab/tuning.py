"""`steer tune`: try candidate recipes per direction on the tuning texts and keep the best, scored
with the selection judge (never the evaluation judge); the run writes the result as `tuned.json`."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from steer.errors import SteerError
from steer.lab.experiment import DEFAULT_TUNE_CANDIDATES, Direction, Experiment, _candidate, mode_settings
from steer.rewriting.records import PPL_CEILING, SIMILARITY_FLOOR, TunedChoice, TuneResult
from steer.settings import TransferSettings

logger = logging.getLogger(__name__)

# (direction, settings, label) → the outputs of that recipe on the direction's texts
Transfer = Callable[[Direction, TransferSettings, str], list[str]]
# (direction, outputs) → their metrics under the selection scorers (never the evaluation ones)
Score = Callable[[Direction, list[str]], dict[str, Any]]


def tune(exp: Experiment, transfer: Transfer, score: Score, selection_judge: str) -> TuneResult:
    """Try each candidate recipe per direction on held-out dev texts; keep the best trade-off.

    The tuning texts are `Direction.tune_texts`: the `[tune] limit` dev texts after the
    evaluated ones (`[tune] start` moves them). They are scored with the *selection* judge,
    never the evaluation judge. `[tune] objective = "j"` (default) keeps the candidate — the
    plain prompt included — with the highest joint score J; `"guards"` keeps the most accurate
    candidate whose similarity stays ≥ `similarity_floor` × prompting's and whose perplexity
    stays ≤ `ppl_ceiling` × prompting's, else the plain prompt.

    It takes plain functions (`transfer`, `score`; `steer.lab.runner.Runner` passes its rewrites' and scorers') and
    the selection judge's name for the record; the caller writes the result (`tuned.json`).
    """
    check_tunable(exp)
    candidates = [_candidate(c) for c in exp.tune.get("candidates", DEFAULT_TUNE_CANDIDATES)]
    floor = float(exp.tune.get("similarity_floor", SIMILARITY_FLOOR))
    ceiling = float(exp.tune.get("ppl_ceiling", PPL_CEILING))
    objective = str(exp.tune.get("objective", "j"))
    chosen: dict[str, TunedChoice] = {}
    trials = []
    for full in exp.directions:
        direction = replace(full, texts=full.tune_texts, references=full.tune_references)
        prompt = score(direction, transfer(direction, mode_settings("prompt", exp.base), "tune-prompt"))
        scored = [({"mode": "prompt"}, prompt)]
        for label, fields in candidates:
            settings = TransferSettings.resolve(recipe=fields, base=exp.base)
            outputs = transfer(direction, settings, f"tune-{label}")
            scored.append((fields, score(direction, outputs)))
        if objective == "j":
            best = max(scored, key=lambda c: float(c[1].get("j", float("-inf"))))
        else:
            best = max(scored, key=lambda c: _objective(c[1], prompt, floor, ceiling))
        chosen[direction.name] = TunedChoice(best[0], best[1], prompt, full.tune_overlaps)
        trials += [{"direction": direction.name, "settings": f, "metrics": m} for f, m in scored]
    tuned = TuneResult(
        objective=objective,
        selection_judge=selection_judge,
        similarity_floor=floor,
        ppl_ceiling=ceiling,
        limit=len(exp.directions[0].tune_texts) if exp.directions else 0,
        chosen=chosen,
        trials=trials,
    )
    return tuned


def check_tunable(exp: Experiment) -> None:
    """Refuse to tune a config whose metrics cannot rank the candidates (checked before any model
    loads): objective `j` needs metric `j`, `guards` needs `accuracy` — without them every candidate
    would tie and the plain prompt would be "chosen" for nothing. `guards` without `similarity` or
    `ppl` ranks by accuracy with that guard unchecked: said in a warning."""
    objective = str(exp.tune.get("objective", "j"))
    needed = "j" if objective == "j" else "accuracy"
    if needed not in exp.metrics:
        raise SteerError(
            f"tuning's objective {objective!r} needs metric {needed!r}, which the config's `metrics` "
            f"({', '.join(exp.metrics)}) leaves out; add {needed!r} to `metrics`"
        )
    unguarded = [m for m in ("similarity", "ppl") if objective == "guards" and m not in exp.metrics]
    if unguarded:
        logger.warning(
            "tuning's objective 'guards' will not check %s: the config's metrics leave %s out; add %s to "
            "metrics to guard with them",
            " or ".join(unguarded), " and ".join(unguarded), " and ".join(repr(m) for m in unguarded),
        )  # fmt: skip


def _objective(m: dict[str, Any], prompt: dict[str, Any], floor: float, ceiling: float) -> tuple[int, float, float]:
    """Sort key for tune: within the similarity/PPL limits first, then accuracy, then similarity."""
    ok_sim = m.get("similarity") is None or m["similarity"] >= floor * prompt.get("similarity", 0)
    ok_ppl = (
        m.get("ppl") is None or not math.isfinite(prompt.get("ppl", math.nan)) or (m["ppl"] <= ceiling * prompt["ppl"])
    )
    return (int(ok_sim and ok_ppl), float(m.get("accuracy", 0.0)), float(m.get("similarity") or 0.0))
