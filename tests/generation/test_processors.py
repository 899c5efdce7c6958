"""The logits processors (`steer.generation.processors`), also with plain `generate()`."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import FORMAL, INFORMAL, make_lm, toy_profile

from steer import SteerError
from steer.generation.processors import NoThirdCopyLogitsProcessor, clean_output
from steer.generation.steerer import Steerer, TransferSettings
from steer.generation.stopping import AnswerStoppingCriteria
from steer.scoring.loops import third_copy_tokens


def test_public_processors_work_with_plain_generate() -> None:
    """A model that always prefers one token loops under plain generate(); with the public loop
    guard it never says that token three times in a row; AnswerStoppingCriteria ends a row at its answer."""
    from transformers import LogitsProcessorList

    lm = make_lm("llama")
    tok = lm.tokenizer
    favourite = 74
    with torch.no_grad():  # every hidden state now points at the favourite token
        lm.model.get_output_embeddings().weight[favourite] *= 50
    ids = tok("please reply soon", return_tensors="pt")
    n = ids["input_ids"].shape[1]
    common: dict[str, Any] = dict(max_new_tokens=10, do_sample=False, pad_token_id=tok.pad_token_id)
    looping = lm.model.generate(**ids, **common)[0, n:].tolist()
    assert looping[:3] == [favourite] * 3
    guard = NoThirdCopyLogitsProcessor(n, tok.decode)
    guarded = lm.model.generate(**ids, **common, logits_processor=LogitsProcessorList([guard]))[0, n:].tolist()
    assert all(guarded[i : i + 3] != [favourite] * 3 for i in range(len(guarded) - 2)) and guard.banned > 0
    from transformers import StoppingCriteria

    assert isinstance(AnswerStoppingCriteria(tok.decode, n), StoppingCriteria)  # behaviour: test_degeneracy.py
    assert clean_output('Here is the informal version: "hey dude" - more casual') == "hey dude"


def test_public_keep_words_bonus_with_plain_generate_says_each_source_word_once() -> None:
    """Under plain generate(), an overwhelming bonus makes the reply say every favoured token first,
    each exactly once: a token stops being favoured once the row has said it."""
    from transformers import LogitsProcessorList

    from steer.generation.processors import SourceWordBonusLogitsProcessor

    lm = make_lm("llama")
    tok = lm.tokenizer
    ids = tok("please reply soon", return_tensors="pt")
    n = ids["input_ids"].shape[1]
    favoured = [11, 22, 33]
    bonus = SourceWordBonusLogitsProcessor(n, [[[[t]] for t in favoured]], [1e4])  # three one-spelling, one-token words
    out = lm.model.generate(
        **ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id,
        logits_processor=LogitsProcessorList([bonus]),
    )[0, n:].tolist()  # fmt: skip
    assert sorted(out[:3]) == favoured  # each favoured token once, before anything else


def test_no_third_copy_bans_only_generated_repeats() -> None:
    prompt = [4, 4, 4, 4]  # the prompt repeats itself: that is never banned
    ids = torch.tensor([prompt + [9, 9], prompt + [9, 8]])
    scores = torch.zeros(2, 12)
    out = NoThirdCopyLogitsProcessor(len(prompt))(ids, scores)
    assert out[0, 9] == float("-inf") and torch.isfinite(out[0, :9]).all() and torch.isfinite(out[0, 10:]).all()
    assert torch.equal(out[1], scores[1])
    assert torch.equal(
        NoThirdCopyLogitsProcessor(len(prompt))(ids[1:], scores[1:]), scores[1:]
    )  # nothing to ban: a no-op


def test_loop_guard_stops_every_preset_from_looping_on_the_tiny_model() -> None:
    lm = make_lm("llama")
    steerer = Steerer(lm, toy_profile(lm))
    texts = FORMAL + INFORMAL

    def third_copies(ids: list[int]) -> bool:
        return any(third_copy_tokens(ids[:i], 16) & {ids[i]} for i in range(len(ids)))

    looped = 0
    for preset in ("prompt", "guided", "paper"):
        extra: dict[str, Any] = {} if preset == "prompt" else {"top_k": "10%"}
        common = dict(max_new_tokens=24, min_new_tokens=24, clean=False, **extra)
        unguarded = TransferSettings.preset(preset, loop_guard=False, **common)
        free = steerer.transfer(texts, "formal", "informal", unguarded)
        guarded = steerer.transfer(texts, "formal", "informal", TransferSettings.preset(preset, **common))
        looped += sum(third_copies(r.info["token_ids"]) for r in free)
        assert not any(third_copies(r.info["token_ids"]) for r in guarded), preset
    assert looped > 0  # tiny random models do loop without the guard, so the check above means something


def test_no_repeat_counts_only_generated_ngrams() -> None:
    from steer.generation.processors import NoRepeatGeneratedNGramLogitsProcessor

    prompt = [5, 6, 7, 5, 6]  # "5 6 → 7" appears in the prompt: still allowed
    ids = torch.tensor([prompt + [1, 2, 3, 1, 2], prompt + [1, 2, 3, 4, 2]])
    scores = torch.zeros(2, 9)
    out = NoRepeatGeneratedNGramLogitsProcessor(3, len(prompt))(ids, scores)
    assert out[0, 3] == float("-inf") and torch.isfinite(out[0]).sum() == 8  # "1 2 → 3" would repeat
    assert torch.equal(out[1], scores[1])  # "4 2" has no earlier occurrence
    assert torch.equal(scores, torch.zeros(2, 9))  # not edited in place
    unigram = NoRepeatGeneratedNGramLogitsProcessor(1, len(prompt))(ids, scores)
    assert set((unigram[0] == float("-inf")).nonzero().flatten().tolist()) == {1, 2, 3}
    with pytest.raises(SteerError, match="`no_repeat_ngram`"):
        NoRepeatGeneratedNGramLogitsProcessor(0, 3)


def test_echo_guard_bans_the_instruction_start_and_its_token_trigrams() -> None:
    import torch

    from steer.generation.processors import NoInstructionEchoLogitsProcessor
    from steer.generation.replies import echo_ngrams, first_word_tokens

    vocab = {w: i for i, w in enumerate("rewrite this sentence now please hey the cat sat".split())}

    def encode(text: str) -> list[int]:
        return [vocab[w] for w in text.lower().split()]

    instruction, source = "Rewrite this sentence now", "the cat sat now"
    grams = echo_ngrams(encode, instruction, source, 3)
    assert grams == {(0, 1, 2), (1, 2, 3)}
    first = first_word_tokens(encode, instruction, source)
    assert first == {0}
    assert first_word_tokens(encode, instruction, "rewrite this") == set()  # the source starts so: allowed
    guard = NoInstructionEchoLogitsProcessor(2, [first, first], [grams, set()], 3)
    scores = torch.zeros(2, len(vocab))
    prompt = torch.tensor([[5, 5], [5, 5]])
    out = guard(prompt, scores)  # first generated token: the instruction's first word is banned (row 0)
    assert out[0, 0] == float("-inf") and torch.isfinite(out[0, 1:]).all() and out[1, 0] == float("-inf")
    after = torch.tensor([[5, 5, 0, 1], [5, 5, 0, 1]])  # "rewrite this" generated: "sentence" is banned in row 0
    out = guard(after, scores)
    assert out[0, 2] == float("-inf") and torch.isfinite(out[0, [0, 1, 3, 4]]).all()
    assert torch.equal(out[1], scores[1])  # row 1 has no echo n-grams: untouched
    assert torch.equal(guard(torch.tensor([[5, 5, 6], [5, 5, 6]]), scores), scores)  # too short: a no-op
