"""Steering strength in units that carry across models, calibrated per profile and recorded in it.

One unit of λ is the shift that pushes the model's next-token distribution as hard as λ = 1 pushed
the 135M's, found per direction on the profile's own texts by bisection on a KL divergence.

Why: `shift` adds λ × (target − source mean activation) to the top-k neurons, and what a given λ
does depends on the model — the 135M's λ = 2 reads as a rewrite, the 1.5B's loops ("… a big, big,
biiig army"): at the same λ, the first reply token's KL(p ‖ p_edited) is many times larger on the
1.5B than on the 135M. For each direction the procedure finds λ_κ,
the λ whose shift moves that distribution by `KL` nats on average (small enough to be below
saturation on every model tried), and records λ_κ / `REFERENCE_LAMBDA`, where `REFERENCE_LAMBDA`
is the geometric mean of the 135M formality profile's own λ_κ (where the presets and ladders were
tuned). A profile's unit is the geometric mean over its directions (`StyleProfile.unit`), so the
135M's λ keeps its meaning and every other model's λ is rescaled to the same push. The procedure reads
only the decoding model (the selection side): no classifier, encoder or judge that evaluation
reports with.

A profile whose activations are scaled by a constant gets the same edits: Δ scales by c, the
calibrated λ per unit by 1/c (tests/generation/test_calibration.py).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch

from steer.errors import SteerError
from steer.generation.steerer import Steerer
from steer.model.hooks import NeuronEdit, edit_neurons
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows
from steer.model.prefix import cache_keyword, positions_of, shared_prefix_cache
from steer.profiling.profile import StyleProfile, direction_key
from steer.settings import TransferSettings

logger = logging.getLogger(__name__)

KL = 0.5  # nats: the push a direction's λ_κ gives the first reply token, on average over its texts
# the geometric mean λ_κ of the 135M formality profile's two directions (`TEXTS` training texts each,
# seed 0), found with this procedure, so the 135M keeps unit ≈ 1
REFERENCE_LAMBDA = 0.30506
TEXTS = 16  # texts per direction
_STEPS = 24  # geometric bisection steps: λ to within a factor of about 1.0005
PLATEAU = 1.02  # doubling λ moved the output by less than 2% more: the shift saturates


def _base() -> TransferSettings:
    """The shift the presets steer with (top-k, method, positions), without guidance."""
    return TransferSettings.resolve("guided", guidance=0.0)


class DirectionKL:
    """KL(p ‖ p_edited) of the next token after each text's rewrite prompt, averaged over the texts,
    for the guided recipe's shift at an absolute λ (the profile's calibration not applied). The
    prompts but their last token are prefilled once; each λ costs one token per text."""

    def __init__(self, steerer: Steerer, texts: Sequence[str], source: str, target: str) -> None:
        lm = self.lm = steerer.lm
        self.steerer, self.source, self.target, self.base = steerer, source, target, _base()
        prompts, _ = steerer.encode_prompts(texts, source, target, self.base)
        ids, mask = pad_rows(prompts, lm.tokenizer.pad_token_id, "left")
        self.ids, self.mask = ids.to(lm.device), mask.to(lm.device)  # `steer profile --device cuda` calibrates there
        with torch.inference_mode():
            self.cache = shared_prefix_cache(lm.model, self.ids, self.mask, 1)
            self.plain = self._last(None)

    def _last(self, edit: NeuronEdit | None) -> torch.Tensor:
        ids, mask = self.ids, self.mask
        inputs = {"input_ids": ids, "attention_mask": mask, "position_ids": positions_of(mask)}
        if self.cache is not None:  # the prefilled prompts: feed the last token only, then drop it again
            inputs = {"input_ids": ids[:, -1:], "attention_mask": mask, "position_ids": positions_of(mask)[:, -1:]}
            inputs[cache_keyword()] = self.cache
        if edit is None:
            out = self.lm.model(**inputs)
        else:
            with edit_neurons(self.lm.activation_sites(), edit, "generated", blocks=self.lm.shape_blocks()):
                out = self.lm.model(**inputs)
        if self.cache is not None:
            self.cache.crop(-1)  # drop the last token again
        return torch.log_softmax(out.logits[:, -1].float(), dim=-1)

    def __call__(self, strength: float) -> float:
        edit = self.steerer.build_edit(self.source, self.target, replace(self.base, strength=float(strength)))
        with torch.inference_mode():
            edited = self._last(edit)
        return float((self.plain.exp() * (self.plain - edited)).sum(-1).mean())


def calibrate_direction(steerer: Steerer, texts: Sequence[str], source: str, target: str, kl: float = KL) -> float:
    """The absolute λ whose shift moves the first reply token's distribution by `kl` on average:
    bracketed by doubling (or halving) from λ = 1, then bisected geometrically. Where no λ gets
    there (the shift's effect levels off behind a norm after the MLP, or λ = 1e-6 already passes
    it), the λ reached is returned with a warning: the profile keeps its counts either way."""
    at = DirectionKL(steerer, texts, source, target)
    lo, hi = 1.0, 1.0
    if at(1.0) < kl:
        best = at(hi)
        while best < kl:
            lo, hi = hi, hi * 2
            now = at(hi)
            if hi > 1e6 or now < best * PLATEAU:  # doubling λ no longer moves the output: saturated
                logger.warning(
                    "%s → %s: the shift's effect levels off at KL %.3g, below %g (a norm after the MLP may absorb "
                    "it); λ = %.4g is recorded as this direction's unit — strengths will push less than on other "
                    "models (steer profile --no-calibrate leaves λ as given)",
                    source, target, max(now, best), kl, lo,
                )  # fmt: skip
                return lo
            best = max(best, now)
    else:
        while at(lo) >= kl:
            lo, hi = lo / 2, lo
            if lo < 1e-6:
                logger.warning(
                    "%s → %s: even λ = %.2g moves the output by more than KL %g; that λ is recorded "
                    "(steer profile --no-calibrate leaves λ as given)",
                    source, target, lo, kl,
                )  # fmt: skip
                return lo
    for _ in range(_STEPS):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if at(mid) < kl else (lo, mid)
    return math.sqrt(lo * hi)


def calibrate(
    lm: LoadedModel,
    profile: StyleProfile,
    texts: Mapping[str, Sequence[str]],
    *,
    per_direction: int = TEXTS,
    seed: int = 0,
    kl: float = KL,
    progress: bool = False,
) -> dict[str, float]:
    """λ_κ / `REFERENCE_LAMBDA` for every direction between the profile's styles, each on
    `per_direction` of its source style's `texts` drawn at random (`seed`): {"formal>informal": …};
    the profile's unit is their geometric mean (`StyleProfile.unit`)."""
    from tqdm.auto import tqdm

    raw = Steerer(lm, replace(profile, calibration={}))
    units = {}
    for source in profile.styles:
        if not texts.get(source):
            raise SteerError(f"no {source!r} texts to calibrate on; pass the profile's corpora")
    pairs = [(s, t) for s in profile.styles for t in profile.styles if s != t]
    for source, target in tqdm(pairs, desc="calibrating strength", unit="direction", disable=not progress):
        pool = list(texts[source])
        chosen = random.Random(seed).sample(pool, min(per_direction, len(pool)))
        found = calibrate_direction(raw, chosen, source, target, kl)
        units[direction_key(source, target)] = found / REFERENCE_LAMBDA
        logger.info("%s → %s: λ = %.4g moves the first reply token by KL %g", source, target, found, kl)
    return units
