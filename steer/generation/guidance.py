"""Steering guidance: decode each prompt unedited and edited in one batch and follow the edit only
inside what the unedited model finds plausible (pure scores and LogitsProcessors)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import LogitsProcessor

from steer.config import SteerError
from steer.generation.contrast import relative_top_mask


def guidance_scores(base_logits: Tensor, steered_logits: Tensor, *, alpha: float, gamma: float) -> Tensor:
    """Steering guidance: `log p_base + γ · (log p_steered − log p_base)` on the tokens the base
    model finds plausible (`p_base ≥ α · max p_base`), `−inf` elsewhere; [batch, vocab] each.

    γ = 1 follows the steered model inside the base model's plausible set; γ > 1 extrapolates
    along the steering direction. The plausibility filter keeps the rewrite anchored to what the
    prompted, unedited model would say, which is what protects meaning and fluency.
    """
    base = torch.log_softmax(base_logits.float(), -1)
    steered = torch.log_softmax(steered_logits.float(), -1)
    scores = base + gamma * (steered - base)
    return scores.masked_fill(~relative_top_mask(base, alpha), float("-inf"))


class GroupGuidance(LogitsProcessor):
    """Guidance for several candidates in one batch: each (base, edited, size, α, γ) group pairs
    rows [base, base+size) (unedited) with rows [edited, edited+size) (edited); both get the
    guided scores. Rows outside every group (e.g. the plain prompt candidate) are untouched.
    Both copies get the same scores, so greedy decoding appends the same token to a prompt's two
    copies and they stay in step: the released sNeuron-TST code's masked-vs-unmasked contrast,
    with one model copy and one batched pass instead of two models.
    """

    def __init__(self, groups: Sequence[tuple[int, int, int, float, float]]) -> None:
        for _, _, _, alpha, gamma in groups:
            if not 0 < alpha <= 1:
                raise SteerError(f"`alpha` {alpha} is outside (0, 1]; the paper uses 0.1")
            if gamma < 0:
                raise SteerError(f"`guidance` {gamma} is negative; use 0 (off), 1 (follow the edit) or more")
        self.groups = list(groups)

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        out = scores.clone()
        for base, edited, size, alpha, gamma in self.groups:
            guided = guidance_scores(
                scores[base : base + size], scores[edited : edited + size], alpha=alpha, gamma=gamma
            ).to(scores.dtype)
            out[base : base + size] = guided
            out[edited : edited + size] = guided
        return out
