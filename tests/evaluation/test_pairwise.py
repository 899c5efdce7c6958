"""The LLM judge's pairwise mode (`LLMJudge.prefer`, `steer eval --pairwise`): the log-odds that
rewrite A beats rewrite B equal plain forward passes of the four asks, swapping A and B negates them,
identical rewrites give 0, neither the position shown nor the order of the answer words leans them,
a cached call makes no forward pass; the prompt's table is optional and checked; the CLI refuses
files of different sources in one line before any model loads; `pairwise_agreement` matches a hand
computation. The tiny tokenizer knows the answer words "first" and "second" (`PAIR_WORDS`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from steer.cli import cli
from steer.errors import SteerError
from steer.evaluation.judge_prompt import PAIRWISE_TABLE, load_judge_prompt
from steer.evaluation.llm_judge import JudgeItem, LLMJudge
from steer.evaluation.pairwise import pairwise_agreement, preference_counts, preference_label
from tests.conftest import JUDGE_WORDS, make_lm, make_model, make_tokenizer
from tests.evaluation.test_llm_judge import _log_odds

PAIR_WORDS = (*JUDGE_WORDS, "first", "second")
FORMAL = "i would be grateful if you could reply ."


def _pair(source: str, a: str, b: str, styles: tuple[str, str]) -> tuple[JudgeItem, JudgeItem]:
    return JudgeItem(source, a, *styles), JudgeItem(source, b, *styles)


PAIRS = [
    _pair(FORMAL, "hey dude reply lol", "ok", ("formal", "informal")),
    _pair("hey", "i would be grateful", "please kindly reply .", ("informal", "formal")),
    _pair("thou shalt not", "you will not", "", ("shakespearean", "modern")),
]
SWAPPED = [(b, a) for a, b in PAIRS]
TOLERANCE = 1e-5  # cached prefix and padded batch vs one plain pass: float32 rounding


def _reference(judge: LLMJudge, a: JudgeItem, b: JudgeItem) -> float:
    """The log-odds that A is the better, written out from the packaged table: the mean of the four
    asks' log-odds leaning toward A (A first: "first"; B first: "second")."""
    table = load_judge_prompt()[PAIRWISE_TABLE]
    first, second = table["answers"]

    def ask(shown_first: str, shown_second: str, x: str, y: str) -> float:
        question = table["question"].format(a=x, b=y, source=a.source_style, target=a.target_style)
        text = table["text"].format(source_text=a.source, first=shown_first, second=shown_second)
        return _log_odds(judge, question, text, x, y)

    toward_a = [
        ask(a.rewrite, b.rewrite, first, second),  # A shown first, "first" over "second"
        -ask(a.rewrite, b.rewrite, second, first),
        -ask(b.rewrite, a.rewrite, first, second),  # B shown first: "first" names B
        ask(b.rewrite, a.rewrite, second, first),
    ]
    return sum(toward_a) / 4


@pytest.mark.parametrize("batch_size", [1, 8])
def test_preferences_equal_plain_forward_passes_and_swapping_negates_them(batch_size: int) -> None:
    lm = make_lm("llama", seed=3, words=PAIR_WORDS)
    judge = LLMJudge(lm, batch_size=batch_size)
    preferred = judge.prefer(PAIRS)
    plain = LLMJudge(lm)
    for (a, b), value in zip(PAIRS, preferred, strict=True):
        reference = _reference(plain, a, b)
        assert abs(value - reference) <= TOLERANCE and reference != 0.0
    # swapped in a fresh judge (no cache): the same four asks, so exactly the negation up to rounding
    swapped = LLMJudge(lm, batch_size=batch_size).prefer(SWAPPED)
    assert all(abs(s + p) <= 1e-6 for s, p in zip(swapped, preferred, strict=True))
    # swapped in the same judge: read back from its answers, negated exactly
    assert judge.prefer(SWAPPED) == [-p for p in preferred]


def test_identical_rewrites_give_exactly_zero() -> None:
    lm = make_lm("qwen2", seed=5, words=PAIR_WORDS)
    same = [_pair(FORMAL, "hey dude reply lol", "hey dude reply lol", ("formal", "informal")),
            _pair("hey", "", "", ("informal", "formal"))]  # fmt: skip
    values = LLMJudge(lm).prefer([same[0], PAIRS[0], same[1]])  # batched beside a pair that differs
    assert values[0] == 0.0 and values[2] == 0.0 and values[1] != 0.0


