"""Loops (`steer.scoring.loops`) on hand-made strings and in trimmed outputs of the tiny model."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FORMAL, INFORMAL, make_lm, toy_profile

from steer.generation.steerer import Steerer, TransferSettings
from steer.scoring.loops import has_loop, third_copy_tokens, trim_loop


@pytest.mark.parametrize(
    ("text", "loops"),
    [
        ("I'd love to hear your response to a friendly friendly friendly friendly", True),
        ("Ha ha ha", True),
        ("no, NO. No!", True),  # case and punctuation do not hide a repeated word
        ('The sentence should be rephrased to: "The sentence should be rephrased to: "The sentence should', True),
        ("a b c a b c a b c", True),  # 3-grams: 7, distinct 3 → 0.43
        ("very very good", False),  # two in a row is language
        ("we met, we talked, we left", False),
        ("one two three one two three", False),  # a phrase twice: 4 3-grams, 3 distinct = 0.75
        ("", False),
        (None, False),
    ],
)
def test_has_loop_on_hand_made_strings(text: str | None, loops: bool) -> None:
    assert has_loop(text) is loops


def test_third_copy_tokens_hand_made() -> None:
    assert third_copy_tokens([5, 7, 7], 16) == {7}
    assert third_copy_tokens([1, 2, 3, 1, 2, 3], 16) == {1}
    assert third_copy_tokens([1, 2, 3, 1, 2], 16) == set()
    assert third_copy_tokens([1, 2, 3, 1, 2, 3], 2) == set()  # unit longer than max_unit
    keys = {10: "ha", 11: "ha", 12: "x"}
    assert third_copy_tokens([12, 10, 11], 4, keys.__getitem__) == {10, 11}  # "Ha ha": both spellings


@pytest.mark.parametrize(
    ("text", "trimmed"),
    [
        ("The city is lit.", "The city is lit."),
        ("a friendly friendly friendly friendly", "a friendly friendly"),
        (
            "I was quite the fashionista and I was very sexy. I was very sexy and I was very sexy. I was very sexy.",
            "I was quite the fashionista and I was very sexy. I was very sexy and I was very sexy.",
        ),
        ("ok ok ok", "ok ok"),
        ("", ""),
    ],
)
def test_trim_loop_cuts_before_the_loop(text: str, trimmed: str) -> None:
    assert trim_loop(text) == trimmed
    assert not has_loop(trim_loop(text))


def test_trimmed_outputs_never_loop_on_the_tiny_model() -> None:
    lm = make_lm("llama")
    steerer = Steerer(lm, toy_profile(lm))
    texts = FORMAL + INFORMAL
    common: dict[str, Any] = dict(max_new_tokens=24, min_new_tokens=24)
    free = steerer.transfer(texts, "formal", "informal", TransferSettings.preset("prompt", loop_guard=False, **common))
    guarded = steerer.transfer(texts, "formal", "informal", TransferSettings.preset("prompt", **common))
    assert any(has_loop(r.output) for r in free)  # tiny random models loop ("the the the")
    assert not any(has_loop(r.output) for r in guarded)
