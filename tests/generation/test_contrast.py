"""Contrastive layer decoding on hand-made logits."""

from __future__ import annotations

import math

import pytest
import torch

from steer.errors import SteerError
from steer.generation.contrast import (
    contrast_scores,
    default_contrast_layers,
    guidance_scores,
    js_divergence,
    parse_layers,
    relative_top_mask,
)
from steer.generation.processors import GuidanceLogitsProcessor, LayerContrastLogitsProcessor


def test_relative_top_mask_keeps_tokens_within_alpha_of_max() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.06, 0.04, 0.1]])
    mask = relative_top_mask(probs.log(), alpha=0.1)
    assert mask.tolist() == [[True, True, True, False, True]]  # 0.05 is the bar
    assert relative_top_mask(probs.log(), alpha=1.0).tolist() == [[True, False, False, False, False]]


def test_js_divergence_matches_hand_computation() -> None:
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.0, 0.5, 0.5])
    # m = (.25, .5, .25); KL(p||m) = KL(q||m) = .5·ln(.5/.25) + .5·ln(.5/.5) = .5·ln 2; JS is their mean.
    assert js_divergence(p.log(), q.log()[None]).item() == pytest.approx(0.5 * math.log(2))
    assert js_divergence(p.log(), p.log()[None]).item() == pytest.approx(0.0, abs=1e-7)


def test_each_row_picks_its_own_layer_and_scores_follow_the_formula() -> None:
    final = torch.tensor([[3.0, 2.0, 0.0, -5.0], [0.0, 3.0, 2.5, -5.0]])
    close = final.clone()  # candidate 0: identical to the final layer → divergence 0
    far = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 3.0, 2.5, -5.0]])  # far from row 0, equal to row 1
    premature = torch.stack([close, far])
    scores, chosen = contrast_scores(final, premature, alpha=0.1, beta=1.0)
    assert chosen.tolist() == [1, 0]
    lf, lp = torch.log_softmax(final, -1), torch.log_softmax(premature, -1)
    keep = lf >= lf.max(-1, keepdim=True).values + math.log(0.1)
    expected = torch.where(keep, lf - torch.stack([lp[1, 0], lp[0, 1]]), torch.tensor(float("-inf")))
    assert torch.allclose(scores, expected)
    assert torch.isinf(scores[0, 3]) and torch.isinf(scores[1, 3])


def test_beta_zero_keeps_the_final_ranking_inside_the_filter() -> None:
    final = torch.randn(3, 11, generator=torch.Generator().manual_seed(0))
    premature = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(1))
    scores, _ = contrast_scores(final, premature, alpha=0.05, beta=0.0)
    assert torch.equal(scores.argmax(-1), final.argmax(-1))


def test_row_alone_equals_row_in_batch() -> None:
    gen = torch.Generator().manual_seed(2)
    final, premature = torch.randn(5, 13, generator=gen), torch.randn(3, 5, 13, generator=gen)
    batch, chosen = contrast_scores(final, premature, alpha=0.1, beta=0.7)
    for row in range(5):
        alone, c = contrast_scores(final[row : row + 1], premature[:, row : row + 1], alpha=0.1, beta=0.7)
        assert torch.equal(alone[0], batch[row]) and c.item() == chosen[row].item()


def test_processor_uses_captured_hidden_states() -> None:
    head = torch.nn.Linear(4, 6, bias=False)
    hidden = {1: torch.randn(2, 4), 2: torch.randn(2, 4)}
    processor = LayerContrastLogitsProcessor(hidden, [1, 2], head, alpha=0.2, beta=0.5)
    scores = torch.randn(2, 6)
    out = processor(torch.zeros(2, 3, dtype=torch.long), scores)
    with torch.no_grad():
        expected, chosen = contrast_scores(scores, torch.stack([head(hidden[1]), head(hidden[2])]), alpha=0.2, beta=0.5)
    assert torch.equal(out, expected) and torch.equal(processor.chosen[0], chosen)


def test_layer_parsing_and_validation() -> None:
    assert default_contrast_layers(30) == [25, 26, 27, 28]
    assert parse_layers(None, 30) == [25, 26, 27, 28]
    assert parse_layers("20-22,27", 30) == [20, 21, 22, 27]
    for bad in ["29", "-1", "5-40", "x"]:
        with pytest.raises(SteerError, match="`contrast_layers`"):
            parse_layers(bad, 30)
    for alpha, beta in [(0.0, 1.0), (1.5, 1.0), (0.1, -1.0)]:
        with pytest.raises(SteerError, match="`alpha`|`beta`"):
            LayerContrastLogitsProcessor({}, [0], torch.nn.Identity(), alpha=alpha, beta=beta)


def test_guidance_scores_follow_the_formula() -> None:
    torch.manual_seed(0)
    base, steered = torch.randn(3, 11), torch.randn(3, 11)
    lb, ls = torch.log_softmax(base, -1), torch.log_softmax(steered, -1)
    keep = relative_top_mask(lb, 0.2)
    for gamma in (0.0, 1.0, 2.5):
        got = guidance_scores(base, steered, alpha=0.2, gamma=gamma)
        expected = torch.where(keep, lb + gamma * (ls - lb), torch.full_like(lb, float("-inf")))
        torch.testing.assert_close(got, expected)
    assert torch.equal(guidance_scores(base, steered, alpha=0.2, gamma=0.0).argmax(-1), base.argmax(-1))


def test_group_guidance_gives_both_copies_the_same_scores_and_leaves_other_rows() -> None:
    torch.manual_seed(1)
    scores = torch.randn(5, 9)  # rows 0-1 unedited, 2-3 edited, row 4 outside every group
    out = GuidanceLogitsProcessor([(0, 2, 2, 0.1, 1.5)])(torch.zeros(5, 1, dtype=torch.long), scores)
    assert torch.equal(out[:2], out[2:4]) and torch.equal(out[4], scores[4])
    torch.testing.assert_close(out[:2], guidance_scores(scores[:2], scores[2:4], alpha=0.1, gamma=1.5))
    with pytest.raises(SteerError, match="`guidance`"):
        GuidanceLogitsProcessor([(0, 2, 2, 0.1, -1.0)])
