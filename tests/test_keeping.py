"""The keep-words bonus: which tokens it favours, that it stops once a word is said, and that a
candidate with it decodes in a shared batch exactly as alone."""

from __future__ import annotations

from dataclasses import replace

import torch
from conftest import FORMAL, INFORMAL, make_lm, toy_profile

from steer.config import SteerError
from steer.generation.keeping import SourceWordBonus, content_tokens
from steer.generation.steerer import Steerer, TransferSettings


def _encode(text: str) -> list[int]:
    """A toy tokenizer: one id per word, the leading space part of the first token's id."""
    vocab = {" cat": 1, "cat": 2, " Cat": 3, "Cat": 4, " sat": 5, "sat": 6, " Sat": 7, "Sat": 8, " the": 9}
    return [vocab.get(text, 99)]


def test_content_tokens_are_the_first_tokens_of_the_source_content_words_in_four_spellings() -> None:
    assert content_tokens(_encode, "The cat sat.") == [[1, 2, 3, 4], [5, 6, 7, 8]]  # one list per word
    assert content_tokens(_encode, "the of and a I") == []  # stop words and one-letter words only
    # a tokenised corpus's clitics and contractions of stop words are not content ("n't" began replies)
    assert content_tokens(_encode, "do n't it 's I 'm don't") == []
    assert content_tokens(_encode, "cat n't") == content_tokens(_encode, "cat")  # the same rule as `kept`
    assert len(content_tokens(_encode, "42 cats")) == 2  # numbers of two digits or more are content


def test_bonus_goes_to_unsaid_words_only_and_rows_without_one_are_unchanged() -> None:
    scores = torch.randn(3, 12)
    prompt = torch.tensor([[9, 9], [9, 9], [9, 9]])
    bonus = SourceWordBonus(2, [[[1], [5]], [[1], [5]], [[1], [5]]], [2.0, 2.0, 0.0])
    out = bonus(prompt, scores)
    expected = scores.clone()
    expected[0, [1, 5]] += 2.0
    expected[1, [1, 5]] += 2.0
    assert torch.equal(out, expected)
    said = torch.cat([prompt, torch.tensor([[5], [7], [1]])], dim=1)  # row 0 has said token 5
    out = bonus(said, scores)
    assert torch.equal(out[0], scores[0] + torch.nn.functional.one_hot(torch.tensor(1), 12) * 2.0)
    assert torch.equal(out[1], expected[1]) and torch.equal(out[2], scores[2])
    assert not torch.equal(scores, out)  # scores are not edited in place: a new tensor
    assert torch.equal(bonus(prompt, scores), expected)


def test_a_word_said_in_one_spelling_is_no_longer_favoured_in_any() -> None:
    """'Dude, Dude dude': saying ' dude' retires 'Dude' and ' Dude' too; a token that begins a
    second, unsaid word stays favoured, and is added once, not once per word."""
    scores = torch.zeros(1, 12)
    words = [[[1, 2, 3], [3, 4], [5, 6]]]  # word 0 spelled 1/2/3, word 1 spelled 3/4 (shares 3), word 2
    bonus = SourceWordBonus(1, words, [2.0])
    fresh = bonus(torch.tensor([[9]]), scores)
    assert fresh[0].tolist() == [0, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0]  # token 3 once, though two words
    after = bonus(torch.tensor([[9, 2]]), scores)  # word 0 said as token 2
    assert after[0].tolist() == [0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 0]  # 1 and 2 retired; 3 still begins word 1
    both = bonus(torch.tensor([[9, 3]]), scores)  # token 3 spells words 0 and 1: both said
    assert both[0].tolist() == [0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0]


def test_keep_words_zero_is_a_no_op_and_a_bonus_decodes_the_same_in_a_shared_batch() -> None:
    lm = make_lm("llama")
    steerer = Steerer(lm, toy_profile(lm))
    texts = FORMAL + INFORMAL
    base = TransferSettings.preset("guided", top_k="10%", max_new_tokens=8, batch_size=4, strength=3.0)
    kept = replace(base, keep_words=4.0)
    plain = TransferSettings.bare(mode="prompt", max_new_tokens=8, batch_size=4)
    together = steerer.transfer_candidates(texts, "formal", "informal", [plain, base, kept])
    alone = [steerer.transfer(texts, "formal", "informal", c) for c in (plain, base, kept)]
    for a, b in zip(together, alone, strict=True):
        assert [r.info["token_ids"] for r in a] == [r.info["token_ids"] for r in b]
    assert [r.info["token_ids"] for r in together[2]] != [r.info["token_ids"] for r in together[1]]
    zero = steerer.transfer(texts, "formal", "informal", replace(base, keep_words=0.0))
    assert [r.info["token_ids"] for r in zero] == [r.info["token_ids"] for r in alone[1]]


def test_keep_words_must_be_a_finite_non_negative_number() -> None:
    for bad in (-1.0, float("nan")):
        try:
            TransferSettings(keep_words=bad)
        except SteerError as err:
            assert "keep_words" in str(err)
        else:
            raise AssertionError(f"keep_words={bad} was accepted")
