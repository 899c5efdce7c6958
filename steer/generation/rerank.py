"""Steer-and-rerank: decode each text under a ladder of recipes, keep the best-scored candidate.

Why: the best steering strength differs by direction and by text, and a small model can judge its own
style from the neurons its profile found (`steer.profiling.probe`). All rungs decode in one batch;
λ = 0, the plain prompt, is always a candidate, so a text is only steered when steering scores better.
Score of a candidate, by the model's own probe, similarity to the source and fluency:
P_probe(target | candidate)^e × max(cos(candidate, source), 0) × fluency × length term × rung weight, with
fluency = min(1, exp(NLL_source − NLL_candidate)) per token under the unedited model (0 if empty or
looping), length term = exp(−w · |log(words_candidate / words_source)|) and e ≤ 1 tempering the probe.

Rules, in order: a candidate flagged by `SELECTION_RULES` (`steer.scoring.faithfulness`) never beats a
clean one — dropped content too, as the probe reads a short text as informal and would pick rewrites that
lose the source's news; among flagged ones, one flagged only for dropped content beats the rest (a milder
failure than a loop, an echo or an invention); with `usable_first`, a clean candidate the selection side
reads as usable (probe P > ½, MiniLM similarity ≥ the usable bar) beats one it does not; then the score
decides, ties to the earlier rung. Nothing here uses evaluation's judge or encoder (mpnet), so its
similarity and chrF, unlike its `dropped` rate, are independent evidence for rerank.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from steer.errors import SteerError
from steer.generation.steerer import Steerer, TransferResult, TransferSettings, describe
from steer.ladder import MILD_RULES, SELECTION_RULES, RerankSettings
from steer.profiling.probe import StyleProbe
from steer.prompts import prompt_template
from steer.scoring import faithfulness as faith
from steer.scoring.encoders import USABLE_SIMILARITY, Embedder
from steer.scoring.fluency import fluency

logger = logging.getLogger(__name__)


# usable first: the selection side's reading of evaluation's `usable` (probe, MiniLM similarity)
LIKELY_STYLE = 0.5
LIKELY_SIMILARITY = USABLE_SIMILARITY


def flag_level(flags: Sequence[str]) -> int:
    """How badly the selection rules flag a candidate: 0 not at all, 1 only by mild rules
    (`MILD_RULES`: dropped content), 2 by any other (empty, meta, near-loop, junk, invented)."""
    if not flags:
        return 0
    return 1 if all(name in MILD_RULES for name in flags) else 2


def likely_usable(style: float, similarity: float, flagged: bool) -> bool:
    """The selection side's reading of evaluation's `usable`: unflagged, the probe says target
    style and the selection encoder says the meaning is kept."""
    return not flagged and style > LIKELY_STYLE and similarity >= LIKELY_SIMILARITY


def pick(
    scores: Sequence[float],
    style: Sequence[float],
    similarity: Sequence[float],
    flagged: Sequence[int],
    weights: Sequence[float],
    usable_first: bool = True,
) -> tuple[int, list[float], list[bool]]:
    """One text's choice among its candidates — from their scores (`candidate_scores`), probe
    styles, selection similarities and flag levels (`flag_level`; a bool is level 0 or 1): (the
    winner, the scores × the rungs' weights, which candidates read as likely usable). The one rule
    rerank and `bench/rerank_pool.py` choose by."""
    weighted = [s * w for s, w in zip(scores, weights, strict=True)]
    likely = [likely_usable(p, q, bool(f)) for p, q, f in zip(style, similarity, flagged, strict=True)]
    return choose(weighted, flagged, likely if usable_first else None), weighted, likely


def choose(
    scores: Sequence[float], flagged: Sequence[int] | None = None, preferred: Sequence[bool] | None = None
) -> int:
    """Index of the best score among the candidates flagged least (`flagged`: flag levels, 0 for
    none — `flag_level` — or bools) and, of those, among the `preferred` ones when there are any;
    the earliest wins ties (so λ = 0 wins when nothing is better)."""
    levels = [int(f) for f in flagged] if flagged else [0] * len(scores)
    pool = [i for i in range(len(scores)) if levels[i] == min(levels)]
    if preferred is not None:
        pool = [i for i in pool if preferred[i]] or pool
    best = pool[0]
    for i in pool:
        if scores[i] > scores[best]:
            best = i
    return best


def selection_flags(output: str, source: str, instruction: str) -> list[str]:
    """The faithfulness rules (`SELECTION_RULES`) that bar a candidate from beating a clean one."""
    flags = faith.flags(output, source, instruction)
    return [name for name in flags.names() if name in SELECTION_RULES]


def candidate_scores(
    style: Sequence[float],
    similarity: Sequence[float],
    fluency: Sequence[float],
    length: Sequence[float],
    style_exponent: float = 1.0,
) -> list[float]:
    """The product each candidate is ranked by (similarity clipped at 0, the probe tempered)."""
    return [
        max(p, 0.0) ** style_exponent * max(s, 0.0) * f * n
        for p, s, f, n in zip(style, similarity, fluency, length, strict=True)
    ]


class Reranker:
    """A steerer, the profile's style probe and a sentence encoder: decode a ladder, keep the best."""

    def __init__(self, steerer: Steerer, probe: StyleProbe, embedder: Embedder | None = None) -> None:
        probe.check_model(steerer.lm)
        self.steerer, self.probe = steerer, probe
        self.embedder = embedder or Embedder()

    def transfer(
        self,
        texts: Sequence[str],
        source: str,
        target: str,
        settings: RerankSettings = RerankSettings(),
        *,
        progress: bool = False,
        on_batch: Callable[[list[int], list[TransferResult]], None] | None = None,
    ) -> list[TransferResult]:
        """The winning rewrite per text; `info["rerank"]` lists every candidate with its scores.

        Each decoded batch is ranked at once (every score is per text, so this equals ranking at
        the end) and handed to `on_batch(indices, winners)` when given."""
        recipes = settings.candidates()
        chosen: dict[int, TransferResult] = {}

        template = prompt_template(source, target, settings.base, self.steerer.prompts)
        instruction = faith.instruction_text(template, source, target)

        def rank_batch(rows: list[int], batch: list[list[TransferResult]]) -> None:
            winners = self.rank([texts[i] for i in rows], target, batch, settings, recipes, instruction)
            chosen.update(zip(rows, winners, strict=True))
            if on_batch is not None:
                on_batch(rows, winners)

        self.steerer.transfer_candidates(texts, source, target, recipes, progress=progress, on_batch=rank_batch)
        return [chosen[i] for i in range(len(texts))]

    def rank(
        self,
        texts: Sequence[str],
        target: str,
        decoded: Sequence[Sequence[TransferResult]],
        settings: RerankSettings,
        recipes: Sequence[TransferSettings] | None = None,
        instruction: str = "",
    ) -> list[TransferResult]:
        """Score already decoded candidates (`decoded[k][i]`: text i under rung k of the ladder)
        and keep the best unflagged one per text (`instruction`: the rewrite instruction, for the
        meta rule's echo check). Split from decoding so that candidates decoded earlier — or one
        by one — can be ranked again under other scoring settings without decoding."""
        if len(decoded) != len(settings.ladder):
            raise SteerError(f"{len(decoded)} candidate lists for a ladder of {len(settings.ladder)} strengths")
        recipes = list(recipes) if recipes is not None else settings.candidates()
        sources = list(texts)
        outputs = [[r.output for r in results] for results in decoded]
        # Each distinct text is read once — candidates often repeat each other or the plain prompt —
        # in one probe pass (style and NLL) over sources and candidates, one encoder pass over pairs.
        unique = list(dict.fromkeys([*sources, *(o for outs in outputs for o in outs)]))
        where = {t: j for j, t in enumerate(unique)}
        style_of, nll_of = self.probe.score(self.steerer.lm, unique, target)
        pairs = list(dict.fromkeys((o, t) for outs in outputs for o, t in zip(outs, sources, strict=True)))
        sims = self.embedder.similarities([o for o, _ in pairs], [t for _, t in pairs], invariant=True)
        similarity_of = dict(zip(pairs, sims, strict=True))
        source_nll = [nll_of[where[t]] for t in sources]
        per_candidate = []
        for outs in outputs:
            style = [style_of[where[o]] for o in outs]
            nll = [nll_of[where[o]] for o in outs]
            sims = [similarity_of[(o, t)] for o, t in zip(outs, sources, strict=True)]
            fluent = [_fluency(o, n, s) for o, n, s in zip(outs, nll, source_nll, strict=True)]
            length = [length_term(o, t, settings.length_weight) for o, t in zip(outs, sources, strict=True)]
            scores = candidate_scores(style, sims, fluent, length, settings.style_exponent)
            flags = [selection_flags(o, t, instruction) for o, t in zip(outs, sources, strict=True)]
            per_candidate.append((style, sims, fluent, length, scores, flags))
        weights = [settings.weight(k) for k in range(len(recipes))]
        chosen = []
        for i, text in enumerate(texts):
            best, scores, likely = pick(
                [c[4][i] for c in per_candidate], [c[0][i] for c in per_candidate], [c[1][i] for c in per_candidate],
                [flag_level(c[5][i]) for c in per_candidate], weights, settings.usable_first,
            )  # fmt: skip
            table: list[dict[str, Any]] = [
                {
                    "rung": str(settings.ladder[k]),
                    "strength": settings.ladder[k].strength,
                    "recipe": describe(recipes[k]),
                    "output": decoded[k][i].output,
                    "style": per_candidate[k][0][i],
                    "similarity": per_candidate[k][1][i],
                    "fluency": per_candidate[k][2][i],
                    "length": per_candidate[k][3][i],
                    "weight": weights[k],
                    "score": scores[k],
                    "likely_usable": likely[k],
                    "flags": per_candidate[k][5][i],
                }
                for k in range(len(recipes))
            ]
            winner = decoded[best][i]
            info = dict(winner.info)
            rung = settings.ladder[best]
            info["rerank"] = {"chosen": best, "rung": str(rung), "strength": rung.strength, "candidates": table}
            chosen.append(TransferResult(text, winner.output, winner.raw_output, winner.truncated, info))
        return chosen


def _fluency(output: str, nll: tuple[float, int], source_nll: tuple[float, int]) -> float:
    """Rerank's calibration of the shared `fluency`: against the candidate's own source's mean
    NLL (evaluation calibrates on the median source instead)."""
    if nll[1] == 0:
        return 0.0
    reference = source_nll[0] / source_nll[1] if source_nll[1] else nll[0] / nll[1]
    return fluency(output, nll, reference)


def length_term(output: str, source: str, weight: float) -> float:
    """exp(−w · |log(words_output / words_source)|): 1 when the weight is 0, 0 for an empty text."""
    if weight == 0:
        return 1.0
    a, b = len(output.split()), len(source.split())
    if not a or not b:
        return 0.0
    return math.exp(-weight * abs(math.log(a / b)))


def rerank_summary(info: dict[str, Any], keep_candidates: bool) -> dict[str, Any]:
    """What a rewrite record keeps of a rerank (`TransferResult.info`): the winner's λ, and every
    candidate with its scores when asked (`--keep-candidates`)."""
    choice = info.get("rerank")
    if not choice:
        return {}
    kept = {"chosen": choice["chosen"], "rung": choice["rung"], "strength": choice["strength"]}
    if keep_candidates:
        kept["candidates"] = choice["candidates"]
    return kept


def rank_block(
    target: str,
    settings: RerankSettings,
    rungs: Sequence[TransferSettings],
    instruction: str,
    reranker: Reranker,
    block: list[Any],
) -> list[TransferResult]:
    """Rerank's choice for a block of (source text, its candidates per rung) — a module-level
    function, so that Ray workers can run it with their own reranker."""
    return reranker.rank(
        [text for text, _ in block],
        target,
        [[candidates[k] for _, candidates in block] for k in range(len(rungs))],
        settings,
        rungs,
        instruction,
    )
