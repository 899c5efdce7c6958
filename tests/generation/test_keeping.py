"""The keep-words bonus: which tokens it favours, that it stops once a word is said, that it
finishes a word the reply has begun, and that a candidate with it decodes in a shared batch
exactly as alone."""

from __future__ import annotations

import random
from dataclasses import replace

import torch
from conftest import FORMAL, INFORMAL, make_lm, toy_profile

from steer.errors import SteerError
from steer.generation.keeping import content_tokens, marker_tokens
from steer.generation.processors import MarkerPenaltyLogitsProcessor, SourceWordBonusLogitsProcessor
from steer.generation.steerer import Steerer, TransferSettings


def _encode(text: str) -> list[int]:
    """A toy tokenizer: one id per word, the leading space part of the first token's id; "Ink"
    splits after two letters, as SmolLM2's does."""
    vocab = {" cat": 1, "cat": 2, " Cat": 3, "Cat": 4, " sat": 5, "sat": 6, " Sat": 7, "Sat": 8, " the": 9}
    split = {"Ink": [10, 11], "ink": [12], " ink": [13], " Ink": [14]}
    return split.get(text, [vocab.get(text, 99)])


def test_content_tokens_are_the_source_content_words_in_four_spellings() -> None:
    assert content_tokens(_encode, "The cat sat.") == [[[1], [2], [3], [4]], [[5], [6], [7], [8]]]  # per word
    assert content_tokens(_encode, "my ink") == [[[10, 11], [12], [13], [14]]]  # whole spellings, sorted
    assert content_tokens(_encode, "the of and a I") == []  # stop words and one-letter words only
    # a tokenised corpus's clitics and contractions of stop words are not content ("n't" began replies)
    assert content_tokens(_encode, "do n't it 's I 'm don't") == []
    assert content_tokens(_encode, "cat n't") == content_tokens(_encode, "cat")  # the same rule as `kept`
    assert len(content_tokens(_encode, "42 cats")) == 2  # numbers of two digits or more are content


def test_bonus_goes_to_unsaid_words_only_and_rows_without_one_are_unchanged() -> None:
    scores = torch.randn(3, 12)
    prompt = torch.tensor([[9, 9], [9, 9], [9, 9]])
    words = [[[1]], [[5]]]  # two one-spelling, one-token words
    bonus = SourceWordBonusLogitsProcessor(2, [words, words, words], [2.0, 2.0, 0.0])
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
    words = [[[[1], [2], [3]], [[3], [4]], [[5], [6]]]]  # word 0 spelled 1/2/3, word 1 3/4 (shares 3), word 2
    bonus = SourceWordBonusLogitsProcessor(1, words, [2.0])
    fresh = bonus(torch.tensor([[9]]), scores)
    assert fresh[0].tolist() == [0, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0]  # token 3 once, though two words
    after = bonus(torch.tensor([[9, 2]]), scores)  # word 0 said as token 2
    assert after[0].tolist() == [0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 0]  # 1 and 2 retired; 3 still begins word 1
    both = bonus(torch.tensor([[9, 3]]), scores)  # token 3 spells words 0 and 1: both said
    assert both[0].tolist() == [0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 0]


def test_a_word_the_reply_has_begun_is_finished_not_turned_into_another() -> None:
    """'ink' spelled In+k: once the reply ends with `In` (10), `k` (11) is favoured, the word is
    retired as begun, and once the spelling is whole nothing more is owed for it."""
    words = [content_tokens(_encode, "ink")]  # spellings [10, 11], [12], [13], [14]
    bonus = SourceWordBonusLogitsProcessor(1, words, [4.0])
    scores = torch.zeros(1, 16)
    fresh = bonus(torch.tensor([[9]]), scores)[0]
    assert fresh.nonzero().flatten().tolist() == [10, 12, 13, 14]  # first tokens only
    begun = bonus(torch.tensor([[9, 10]]), scores)[0]
    assert begun.nonzero().flatten().tolist() == [11] and begun[11] == 4.0  # finish it, and nothing else
    whole = bonus(torch.tensor([[9, 10, 11]]), scores)[0]
    assert not whole.any()
    later = bonus(torch.tensor([[9, 10, 11, 5, 10]]), scores)[0]  # the reply ends with `In` again
    assert later.nonzero().flatten().tolist() == [11]


def test_completion_follows_every_prefix_length_and_rows_stay_separate() -> None:
    """A three-token spelling is followed after its first one and first two tokens; a row whose
    reply ends with another row's prefix gets nothing from it."""
    words = [[[[3, 4, 5]]], [[[6]]]]  # row 0: one word spelled 3 4 5; row 1: one word spelled 6
    bonus = SourceWordBonusLogitsProcessor(1, words, [1.0, 1.0])
    scores = torch.zeros(2, 8)
    out = bonus(torch.tensor([[0, 3, 4], [0, 3, 4]]), scores)
    assert out[0].nonzero().flatten().tolist() == [5] and out[1].nonzero().flatten().tolist() == [6]
    out = bonus(torch.tensor([[0, 7, 3], [0, 6, 3]]), scores)
    assert out[0].nonzero().flatten().tolist() == [4] and not out[1].any()  # row 1 said its word


