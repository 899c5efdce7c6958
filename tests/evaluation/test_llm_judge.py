"""The LLM judge: its answers (yes/no questions and the forced choices — style, and meaning in the
trial prompt) equal a plain forward pass of each whole prompt, do not depend on the batch, are
cached (a cached call makes no forward pass; an edited question or a new margin is handled), refuse
to grade the decoding model's own rewrites, and agreement statistics match hand computations. The
tiny tokenizer knows the style names and the meaning answers (`JUDGE_WORDS`), as a real one does."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from conftest import JUDGE_WORDS, MAIN_KINDS, make_lm, make_model, make_tokenizer

from steer.cli import cli
from steer.errors import SteerError
from steer.evaluation.llm_judge import (
    QUESTIONS,
    JudgeItem,
    LLMJudge,
    Verdict,
    agreement,
    check_not_decoder,
    judge_rates,
)

ITEMS = [
    JudgeItem("i would be grateful if you could reply .", "hey dude reply lol", "formal", "informal"),
    JudgeItem("please kindly reply at your earliest convenience .", "ok", "formal", "informal"),
    JudgeItem("hey", "i would be grateful", "informal", "formal"),
    JudgeItem("thou shalt not", "you will not", "shakespearean", "modern"),
    JudgeItem("what why how lol", "", "informal", "formal"),
]
TOLERANCE = 1e-5  # cached vs one-call prefill differ at float32 rounding (as in test_decoding)
TRIALS = Path(__file__).resolve().parents[2] / "research" / "judge-trials"
# the trial prompt that asks meaning as a choice with one margin for every pair (research/findings.md, 2026-12-06)
MEANING_TRIAL = TRIALS / "judge-v3-meaning-trial.toml"
# the packaged prompt before judge-v3: meaning and fluency as yes/no questions (two tiled per item)
YES_NO_MEANING = TRIALS / "judge-v2.toml"


def use_prompt(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Judges made after this ask the packaged prompt, the meaning-choice trial or judge-v2."""
    import tomllib

    from steer.evaluation import llm_judge

    path = {"meaning-choice": MEANING_TRIAL, "yes-no-meaning": YES_NO_MEANING}.get(name)
    if path is not None:
        trial = tomllib.loads(path.read_text(encoding="utf-8"))
        monkeypatch.setattr(llm_judge, "load_judge_prompt", lambda: trial)


def _log_odds(judge: LLMJudge, question: str, text: str, a: str, b: str) -> float:
    """log p(a) − log p(b) over the answers' own first tokens, asked `question` ("a or b") about
    `text`: one forward pass over the whole prompt, no cache, no padding."""
    head, tail = judge._template_pieces(question)
    with torch.no_grad():
        logits = judge.lm.model(input_ids=torch.tensor([judge._tokens(head) + judge._tokens(text + tail)])).logits
    logp = torch.log_softmax(logits[0, -1].float(), dim=-1)
    ids_a, ids_b = judge._choice_ids(a, b)
    return float(torch.logsumexp(logp[ids_a], -1) - torch.logsumexp(logp[ids_b], -1))


