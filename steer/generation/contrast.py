"""Contrastive layer decoding (the paper's DoLa variant) as pure functions and a LogitsProcessor.

For each row, early-exit distributions of a few candidate "style layers" are compared with the
final distribution; the candidate with the largest Jensen–Shannon divergence is the premature
layer, and the next-token score is `log p_final − β · log p_premature` on the tokens that pass
the relative-top filter (`p_final ≥ α · max p_final`), `−inf` elsewhere. β = 1 is the paper.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from steer.errors import SteerError
from steer.layers import LAYER_FORMS, check_layer_syntax, layer_spec  # noqa: F401  (re-exported)
from steer.settings import check_alpha_beta  # noqa: F401  (re-exported)


def relative_top_mask(final_logprobs: Tensor, alpha: float) -> Tensor:
    """Bool [batch, vocab]: tokens whose final probability is at least `alpha` × the row's max."""
    threshold = final_logprobs.max(-1, keepdim=True).values + torch.log(torch.tensor(alpha, dtype=final_logprobs.dtype))
    return final_logprobs >= threshold


def js_divergence(final_logprobs: Tensor, candidate_logprobs: Tensor) -> Tensor:
    """Jensen–Shannon divergence (natural log) between a final distribution [batch, vocab] and
    each candidate [layers, batch, vocab] → [layers, batch].

    Written as ½(Σp log p + Σq log q) − Σm log m with m = (p+q)/2, which needs one logarithm
    per element instead of four; `xlogy` keeps 0·log 0 = 0.
    """
    p = final_logprobs.exp()
    q = candidate_logprobs.exp()
    q_term = torch.where(q > 0, q * candidate_logprobs, torch.zeros_like(q)).sum(-1)
    m = q.add_(p).mul_(0.5)  # our own temporary, reused to save a [layers, batch, vocab] allocation
    m_term = torch.special.xlogy(m, m).sum(-1)
    p_term = torch.special.xlogy(p, p).sum(-1)
    return 0.5 * (p_term + q_term) - m_term


def contrast_scores(
    final_logits: Tensor, premature_logits: Tensor, *, alpha: float, beta: float
) -> tuple[Tensor, Tensor]:
    """Contrast final [batch, vocab] with candidates [layers, batch, vocab].

    Returns (scores [batch, vocab], chosen candidate index per row [batch]). Each row picks its
    own premature layer, so a row's scores do not depend on the rest of the batch.
    """
    final = torch.log_softmax(final_logits.float(), -1)
    candidates = torch.log_softmax(premature_logits.float(), -1)
    divergence = js_divergence(final, candidates)  # [layers, batch]
    chosen = divergence.argmax(0)
    premature = candidates[chosen, torch.arange(final.shape[0], device=final.device)]
    scores = final - beta * premature
    return scores.masked_fill(~relative_top_mask(final, alpha), float("-inf")), chosen


def default_contrast_layers(num_layers: int, count: int = 4) -> list[int]:
    """The `count` blocks just before the final one (the paper's "style layers")."""
    return list(range(max(0, num_layers - 1 - count), num_layers - 1))


def parse_layers(
    spec: str | Sequence[int] | None, num_layers: int, *, option: str = "`contrast_layers`", last_allowed: bool = False
) -> list[int]:
    """Layers from `"24,26"`, `"20-28"`, `"last:6"` (the six final blocks), a list, or None (the
    default contrast candidates). Contrast candidates exclude the final block; edits may use it.
    The syntax is `layer_spec`'s; here each layer is checked against the model's blocks."""
    if spec is None or spec == "":
        return default_contrast_layers(num_layers)
    top = num_layers - 1 if last_allowed else num_layers - 2
    count, layers = layer_spec(spec, option)
    if count is not None:
        if count > top + 1:
            raise SteerError(f"{option} {spec!r} is out of range; use last:N with N in 1..{top + 1}")
        return list(range(top + 1 - count, top + 1))
    bad = [x for x in layers if not 0 <= x <= top]
    if bad or not layers:
        why = "" if last_allowed else " and the last one is the final layer"
        raise SteerError(
            f"{option} {spec!r} is out of range; layers must be in 0..{top} (the model has {num_layers} blocks{why})"
        )
    return sorted(set(layers))


class EarlyExit:
    """hidden → logits through a model's own final norm and LM head, for the premature layers of
    layer contrast. With `dtype="bfloat16"` (or `"auto"` on hardware with fast bfloat16) the
    LM-head product runs on a cached bfloat16 copy of its weight (faster on CPUs with bf16
    units); the norm, softmaxes and scores stay in float32. `lm` is a `steer.model.loading.LoadedModel`."""

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self._bf16_head: tuple[Any, Tensor] | None = None

    def __call__(self, dtype: str) -> Callable[[Tensor], Tensor]:
        lm = self.lm
        head = lm.module(lm.arch.lm_head)
        cap = getattr(lm.model.config, "final_logit_softcapping", None)
        if dtype == "auto":
            dtype = "bfloat16" if bf16_is_fast(lm.device) else "float32"
        weight = None
        if dtype == "bfloat16" and isinstance(head, torch.nn.Linear):
            key = (head.weight.data_ptr(), str(head.weight.device))
            if self._bf16_head is None or self._bf16_head[0] != key:
                self._bf16_head = (key, head.weight.detach().to(torch.bfloat16))
            weight = self._bf16_head[1]

        def early_exit(hidden: Tensor) -> Tensor:
            normed = lm.head_input(hidden)
            if weight is not None:
                logits = torch.nn.functional.linear(normed.to(torch.bfloat16), weight).float()
                if head.bias is not None:
                    logits = logits + head.bias.float()
            else:
                logits = head(normed)
            return torch.tanh(logits / cap) * cap if cap else logits

        return early_exit


def bf16_is_fast(device: torch.device) -> bool:
    """bfloat16 matmuls are fast on CUDA and on CPUs with native bf16 support (AVX512-BF16/AMX)."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def guidance_parts(base_logits: Tensor, steered_logits: Tensor, *, gamma: float) -> tuple[Tensor, Tensor]:
    """(log p_base, `log p_base + γ · (log p_steered − log p_base)`) for every token, before the
    plausibility filter (`guidance_scores` applies it; the guidance processor also counts what it changed)."""
    base = torch.log_softmax(base_logits.float(), -1)
    steered = torch.log_softmax(steered_logits.float(), -1)
    return base, base + gamma * (steered - base)


def guidance_scores(base_logits: Tensor, steered_logits: Tensor, *, alpha: float, gamma: float) -> Tensor:
    """Steering guidance: `log p_base + γ · (log p_steered − log p_base)` on the tokens the base
    model finds plausible (`p_base ≥ α · max p_base`), `−inf` elsewhere; [batch, vocab] each.

    γ = 1 follows the steered model inside the base model's plausible set; γ > 1 extrapolates
    along the steering direction. The plausibility filter keeps the rewrite anchored to what the
    prompted, unedited model would say, which is what protects meaning and fluency.
    """
    base, scores = guidance_parts(base_logits, steered_logits, gamma=gamma)
    return scores.masked_fill(~relative_top_mask(base, alpha), float("-inf"))
