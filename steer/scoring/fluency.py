"""Per-text NLL under a language model, perplexity, and the one fluency function that rerank and
evaluation share (each with its own calibration, so the selector's fluency is not J's).

fluency(text) = min(1, exp(reference − mean token NLL of text)), 0 for an empty, one-token or
looping text. Rerank calibrates against each candidate's own source (`reference` = that source's
mean NLL); evaluation against the median source of the whole set (`median_reference`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from steer.errors import SteerError
from steer.model.padding import pad_rows
from steer.scoring.loops import has_loop


def token_nll(lm: Any, texts: Sequence[str], *, batch_size: int = 16) -> list[tuple[float, int]]:
    """(summed next-token NLL, predicted tokens) per text under `lm` (a `LoadedModel`).

    Each text is scored on its own, with the tokenizer's special tokens; padding is masked.
    Empty texts and texts of fewer than two tokens give (0.0, 0): nothing was predicted.
    """
    tok, model = lm.tokenizer, lm.model
    encoded = [tok(t, add_special_tokens=True)["input_ids"] if t and t.strip() else [] for t in texts]
    out = [(0.0, 0)] * len(texts)
    scored = [i for i, e in enumerate(encoded) if len(e) >= 2]
    order = sorted(scored, key=lambda i: -len(encoded[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        ids, mask = pad_rows([encoded[i] for i in chunk], tok.pad_token_id, "right")
        with torch.inference_mode():
            logits = model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).logits.float()
        for i, scored_row in zip(chunk, rows_nll(logits, ids, mask), strict=True):
            out[i] = scored_row
    return out


def rows_nll(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> list[tuple[float, int]]:
    """(summed next-token NLL, predicted tokens) of each row of a right-padded batch (at least two
    positions), padding masked: the one computation behind `token_nll` and the style probe's fluency
    read (`steer.profiling.probe.read_features`), on the device `logits` are on."""
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1).to(logits.device), reduction="none"
    ).reshape(len(ids), -1)
    keep = mask[:, 1:].to(nll.device).bool()
    return [(float(nll[row][keep[row]].sum()), int(keep[row].sum())) for row in range(len(ids))]


def perplexity(lm: Any, texts: Sequence[str], *, batch_size: int = 16) -> float:
    """Corpus perplexity: exp of the mean next-token NLL over every real token of `texts`."""
    return _perplexity(token_nll(lm, texts, batch_size=batch_size))


def _perplexity(nll: Sequence[tuple[float, int]]) -> float:
    tokens = sum(n for _, n in nll)
    return math.exp(sum(s for s, _ in nll) / tokens) if tokens else float("nan")


def fluency(text: str | None, nll: tuple[float, int], reference: float) -> float:
    """min(1, exp(reference − mean token NLL)): 1 for a text as predictable as the reference, 0.5
    at twice its perplexity; 0 for an empty, looping or sub-two-token text (a loop's low
    perplexity is no fluency). The one fluency formula; callers differ only in `reference`."""
    total, count = nll
    if not text or not text.strip() or count == 0 or has_loop(text):
        return 0.0
    return min(1.0, math.exp(reference - total / count))


def median_reference(source_nll: Sequence[tuple[float, int]]) -> float:
    """Evaluation's calibration: the median mean token NLL of the source texts."""
    means = sorted(s / n for s, n in source_nll if n)
    if not means:
        raise SteerError("fluency needs source texts of at least two tokens to calibrate against")
    mid = len(means) // 2
    return means[mid] if len(means) % 2 else 0.5 * (means[mid - 1] + means[mid])


def sentence_fluency(
    outputs: Sequence[str | None], output_nll: Sequence[tuple[float, int]], source_nll: Sequence[tuple[float, int]]
) -> list[float]:
    """Evaluation's per-sentence fluency: `fluency` against the median source (`median_reference`),
    so the score does not depend on the domain's base perplexity (reviews vs. requests) and is
    not rerank's per-source calibration."""
    reference = median_reference(source_nll)
    return [fluency(t, n, reference) for t, n in zip(outputs, output_nll, strict=True)]
