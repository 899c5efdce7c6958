"""Fluency (`steer.scoring.fluency`): perplexity against a reference, per-sentence fluency calibrated on the sources."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from steer.scoring.fluency import perplexity, sentence_fluency


def test_perplexity_equals_reference(llama_lm: Any) -> None:
    texts = ["hey dude send it", "thou shalt not", "i would be grateful if you could reply ."]
    nll, n = 0.0, 0
    for t in texts:
        ids = torch.tensor([llama_lm.tokenizer(t)["input_ids"]])
        with torch.no_grad():
            logits = llama_lm.model(input_ids=ids).logits
        nll += torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum").item()
        n += ids.shape[1] - 1
    assert perplexity(llama_lm, texts, batch_size=2) == pytest.approx(math.exp(nll / n), rel=1e-5)


def test_sentence_fluency_is_calibrated_on_the_sources() -> None:
    sources = [(2.0, 2), (4.0, 2), (6.0, 2)]  # mean NLL 1, 2, 3 → reference 2
    outputs = ["as fluent", "worse", "better", "", "ha ha ha", "x"]
    nll = [(4.0, 2), (6.0, 2), (2.0, 2), (0.0, 0), (2.0, 2), (0.0, 0)]
    fluency = sentence_fluency(outputs, nll, sources)
    assert fluency == pytest.approx([1.0, math.exp(-1.0), 1.0, 0.0, 0.0, 0.0])