def _reference(judge: LLMJudge, item: JudgeItem, question: str) -> float:
    """The answer from one forward pass over each whole prompt, no cache, no padding: for style
    sigmoid(target-ness(rewrite) − target-ness(source) − margin), for meaning sigmoid(log-odds of
    "same" over "different", both orders averaged, − margin), else P(Yes)."""
    if question in judge.choices:
        choice = judge.choices[question]
        if question == "style":
            t, s = item.target_style, item.source_style

            def target_ness(text: str) -> float:
                ask = str(choice["question"])
                return (_log_odds(judge, ask.format(a=t, b=s), text, t, s)
                        - _log_odds(judge, ask.format(a=s, b=t), text, s, t)) / 2  # fmt: skip

            score = target_ness(item.rewrite) - target_ness(item.source)
        else:
            same, different = choice["answers"]
            text = choice["text"].format(source_text=item.source, rewrite=item.rewrite)

            def ask(a: str, b: str) -> str:
                return str(choice["question"]).format(a=a, b=b, source=item.source_style, target=item.target_style)

            score = (_log_odds(judge, ask(same, different), text, same, different)
                     - _log_odds(judge, ask(different, same), text, different, same)) / 2  # fmt: skip
        return 1 / (1 + math.exp(-(score - choice["margin"])))
    prompt = judge.prompt
    tokens = (
        judge._tokens(judge.head)
        + judge._tokens(
            prompt["item"].format(
                source=item.source_style, target=item.target_style, source_text=item.source, rewrite=item.rewrite
            )
        )
        + judge._tokens(
            "\n\nQuestion: "
            + prompt["questions"][question].format(source=item.source_style, target=item.target_style)
            + judge.tail
        )
    )
    with torch.no_grad():
        logits = judge.lm.model(input_ids=torch.tensor([tokens])).logits[0, -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    yes, no = torch.logsumexp(logp[sorted(judge._yes)], -1), torch.logsumexp(logp[sorted(judge._no)], -1)
    return float(torch.sigmoid(yes - no))


@pytest.mark.parametrize("prompt", ["packaged", "meaning-choice", "yes-no-meaning"])
@pytest.mark.parametrize("kind", MAIN_KINDS)
def test_answers_equal_a_plain_forward_pass_and_do_not_depend_on_the_batch(
    kind: str, prompt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_prompt(monkeypatch, prompt)
    lm = make_lm(kind, seed=3, words=JUDGE_WORDS)
    together = LLMJudge(lm, batch_size=len(ITEMS)).verdicts(ITEMS)
    one_by_one = LLMJudge(lm, batch_size=1).verdicts(ITEMS)
    judge = LLMJudge(lm)
    for item, verdict, alone in zip(ITEMS, together, one_by_one, strict=True):
        for question in QUESTIONS:
            reference = _reference(judge, item, question)
            assert abs(getattr(verdict, question) - reference) <= TOLERANCE
            assert abs(getattr(alone, question) - reference) <= TOLERANCE
            assert 0.0 < reference < 1.0
    if prompt == "yes-no-meaning":  # judge-v2: style as a choice, meaning and fluency as yes/no
        assert set(judge.choices) == {"style"} and judge.yes_no == ("meaning", "fluency")
    else:  # style and meaning as choices, fluency as yes/no (the packaged judge-v3 adds pair margins)
        assert set(judge.choices) == {"style", "meaning"} and judge.yes_no == ("fluency",)


def test_the_choices_refuse_a_copy_and_cancel_the_order_of_the_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Style is sigmoid(target-ness(rewrite) − target-ness(source) − margin) and meaning
    sigmoid(log-odds of "same" − margin), whatever the model's preference for the answer named
    first: with log-odds made by hand (a bias toward the answer asked first, plus each text's own
    lean), the bias cancels. A copy is exactly as much in the target style as its source:
    sigmoid(−margin) < 0.5."""
    use_prompt(monkeypatch, "meaning-choice")
    judge = LLMJudge(make_lm("llama", seed=4, words=JUDGE_WORDS))
    assert judge.choice is not None and judge.choice["margin"] > 0
    margin, target, source = float(judge.choice["margin"]), "informal", "formal"
    m_margin, (same, _) = float(judge.choices["meaning"]["margin"]), judge.choices["meaning"]["answers"]
    lean = {"the rewrite": margin + 1.5, "the source": -0.5, "a copy": 2.0}  # toward the target, in nats
    kept = {"the rewrite": m_margin + 0.75, "a copy": m_margin + 4.0}  # toward "same", by the rewrite shown

    def by_hand(question: str, texts: list[str], a: str, b: str) -> list[float]:
        # log-odds of a over b, asked "a or b": 3 nats toward whichever is named first, plus the lean
        if same in (a, b):
            rewrites = [t.rsplit(": ", 1)[1] for t in texts]  # the pair's second text
            return [3.0 + (kept[r] if a == same else -kept[r]) for r in rewrites]
        return [3.0 + (lean[t] if a == target else -lean[t]) for t in texts]

    monkeypatch.setattr(judge, "_choice_batch", by_hand)
    moved, copied = judge.verdicts(
        [JudgeItem("the source", "the rewrite", source, target), JudgeItem("a copy", "a copy", source, target)]
    )
    assert moved.style == pytest.approx(1 / (1 + math.exp(-(margin + 1.5 - (-0.5) - margin))))  # sigmoid(2)
    assert copied.style == pytest.approx(1 / (1 + math.exp(margin))) and copied.style < 0.5
    assert moved.meaning == pytest.approx(1 / (1 + math.exp(-0.75))) and copied.meaning == pytest.approx(
        1 / (1 + math.exp(-4.0))
    )
    # the other direction: the same texts lean away from its target
    back = judge.verdicts([JudgeItem("the source", "the rewrite", target, source)])[0]
    assert back.style == pytest.approx(1 / (1 + math.exp(-(-(margin + 1.5) - 0.5 - margin))))


def test_a_prompt_that_asks_a_question_twice_or_badly_is_one_line() -> None:
    import tomllib

    trial = tomllib.loads(MEANING_TRIAL.read_text(encoding="utf-8"))
    lm = make_lm("llama", seed=1, words=JUDGE_WORDS)
    assert set(LLMJudge(lm, prompt=trial).choices) == {"style", "meaning"}  # a trial prompt, passed in
    meaning, style = trial["meaning_choice"], trial["style_choice"]
    bad = {
        "each once": {**trial, "questions": {**trial["questions"], "meaning": "Same meaning?"}},
        "source_text": {**trial, "meaning_choice": {**meaning, "text": "{rewrite}"}},
        "{a} and {b}": {**trial, "style_choice": {**style, "question": "Which style?"}},
        "cannot fill ('target')": {**trial, "style_choice": {**style, "question": "{a} or {b}, for {target}?"}},
        "cannot fill ('source')": {**trial, "meaning_choice": {**meaning, "text": "{source}: {source_text} {rewrite}"}},
        "two words": {**trial, "meaning_choice": {**meaning, "answers": ["same"]}},
        "two different style names": {**trial, "pair_margins": [{"styles": ["formal"], "style": 1.0}]},
        "lists formal/informal twice": {
            **trial,
            "pair_margins": [{"styles": ["formal", "informal"]}, {"styles": ["informal", "formal"], "style": 1.0}],
        },
        "sets 'fluency', which it does not ask as a choice": {
            **trial,
            "pair_margins": [{"styles": ["formal", "informal"], "fluency": 0.5}],
        },
        "must be a number": {**trial, "pair_margins": [{"styles": ["formal", "informal"], "meaning": float("nan")}]},
    }
    for message, prompt in bad.items():
        with pytest.raises(SteerError, match=re.escape(message)):
            LLMJudge(lm, prompt=prompt)


def test_a_pair_margin_applies_to_its_pair_in_both_directions_and_nowhere_else() -> None:
    """`[[pair_margins]]` replaces a choice's margin for one style pair, either direction: with
    style at -inf every formal ↔ informal rewrite passes style, and meaning at +100 fails them all;
    the other pairs' verdicts are unchanged, and the margins cost no forward pass."""
    import tomllib

    trial = tomllib.loads(MEANING_TRIAL.read_text(encoding="utf-8"))
    lm = make_lm("llama", seed=4, words=JUDGE_WORDS)
    plain = LLMJudge(lm, prompt=trial)
    expected = plain.verdicts(ITEMS)
    paired = LLMJudge(lm, prompt={**trial, "pair_margins": [{"styles": ["informal", "formal"], "style": -math.inf,
                                                              "meaning": 100.0}]})  # fmt: skip
    paired._answers = plain._answers  # the same raw scores: only the margins differ
    got = paired.verdicts(ITEMS)
    assert paired.forward_passes == 0
    for item, g, e in zip(ITEMS, got, expected, strict=True):
        if {item.source_style, item.target_style} == {"formal", "informal"}:
            assert g.style == 1.0 and g.meaning < 1e-30 and g.fluency == e.fluency and not g.usable
        else:
            assert g == e
    assert sum({i.source_style, i.target_style} == {"formal", "informal"} for i in ITEMS) == 4  # both directions


def test_style_names_the_tokenizer_cannot_tell_apart_are_one_line() -> None:
    judge = LLMJudge(make_lm("llama", seed=1))  # "formal" and "informal" are both unknown words here
    with pytest.raises(SteerError, match="cannot choose between the answers 'informal' and 'formal'"):
        judge.verdicts(ITEMS[:1])


def test_cached_answers_cost_no_forward_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_prompt(monkeypatch, "meaning-choice")
    lm = make_lm("llama", seed=1, words=JUDGE_WORDS)
    cache = tmp_path / f"{lm.fingerprint}-judge-v3-meaning-trial-scores.jsonl"
    calls: list[int] = []
    handle = lm.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        first = LLMJudge(lm, cache_dir=tmp_path).verdicts(ITEMS)
        assert calls and cache.is_file()
        calls.clear()
        again = LLMJudge(lm, cache_dir=tmp_path)
        assert again.verdicts(ITEMS) == first and again.forward_passes == 0 and calls == []
        # one new item: only it is judged — the style question's prefill for each order of the two
        # names and its texts in each (4), the meaning question's likewise (4), the instructions'
        # prefill, its item, its fluency question (3)
        more = again.verdicts([*ITEMS, JudgeItem("hey", "hello there", "informal", "formal")])
        assert more[: len(ITEMS)] == first and again.forward_passes == 4 + 4 + 3
        # a new margin reuses the cached scores: only the verdicts change
        again.choices["meaning"] = {**again.choices["meaning"], "margin": again.choices["meaning"]["margin"] + 1.0}
        shifted = again.verdicts(ITEMS)
        assert again.forward_passes == 11 and all(m.meaning < f.meaning for m, f in zip(shifted, first, strict=True))
        # an edited question is a new answer: its prefill for each order of the answers, the texts in each
        again.choices["meaning"] = {**again.choices["meaning"], "question": "Other words, {a} or {b}?\n\n"}
        again.verdicts(ITEMS[:1])
        assert again.forward_passes == 11 + 4
        # and so is an edited yes/no question: the instructions' prefill is kept; its item, its question
        again.prompt["questions"] = {"fluency": "Is the rewrite good English?"}
        again.verdicts(ITEMS[:1])
        assert again.forward_passes == 11 + 4 + 2
    finally:
        handle.remove()
    entries = [json.loads(line) for line in cache.read_text().splitlines()]
    assert len(entries) == (len(ITEMS) + 1) * len(QUESTIONS) + 2


def test_a_judge_that_decoded_the_rewrites_is_refused() -> None:
    records = [{"model_id": "m", "fingerprint": "abc"}]
    with pytest.raises(SteerError, match="--allow-same-model"):
        check_not_decoder("abc", records, allow_same_model=False)
    check_not_decoder("abc", records, allow_same_model=True)
    check_not_decoder("other", records, allow_same_model=False)


def test_rates_and_agreement_by_hand() -> None:
    assert not Verdict(0.9, math.nan, 0.7).usable and not Verdict(math.nan, 0.9, 0.7).usable  # NaN fails
    verdicts = [Verdict(0.9, 0.8, 0.7), Verdict(0.9, 0.4, 0.7), Verdict(0.2, 0.8, 0.5)]
    assert judge_rates(verdicts) == pytest.approx(
        {"llm_style": 2 / 3, "llm_meaning": 2 / 3, "llm_fluency": 1.0, "llm_usable": 1 / 3}
    )
    # observed 3/4; predicted yes 1/2, labels yes 1/4 → chance 1/2·1/4 + 1/2·3/4 = 1/2 → κ = 0.5
    assert agreement([True, True, False, False], [True, False, False, False]) == pytest.approx(
        {"n": 4, "accuracy": 0.75, "kappa": 0.5}
    )
    assert agreement([True, False], [False, True])["kappa"] == pytest.approx(-1.0)
    assert math.isnan(agreement([True, True], [True, True])["kappa"])
    with pytest.raises(ValueError):
        agreement([True], [True, False])


def _records(path: Path, model_id: str, fingerprint: str) -> Path:
    rows = [
        {"source_text": i.source, "output": i.rewrite, "source_style": i.source_style, "target_style": "informal",
         "mode": "prompt", "model_id": model_id, "fingerprint": fingerprint}
        for i in ITEMS[:2]
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_steer_eval_judge_llm_prints_rates_and_sentences(tmp_path: Path) -> None:
    records = _records(tmp_path / "out.jsonl", "smollm2-135m", "elsewhere")
    judge_model = tmp_path / "judge-model"
    make_model("llama").save_pretrained(judge_model)
    make_tokenizer(JUDGE_WORDS).save_pretrained(judge_model)
    args = ["eval", str(records), "--metrics", "copy", "--judge", f"llm:{judge_model}"]
    shown = CliRunner().invoke(cli, args)
    assert shown.exit_code == 0, shown.output
    for label in ("llm-style", "llm-meaning", "llm-fluency", "llm-usable"):
        assert label in shown.output
    as_json = CliRunner().invoke(cli, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    result: dict[str, Any] = json.loads(as_json.output)
    assert len(result["sentences"]["llm_meaning"]) == 2 and 0 <= result["llm_usable"] <= 1


def test_steer_eval_refuses_the_decoding_model_as_judge(tmp_path: Path, saved_model: Path) -> None:
    from steer.model.loading import load_model

    by_name = _records(tmp_path / "a.jsonl", str(saved_model), "x")
    refused = CliRunner().invoke(cli, ["eval", str(by_name), "--judge", f"llm:{saved_model}"])
    assert refused.exit_code == 1 and "--allow-same-model" in refused.output and "Traceback" not in refused.output
    same = load_model(str(saved_model), progress=False).fingerprint
    by_weights = _records(tmp_path / "b.jsonl", "a copy elsewhere", same)
    refused = CliRunner().invoke(cli, ["eval", str(by_weights), "--metrics", "copy", "--judge", f"llm:{saved_model}"])
    assert refused.exit_code == 1 and "grade its own outputs" in refused.output
    bad = CliRunner().invoke(cli, ["eval", str(by_name), "--judge", "gpt"])
    assert bad.exit_code == 2 and "llm:MODEL" in bad.output


def test_a_runaway_rewrite_is_judged_on_its_start_and_flagged() -> None:
    from steer.evaluation.llm_judge import MAX_JUDGED_CHARS

    long = JudgeItem("hey", "lol " * 25_000, "informal", "formal")
    assert long.cut and len(long.rewrite) == MAX_JUDGED_CHARS and long.source == "hey"
    assert not ITEMS[0].cut
    verdict = LLMJudge(make_lm("llama", seed=1, words=JUDGE_WORDS)).verdicts([long])[0]
    assert all(0 <= x <= 1 for x in (verdict.style, verdict.meaning, verdict.fluency))


def test_answers_are_kept_as_they_come_and_two_judges_never_replace_each_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_prompt(monkeypatch, "meaning-choice")
    lm = make_lm("llama", seed=1, words=JUDGE_WORDS)
    judge = LLMJudge(lm, cache_dir=tmp_path, batch_size=1)
    batches = judge._judge_batch
    seen: list[int] = []

    def interrupted(batch: Any) -> Any:  # Ctrl-C while the third yes/no batch is judged
        seen.append(1)
        if len(seen) == 3:
            raise KeyboardInterrupt
        return batches(batch)

    monkeypatch.setattr(judge, "_judge_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        judge.verdicts(ITEMS)
    kept = LLMJudge(lm, cache_dir=tmp_path)
    assert len(kept._answers) == 2 * len(ITEMS) + 2  # both choices of every item, the first two fluency answers
    # two judges of one cache (as two processes are), each judging other items: both sets stay
    one, two = LLMJudge(lm, cache_dir=tmp_path), LLMJudge(lm, cache_dir=tmp_path)
    one.verdicts([JudgeItem("hey", "hello there", "informal", "formal")])
    two.verdicts([JudgeItem("hey", "good day", "informal", "formal")])
    assert len(LLMJudge(lm, cache_dir=tmp_path)._answers) == len(kept._answers) + 2 * len(QUESTIONS)
