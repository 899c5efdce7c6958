"""Instruction contrast: each text decoded under the direction's instruction and under a neutral one
in one batch, pushed apart inside the prompted model's plausible tokens — equal to a reference
computation, invariant to batch and padding, a no-op at γ 0."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from steer.errors import SteerError
from steer.generation.contrast import relative_top_mask
from steer.generation.processors import InstructionContrastLogitsProcessor
from steer.generation.steerer import Steerer
from steer.labels import describe
from steer.prompts import NEUTRAL, render_prompt
from steer.settings import TransferSettings
from tests.conftest import FORMAL, make_lm

# the guards off and a fixed length, so the reference below needs no stopping rule
BARE_STEPS = {"loop_guard": False, "echo_guard": False, "clean": False, "max_new_tokens": 6, "min_new_tokens": 6}


def _tokens(results: list[Any]) -> list[list[int]]:
    return [r.info["token_ids"] for r in results]


@pytest.fixture(scope="module")
def steerer() -> Steerer:
    return Steerer(make_lm("llama"))


def test_gamma_zero_is_the_plain_prompt_token_for_token(steerer: Steerer) -> None:
    plain = TransferSettings.preset("prompt", max_new_tokens=8)
    off = TransferSettings.preset("prompt", max_new_tokens=8, instruction_contrast=0.0, neutral="repeat")
    assert _tokens(steerer.transfer(FORMAL[:4], "formal", "informal", off)) == _tokens(
        steerer.transfer(FORMAL[:4], "formal", "informal", plain)
    )


def test_the_processor_at_gamma_zero_keeps_every_greedy_choice() -> None:
    torch.manual_seed(0)
    scores = torch.randn(6, 50)
    out = InstructionContrastLogitsProcessor([(0, 3, 3, 0.1, 0.0)])(torch.zeros(6, 1, dtype=torch.long), scores)
    assert torch.equal(out[:3].argmax(-1), scores[:3].argmax(-1))
    assert torch.equal(out[:3], out[3:])  # both copies get the same scores, so they stay in step


def test_the_processor_pushes_away_from_the_neutral_rows_inside_the_plausible_set() -> None:
    base = torch.tensor([[2.0, 1.9, -5.0, 0.0]])
    neutral = torch.tensor([[3.0, 0.0, -5.0, 0.0]])  # the neutral request prefers token 0 much more
    out = InstructionContrastLogitsProcessor([(0, 1, 1, 0.5, 1.0)])(torch.zeros(2, 1), torch.cat([base, neutral]))
    assert int(out[0].argmax()) == 1  # the token the instruction prefers over the neutral request
    plausible = relative_top_mask(torch.log_softmax(base, -1), 0.5)[0]
    assert torch.isinf(out[0][~plausible]).all() and torch.isfinite(out[0][plausible]).all()
    with pytest.raises(SteerError, match="negative"):
        InstructionContrastLogitsProcessor([(0, 1, 1, 0.5, -1.0)])


def _reference(steerer: Steerer, text: str, gamma: float, alpha: float, neutral: str) -> list[int]:
    """Greedy decoding by hand: the instructed and the neutral prompt run separately and whole each
    step (no cache, no batch); the next token is argmax of log p + γ(log p − log p_neutral) on the
    tokens with p ≥ α·max p, EOS held back as `min_new_tokens` does."""
    lm, tok = steerer.lm, steerer.lm.tokenizer
    settings = TransferSettings.preset("prompt")
    instructed = steerer.encode_prompts([text], "formal", "informal", settings)[0][0]
    other_ids = steerer.encode_prompts([text], "formal", "informal", settings, neutral=neutral)[0][0]
    template, opening = NEUTRAL[neutral]
    chat = bool(getattr(tok, "chat_template", None))
    rendered = render_prompt(tok, template, text, "formal", "informal", opening)
    assert other_ids == tok(rendered, add_special_tokens=not chat)["input_ids"]  # the neutral template and opening
    eos = steerer._eos_token_id()
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    new: list[int] = []
    for _ in range(BARE_STEPS["max_new_tokens"]):
        with torch.no_grad():
            a = lm.model(torch.tensor([instructed + new])).logits[0, -1].float()
            b = lm.model(torch.tensor([other_ids + new])).logits[0, -1].float()
        a[eos], b[eos] = float("-inf"), float("-inf")
        la, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
        scores = (la + gamma * (la - lb)).masked_fill(~relative_top_mask(la[None], alpha)[0], float("-inf"))
        new.append(int(scores.argmax()))
    return new


@pytest.mark.parametrize("neutral", ["paraphrase", "repeat"])
def test_the_contrast_equals_a_reference_computation(steerer: Steerer, neutral: str) -> None:
    settings = TransferSettings.resolve("prompt", instruction_contrast=1.5, alpha=0.2, neutral=neutral, **BARE_STEPS)
    got = _tokens(steerer.transfer(FORMAL[:3], "formal", "informal", settings))
    assert got == [_reference(steerer, t, 1.5, 0.2, neutral) for t in FORMAL[:3]]


def test_the_two_rows_decode_in_one_batch_as_they_decode_alone(steerer: Steerer) -> None:
    """Batch size, padding and batch-mates (a plain candidate, a guided one) change no token."""
    contrasted = TransferSettings.resolve("prompt", instruction_contrast=2.0, max_new_tokens=8)
    alone = [_tokens(steerer.transfer([t], "formal", "informal", contrasted))[0] for t in FORMAL[:5]]
    assert _tokens(steerer.transfer(FORMAL[:5], "formal", "informal", contrasted)) == alone
    plain = TransferSettings.preset("prompt", max_new_tokens=8)
    together = steerer.transfer_candidates(FORMAL[:5], "formal", "informal", [plain, contrasted])
    assert _tokens(together[1]) == alone
    assert _tokens(together[0]) == _tokens(steerer.transfer(FORMAL[:5], "formal", "informal", plain))
    assert all("contrast_filtered" in r.info for r in together[1])


def test_settings_refuse_what_cannot_combine() -> None:
    with pytest.raises(SteerError, match="cannot be combined"):
        TransferSettings.preset("guided", instruction_contrast=1.0)
    with pytest.raises(SteerError, match="cannot be combined"):
        TransferSettings.preset("paper", instruction_contrast=1.0)
    with pytest.raises(SteerError, match="`neutral` 'nothing' is not valid; choose one of paraphrase, repeat"):
        TransferSettings.preset("prompt", instruction_contrast=1.0, neutral="nothing")
    with pytest.raises(SteerError, match="between 0"):
        TransferSettings.preset("prompt", instruction_contrast=-1.0)
    shown = describe(TransferSettings.preset("prompt", instruction_contrast=1.0))
    assert shown == "prompt + instruction contrast γ=1 α=0.1 (paraphrase)"