def test_neither_the_position_shown_nor_the_answer_order_leans_the_preference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With log-odds made by hand — 3 nats toward the answer word "first" (the rewrite shown
    first), 2 toward whichever word the question names first, plus each rewrite's own quality —
    the biases cancel: the preference is quality(A) − quality(B)."""
    judge = LLMJudge(make_lm("llama", seed=1, words=PAIR_WORDS))
    quality = {"good": 1.5, "bad": -0.5, "fine": 0.25}

    def score(text: str, word: str) -> float:
        shown = {"first": text.split("First rewrite: ")[1].split("\n")[0], "second": text.rsplit(": ", 1)[1]}
        return quality[shown[word]] + (3.0 if word == "first" else 0.0)

    def by_hand(question: str, texts: list[str], a: str, b: str) -> list[float]:
        return [score(text, a) - score(text, b) + 2.0 for text in texts]

    monkeypatch.setattr(judge, "_choice_batch", by_hand)
    got = judge.prefer([_pair("hey", "good", "bad", ("informal", "formal")),
                        _pair("hey", "fine", "good", ("informal", "formal"))])  # fmt: skip
    assert got == pytest.approx([2.0, -1.25])


def test_a_cached_call_makes_no_forward_pass(tmp_path: Path) -> None:
    lm = make_lm("llama", seed=2, words=PAIR_WORDS)
    calls: list[int] = []
    handle = lm.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        judge = LLMJudge(lm, cache_dir=tmp_path)
        first = judge.prefer(PAIRS)
        # three directions, each asked in two orders of the answer words: a prefill of each rendered
        # question and one batch of its two texts (A shown first, B shown first)
        assert judge.forward_passes == 3 * 2 * 2 and calls
        calls.clear()
        again = LLMJudge(lm, cache_dir=tmp_path)
        assert again.prefer(PAIRS) == first and again.forward_passes == 0 and calls == []
        assert again.prefer(SWAPPED) == [-x for x in first] and again.forward_passes == 0 and calls == []
        # an edited pairwise question is a new answer: asked again
        assert again.pairwise is not None
        again.pairwise = {**again.pairwise, "question": "Better: {a} or {b}?\n\n"}
        again.prefer(PAIRS[:1])
        assert again.forward_passes == 2 * 2
    finally:
        handle.remove()
    cached = [json.loads(line) for line in next(tmp_path.glob("*-scores.jsonl")).read_text().splitlines()]
    assert len(cached) == len(PAIRS) + 1  # one per pair (the swapped ones read the same), one edited


def test_the_pairwise_table_is_optional_and_checked_in_one_line() -> None:
    prompt = load_judge_prompt()
    lm = make_lm("llama", seed=1, words=PAIR_WORDS)
    without = {k: v for k, v in prompt.items() if k != PAIRWISE_TABLE}
    judge = LLMJudge(lm, prompt=without)  # loads, and judges one rewrite at a time as before
    assert judge.pairwise is None and len(judge.verdicts([PAIRS[0][0]])) == 1
    with pytest.raises(SteerError, match=re.escape("has no [pairwise_choice] table")):
        judge.prefer(PAIRS)
    table = prompt[PAIRWISE_TABLE]
    bad = {
        "must name both answers as {a} and {b}": {**table, "question": "Which is better?"},
        "must show each of {source_text}, {first} and {second}": {**table, "text": "{source_text} {first}"},
        "cannot fill ('rewrite')": {**table, "text": "{source_text} {first} {second} {rewrite}"},
        "cannot fill ('tone')": {**table, "question": "{a} or {b}, in {tone}?"},
        "must be two words": {**table, "answers": ["first", "first"]},
        "must be a table": "which is better?",
    }
    for message, broken in bad.items():
        with pytest.raises(SteerError, match=re.escape(message)) as error:
            LLMJudge(lm, prompt={**prompt, PAIRWISE_TABLE: broken})
        assert "\n" not in str(error.value)
    with pytest.raises(SteerError, match="pair 2 is not two rewrites of one source"):
        LLMJudge(lm).prefer([PAIRS[0], (PAIRS[1][0], PAIRS[2][1])])


def _records(path: Path, pairs: list[tuple[JudgeItem, JudgeItem]], side: int) -> Path:
    rows = [
        {"source_text": p[side].source, "output": p[side].rewrite, "source_style": p[side].source_style,
         "target_style": p[side].target_style, "mode": "prompt", "model_id": "smollm2-135m", "fingerprint": "x"}
        for p in pairs
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_steer_eval_pairwise_refuses_files_of_different_sources_in_one_line(tmp_path: Path) -> None:
    """Refused before any model loads: the judge named here does not exist."""
    a = _records(tmp_path / "a.jsonl", PAIRS, 0)
    other = [PAIRS[0], _pair("hey dude", "x", "y", ("informal", "formal")), PAIRS[2]]
    cases = {
        "line 2": _records(tmp_path / "b.jsonl", other, 1),
        "has no counterpart": _records(tmp_path / "short.jsonl", PAIRS[:2], 1),
        "directions informal → formal and formal → informal": _records(
            tmp_path / "turned.jsonl", [PAIRS[0], _pair("hey", "x", "y", ("formal", "informal")), PAIRS[2]], 1
        ),
    }
    for message, b in cases.items():
        refused = CliRunner().invoke(cli, ["eval", str(a), "--judge", "llm:no-such-model", "--pairwise", str(b)])
        assert refused.exit_code == 1 and message in refused.output, refused.output
        assert refused.output.strip().count("\n") == 0 and "Traceback" not in refused.output
    good = str(_records(tmp_path / "good.jsonl", PAIRS, 1))
    for args, message in (
        ([], "add --judge llm"),
        (["--judge", "llm:no-such-model", "--metrics", "copy"], "--metrics scores one file"),
    ):
        refused = CliRunner().invoke(cli, ["eval", str(a), "--pairwise", good, *args])
        assert refused.exit_code == 1 and message in refused.output, refused.output


def test_steer_eval_pairwise_prints_counts_per_direction(tmp_path: Path) -> None:
    a, b = _records(tmp_path / "a.jsonl", PAIRS, 0), _records(tmp_path / "b.jsonl", PAIRS, 1)
    judge_model = tmp_path / "judge-model"
    make_model("llama", seed=3).save_pretrained(judge_model)
    make_tokenizer(PAIR_WORDS).save_pretrained(judge_model)
    args = ["eval", str(a), "--judge", f"llm:{judge_model}", "--pairwise", str(b)]
    shown = CliRunner().invoke(cli, args)
    assert shown.exit_code == 0, shown.output
    assert "A preferred" in shown.output and "formal->informal" in shown.output
    as_json = CliRunner().invoke(cli, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    result: dict[str, Any] = json.loads(as_json.output)
    assert set(result["directions"]) == {"formal->informal", "informal->formal", "shakespearean->modern"}
    assert len(result["log_odds"]) == len(PAIRS)
    for direction, counts in result["directions"].items():
        assert counts["n"] == 1 and counts["a_preferred"] + counts["b_preferred"] + counts["ties"] == 1, direction
    assert not list(tmp_path.glob("*.json"))  # nothing recorded beside the inputs


def test_pairwise_agreement_and_counts_by_hand() -> None:
    preferences = [2.0, -1.0, 0.05, 0.5, -0.3, 0.0]
    read = ["A", "A", "tie", "B", "B", "tie"]
    # judge (tie below 0.1): A, B, tie, A, B, tie. Decided by the read: 0, 1, 3, 4, of which 0 and 4
    # match in sign → 1/2. Three-way: 4 of 6 match; both labellings 2/6 of each class → chance 1/3,
    # κ = (2/3 − 1/3) / (1 − 1/3) = 1/2
    assert pairwise_agreement(preferences, read) == pytest.approx(
        {"n": 6, "decided": 4, "sign_agreement": 0.5, "agreement": 2 / 3, "kappa": 0.5}
    )
    assert preference_counts(preferences) == {"n": 6, "a_preferred": 2, "b_preferred": 2, "ties": 2}
    assert preference_label(0.1) == "A" and preference_label(-0.1) == "B" and preference_label(0.099) == "tie"
    # a wider margin makes 0.5 and -0.3 ties (judge: A, B, tie, tie, tie, tie: 3 of 6 match); the sign
    # share does not use the margin
    wide = pairwise_agreement(preferences, read, margin=1.0)
    assert wide["sign_agreement"] == 0.5 and wide["agreement"] == pytest.approx(3 / 6)
    none_decided = pairwise_agreement([0.0, 0.0], ["tie", "tie"])
    assert math.isnan(none_decided["sign_agreement"]) and math.isnan(none_decided["kappa"])
    assert none_decided["agreement"] == 1.0 and none_decided["decided"] == 0
    with pytest.raises(ValueError):
        pairwise_agreement([1.0], ["A", "B"])
    with pytest.raises(ValueError, match="'a' is not one of A, B, tie"):
        pairwise_agreement([1.0], ["a"])
