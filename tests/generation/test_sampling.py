"""Sampling (`steer.generation.sampling`): per-text Gumbel draws follow the softmax."""

from __future__ import annotations

import torch


def test_gumbel_argmax_draws_from_the_softmax() -> None:
    """The reference: the frequencies of 4000 per-row draws match softmax(scores) within 0.03."""
    from steer.generation.sampling import PerTextGumbelLogitsProcessor

    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    scores = probs.log().expand(4000, 4).clone()
    scores[:, 3] = float("-inf")  # a token cut by top-p is never drawn
    picks = PerTextGumbelLogitsProcessor(range(4000))(torch.zeros(4000, 1, dtype=torch.long), scores).argmax(-1)
    frequencies = torch.bincount(picks, minlength=4).float() / 4000
    torch.testing.assert_close(frequencies[:3], probs[:3] / probs[:3].sum(), atol=0.03, rtol=0)
    assert frequencies[3] == 0
