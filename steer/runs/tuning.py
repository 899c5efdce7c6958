"""`steer tune`: try candidate recipes per direction on the tuning texts and keep the best, scored
with the selection judge (never the evaluation judge); writes `tuned.json` into the run directory."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from steer.distributed import on_main
from steer.runs.config import DEFAULT_TUNE_CANDIDATES, _candidate, mode_settings
from steer.runs.records import TunedChoice, TuneResult
from steer.settings import TransferSettings

if TYPE_CHECKING:
    from steer.runs.runner import Runner


def tune(runner: Runner) -> TuneResult:
    """Try each candidate recipe per direction on held-out dev texts; keep the best trade-off.

    The tuning texts are `Direction.tune_texts`: the `[tune] limit` dev texts after the
    evaluated ones (`[tune] start` moves them). They are scored with the *selection* judge,
    never the evaluation judge. `[tune] objective = "j"` (default) keeps the candidate — the
    plain prompt included — with the highest joint score J; `"guards"` keeps the most accurate
    candidate whose similarity stays ≥ `similarity_floor` × prompting's and whose perplexity
    stays ≤ `ppl_ceiling` × prompting's, else the plain prompt.
    """
    candidates = [_candidate(c) for c in runner.exp.tune.get("candidates", DEFAULT_TUNE_CANDIDATES)]
    floor = float(runner.exp.tune.get("similarity_floor", 0.8))
    ceiling = float(runner.exp.tune.get("ppl_ceiling", 1.2))
    objective = str(runner.exp.tune.get("objective", "j"))
    chosen: dict[str, TunedChoice] = {}
    trials = []
    for full in runner.exp.directions:
        direction = replace(full, texts=full.tune_texts, references=full.tune_references)
        prompt = runner.score(
            direction,
            runner.transfer(direction, mode_settings("prompt", runner.exp.base), "tune-prompt"),
            selecting=True,
        )
        scored = [({"mode": "prompt"}, prompt)]
        for label, fields in candidates:
            settings = TransferSettings.resolve(recipe=fields, base=runner.exp.base)
            outputs = runner.transfer(direction, settings, f"tune-{label}")
            scored.append((fields, runner.score(direction, outputs, selecting=True)))
        if objective == "j":
            best = max(scored, key=lambda c: float(c[1].get("j", float("-inf"))))
        else:
            best = max(scored, key=lambda c: _objective(c[1], prompt, floor, ceiling))
        chosen[direction.name] = TunedChoice(best[0], best[1], prompt, full.tune_overlaps)
        trials += [{"direction": direction.name, "settings": f, "metrics": m} for f, m in scored]
    tuned = TuneResult(
        objective=objective,
        selection_judge=runner.scorers(selecting=True).classifier.name,
        similarity_floor=floor,
        ppl_ceiling=ceiling,
        limit=len(runner.exp.directions[0].tune_texts) if runner.exp.directions else 0,
        chosen=chosen,
        trials=trials,
    )
    on_main(lambda: tuned.write(runner.out / "tuned.json"))
    return tuned


def _objective(m: dict[str, Any], prompt: dict[str, Any], floor: float, ceiling: float) -> tuple[int, float, float]:
    """Sort key for tune: within the similarity/PPL limits first, then accuracy, then similarity."""
    ok_sim = m.get("similarity") is None or m["similarity"] >= floor * prompt.get("similarity", 0)
    ok_ppl = (
        m.get("ppl") is None or not math.isfinite(prompt.get("ppl", math.nan)) or (m["ppl"] <= ceiling * prompt["ppl"])
    )
    return (int(ok_sim and ok_ppl), float(m.get("accuracy", 0.0)), float(m.get("similarity") or 0.0))