def _reference(
    prompt_length: int, words: list[list[list[list[int]]]], bonus: list[float], ids: torch.Tensor, scores: torch.Tensor
) -> torch.Tensor:
    """The rule, written plainly: per row, first tokens of unbegun words, and the next token of
    every spelling the reply ends partway through; each token once."""
    out = scores.clone()
    for row, (row_words, beta) in enumerate(zip(words, bonus, strict=True)):
        reply = ids[row, prompt_length:].tolist()
        owed = set()
        for spellings in row_words if beta else []:
            begun = any(s[0] in reply for s in spellings)
            for s in spellings:
                owed |= set() if begun else {s[0]}
                owed |= {s[j] for j in range(1, len(s)) if len(reply) >= j and reply[len(reply) - j :] == s[:j]}
        for token in owed:
            out[row, token] += beta
    return out


def test_the_bonus_equals_the_plain_rule_on_random_words_and_replies() -> None:
    rng = random.Random(0)
    for _ in range(100):
        rows, vocab, prompt = rng.randint(1, 4), 10, rng.randint(1, 3)
        words = [
            [[[rng.randrange(vocab) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 3))]
             for _ in range(rng.randint(0, 3))]
            for _ in range(rows)
        ]  # fmt: skip
        bonus = [rng.choice([0.0, 1.5, 4.0]) for _ in range(rows)]
        processor = SourceWordBonusLogitsProcessor(prompt, words, bonus)
        for length in range(6):
            ids = torch.tensor([[rng.randrange(vocab) for _ in range(prompt + length)] for _ in range(rows)])
            scores = torch.randn(rows, vocab)
            assert torch.equal(processor(ids, scores), _reference(prompt, words, bonus, ids, scores))


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


def test_marker_tokens_spell_the_sources_marker_words_only() -> None:
    assert marker_tokens(_encode, "my ink, the cat", {"ink"}) == [[10, 11], [12], [13], [14]]  # "ink" spelled 4 ways
    assert marker_tokens(_encode, "my ink, the cat", set()) == []
    assert marker_tokens(_encode, "the cats sat", {"cat"}) == [[99]]  # "cats", "Cats": unknown to the toy vocabulary


def test_marker_penalty_lowers_a_marker_whenever_the_reply_could_finish_it() -> None:
    """One-token spellings are lowered at every step, never retired; a two-token spelling's last
    token only once the reply ends with its first; a row with a penalty of 0 is left alone."""
    spellings = [[12], [13], [10, 11]]  # ink, " ink", In+k
    penalty = MarkerPenaltyLogitsProcessor(1, [spellings, spellings], [4.0, 0.0])
    scores = torch.zeros(2, 16)
    fresh = penalty(torch.tensor([[9], [9]]), scores)
    assert fresh[0].nonzero().flatten().tolist() == [12, 13] and (fresh[0, [12, 13]] == -4.0).all()
    assert not fresh[1].any()
    begun = penalty(torch.tensor([[9, 10], [9, 10]]), scores)[0]
    assert begun.nonzero().flatten().tolist() == [11, 12, 13]
    again = penalty(torch.tensor([[9, 13, 12], [9, 13, 12]]), scores)[0]  # said twice: still lowered
    assert again.nonzero().flatten().tolist() == [12, 13]
    assert not torch.equal(fresh, scores)  # a new tensor; the scores are not edited in place


def test_the_marker_penalty_equals_the_plain_rule_on_random_spellings_and_replies() -> None:
    rng = random.Random(1)
    for _ in range(100):
        rows, vocab, prompt = rng.randint(1, 4), 10, rng.randint(1, 3)
        spellings = [
            [[rng.randrange(vocab) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(0, 3))]
            for _ in range(rows)
        ]
        beta = [rng.choice([0.0, 2.0]) for _ in range(rows)]
        processor = MarkerPenaltyLogitsProcessor(prompt, spellings, beta)
        for length in range(5):
            ids = torch.tensor([[rng.randrange(vocab) for _ in range(prompt + length)] for _ in range(rows)])
            scores = torch.randn(rows, vocab)
            expected = scores.clone()
            for row in range(rows):
                reply = ids[row, prompt:].tolist()
                lowered = {
                    s[-1]
                    for s in spellings[row]
                    if len(reply) >= len(s) - 1 and reply[len(reply) - len(s) + 1 :] == s[:-1]
                }
                for token in lowered if beta[row] else ():
                    expected[row, token] -= beta[row]
            assert torch.equal(processor(ids, scores), expected)
