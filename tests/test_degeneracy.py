"""Loops, stop-at-answer and the joint score: the metric on hand-made strings, the decoding rules
on the tiny model, and J on hand-made per-sentence scores."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from conftest import FORMAL, INFORMAL, make_lm, toy_profile

from steer.config import SteerError
from steer.evaluation.metrics import empty_rate, evaluate, joint_score, length_ratio
from steer.generation.repetition import NoThirdCopy, third_copy_tokens
from steer.generation.replies import answer_complete, clean_output
from steer.generation.steerer import Steerer, TransferSettings, echo_filter, finish_output
from steer.prompts import prompt_template
from steer.scoring.faithfulness import instruction_text
from steer.scoring.fluency import sentence_fluency
from steer.scoring.loops import has_loop, trim_loop


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


def test_loop_rate_and_empty_and_length() -> None:
    outputs = ["ha ha ha", "fine", None, "  ", "a b c d"]
    assert evaluate(outputs, metrics=("repetition",))["repetition"] == pytest.approx(1 / 5)
    assert empty_rate(outputs) == pytest.approx(2 / 5)
    sources = ["x y", "x y", "x y", "x y", "x y"]
    assert length_ratio(outputs, sources) == pytest.approx((3 / 2 + 1 / 2 + 0 + 0 + 4 / 2) / 5)
    result = evaluate(outputs, sources=sources, metrics=["repetition", "empty", "length", "copy"])
    assert result["repetition"] == pytest.approx(0.2) and result["empty"] == pytest.approx(0.4)
    assert result["copy_rate"] == 0.0  # a missing output is empty, never the text "None"


def test_third_copy_tokens_hand_made() -> None:
    assert third_copy_tokens([5, 7, 7], 16) == {7}
    assert third_copy_tokens([1, 2, 3, 1, 2, 3], 16) == {1}
    assert third_copy_tokens([1, 2, 3, 1, 2], 16) == set()
    assert third_copy_tokens([1, 2, 3, 1, 2, 3], 2) == set()  # unit longer than max_unit
    keys = {10: "ha", 11: "ha", 12: "x"}
    assert third_copy_tokens([12, 10, 11], 4, keys.__getitem__) == {10, 11}  # "Ha ha": both spellings


def test_no_third_copy_bans_only_generated_repeats() -> None:
    prompt = [4, 4, 4, 4]  # the prompt repeats itself: that is never banned
    ids = torch.tensor([prompt + [9, 9], prompt + [9, 8]])
    scores = torch.zeros(2, 12)
    out = NoThirdCopy(len(prompt))(ids, scores)
    assert out[0, 9] == float("-inf") and torch.isfinite(out[0, :9]).all() and torch.isfinite(out[0, 10:]).all()
    assert torch.equal(out[1], scores[1])
    assert torch.equal(NoThirdCopy(len(prompt))(ids[1:], scores[1:]), scores[1:])  # nothing to ban: a no-op


@pytest.mark.parametrize(
    "raw",
    [
        "Hey dude, reply asap.\nThanks!",
        "Here is the rewritten sentence:\n\nHey dude, reply asap.\nMore text",
        "Sure! Here's a casual version: yo, reply soon\nand more",
        "\n\n  \nyo\nsecond",
        "Informal:\nhey\nthere",
        '"Hey there"\nok',
        "The sentence:\n",
        "no newline at all",
    ],
)
def test_answer_complete_agrees_with_cleaning(raw: str) -> None:
    """Whenever a prefix is complete, no continuation changes what cleaning keeps."""
    for cut in range(len(raw) + 1):
        prefix = raw[:cut]
        if answer_complete(prefix):
            for continuation in ("", "\nmore", " tail\nx", raw[cut:]):
                assert clean_output(prefix + continuation) == clean_output(prefix), (prefix, continuation)
    assert answer_complete(raw + "\n") == bool(clean_output(raw + "\n") and not clean_output(raw).endswith(":")) or (
        raw.count("\n") >= 1
    )


def test_answer_complete_hand_made() -> None:
    assert not answer_complete("Hey dude")  # the line may still go on
    assert answer_complete("Hey dude\n")
    assert not answer_complete("Here is the informal version:\n")  # only a label so far
    assert answer_complete("Here is the informal version:\nyo\n")
    assert not answer_complete("\n\n")


def _newline_lm(seed: int = 0) -> Any:
    """The tiny llama with a newline token that it emits now and then."""
    lm = make_lm("llama", seed)
    tok = lm.tokenizer
    tok.add_tokens(["\n"])
    newline = tok.convert_tokens_to_ids("\n")
    assert newline < lm.model.config.vocab_size
    with torch.no_grad():  # make "\n" nearly as likely as the model's favourite token (id 74)
        head = lm.model.get_output_embeddings().weight
        head[newline] = head[74] * 0.97
    return lm


def test_stop_at_answer_keeps_the_cleaned_outputs_and_decodes_less() -> None:
    lm = _newline_lm()
    steerer = Steerer(lm, toy_profile(lm))
    texts = FORMAL + INFORMAL
    stops: dict[str, int] = {}
    for preset in ("prompt", "guided", "paper"):
        common: dict[str, Any] = dict(max_new_tokens=24, min_new_tokens=24, top_k="10%")  # no early EOS
        if preset == "prompt":
            common.pop("top_k")
        settings = TransferSettings.preset(preset, **common)
        stopped = steerer.transfer(texts, "formal", "informal", settings)
        full = steerer.transfer(texts, "formal", "informal", replace(settings, clean=False))
        template = prompt_template("formal", "informal", settings, steerer.prompts)
        instruction = instruction_text(template, "formal", "informal")
        assert [r.output for r in stopped] == [
            finish_output(r.raw_output, settings, echo_filter(r.text, instruction)) for r in full
        ], preset
        unguarded = replace(settings, loop_guard=False)
        assert [r.output for r in steerer.transfer(texts, "formal", "informal", unguarded)] == [
            clean_output(r.raw_output, echo_filter(r.text, instruction))
            for r in steerer.transfer(texts, "formal", "informal", replace(unguarded, clean=False))
        ], preset
        stops[preset] = sum(answer_complete(r.raw_output) for r in full)
        assert sum(r.info["new_tokens"] for r in stopped) <= sum(r.info["new_tokens"] for r in full), preset
    assert stops["prompt"] >= 3 and sum(stops.values()) > stops["prompt"], stops  # replies did have several lines
    guided = TransferSettings.preset("guided", top_k="10%", max_new_tokens=24, min_new_tokens=24)
    batched = steerer.transfer(texts, "formal", "informal", replace(guided, batch_size=3))
    single = steerer.transfer(texts, "formal", "informal", replace(guided, batch_size=1))
    assert [r.output for r in batched] == [r.output for r in single]


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


def test_joint_score_hand_made() -> None:
    assert joint_score([1.0, 0.5], [0.8, -0.3], [1.0, 1.0]) == pytest.approx((0.8 + 0.0) / 2)  # cosine clipped at 0
    assert joint_score([0.9, 0.9], [1.0, 1.0], [0.0, 0.5]) == pytest.approx(0.225)
    assert math.isnan(joint_score([], [], []))
    with pytest.raises(SteerError):
        joint_score([1.0], [1.0, 1.0], [1.0])


def test_sentence_fluency_is_calibrated_on_the_sources() -> None:
    sources = [(2.0, 2), (4.0, 2), (6.0, 2)]  # mean NLL 1, 2, 3 → reference 2
    outputs = ["as fluent", "worse", "better", "", "ha ha ha", "x"]
    nll = [(4.0, 2), (6.0, 2), (2.0, 2), (0.0, 0), (2.0, 2), (0.0, 0)]
    fluency = sentence_fluency(outputs, nll, sources)
    assert fluency == pytest.approx([1.0, math.exp(-1.0), 1.0, 0.0, 0.0, 0.0])


def test_j_in_evaluate_uses_the_three_per_sentence_scores(llama_lm: Any) -> None:
    class Judge:
        name = "fixed"

        def judgements(self, texts: list[str], target: str) -> list[tuple[float, bool]]:
            return [(0.5, False)] * len(texts)  # P(target) 0.5, never the most probable style

    class Same:
        def similarities(self, outputs: list[str], sources: list[str]) -> list[float]:
            return [1.0] * len(outputs)

    from steer.evaluation.metrics import Scorers

    sources = ["hey dude send it asap lol", "thanks , i would be grateful ."]
    result = evaluate(
        ["hey dude send it asap lol", "lol lol lol"],
        sources=sources,
        target="informal",
        metrics=["j"],
        scorers=Scorers(Judge(), llama_lm, Same()),  # type: ignore[arg-type]
        per_sentence=True,
    )
    fluency = result["sentences"]["fluency"]
    assert fluency[1] == 0.0  # the loop
    assert result["j"] == pytest.approx(0.5 * fluency[0] / 2)


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
