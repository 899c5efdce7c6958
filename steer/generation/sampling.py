"""Sampling that depends on the text, not on the batch or the process: each text draws its own noise.

`generate(do_sample=True)` draws every row's next token from one shared random stream, so a
text's sample changes with its batch-mates, the batch size, the input order and — when the
inputs are split over processes — with the shard it lands in. Here each row has a generator seeded
from (seed, text), and sampling is done by the Gumbel-max trick: the argmax of
log-probabilities + Gumbel noise is an exact sample from the softmax. Greedy decoding with
this processor last therefore samples from the same distribution as `do_sample=True`
(temperature and top-p applied first by transformers' own warpers), reproducibly per text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch


def text_seed(seed: int, text: str) -> int:
    """A 63-bit seed from the user's seed and the text itself (the same for the same pair anywhere)."""
    digest = hashlib.sha256(f"{seed}\n{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


class PerTextGumbelLogitsProcessor:
    """Logits processor: adds Gumbel(0, 1) noise from row r's own generator to row r's scores, so the
    greedy choice that follows is a sample. Masked scores (−inf, e.g. cut by top-p) stay −inf."""

    def __init__(self, seeds: Sequence[int]) -> None:
        self.generators = [torch.Generator().manual_seed(s) for s in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"{scores.shape[0]} rows but {len(self.generators)} per-text generators")
        tiny = torch.finfo(torch.float32).tiny
        uniform = torch.stack(
            [torch.rand(scores.shape[-1], generator=g, dtype=torch.float32) for g in self.generators]
        ).clamp(tiny, 1.0 - 1e-7)
        noise = -torch.log(-torch.log(uniform))
        return scores.float() + noise.to(scores.device)


def sampling_processors(texts: Sequence[str], settings: Any) -> list[Any]:
    """Temperature, top-p, then a per-text Gumbel draw: a sample that depends on (seed, text) only,
    not on the batch, the order or the process (so sharded runs sample what one process does).
    `settings`: a `TransferSettings` (temperature, top_p, seed)."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    warpers: list[Any] = [TemperatureLogitsWarper(settings.temperature)]
    if settings.top_p < 1:
        warpers.append(TopPLogitsWarper(settings.top_p))
    return [*warpers, PerTextGumbelLogitsProcessor([text_seed(settings.seed, t) for t in texts])]
