"""The LLM judge: its answers (yes/no questions and the style's forced choice) equal a plain forward
pass of each whole prompt, do not depend on the batch, are cached (a cached call makes no forward
pass), refuse to grade the decoding model's own rewrites, and agreement statistics match hand
computations. The tiny tokenizer knows the style names (`JUDGE_WORDS`), as a real one does."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from conftest import JUDGE_WORDS, MAIN_KINDS, make_lm, make_model, make_tokenizer

from steer.cli import cli
from steer.config import SteerError
from steer.scoring.llm_judge import QUESTIONS, JudgeItem, LLMJudge, Verdict, agreement, check_not_decoder, judge_rates

ITEMS = [
    JudgeItem("i would be grateful if you could reply .", "hey dude reply lol", "formal", "informal"),
    JudgeItem("please kindly reply at your earliest convenience .", "ok", "formal", "informal"),
    JudgeItem("hey", "i would be grateful", "informal", "formal"),
    JudgeItem("thou shalt not", "you will not", "shakespearean", "modern"),
    JudgeItem("what why how lol", "", "informal", "formal"),
]
TOLERANCE = 1e-5  # cached vs one-call prefill differ at float32 rounding (as in test_decoding)


def _log_odds(judge: LLMJudge, text: str, a: str, b: str) -> float:
    """log p(a) − log p(b) over the names' own first tokens, asked "a or b" about `text`: one
    forward pass over the whole prompt, no cache, no padding."""
    assert judge.choice is not None
    head, tail = judge._template_pieces(judge.choice["question"].format(a=a, b=b))
    with torch.no_grad():
        logits = judge.lm.model(input_ids=torch.tensor([judge._tokens(head) + judge._tokens(text + tail)])).logits
    logp = torch.log_softmax(logits[0, -1].float(), dim=-1)
    ids_a, ids_b = judge._choice_ids(a, b)
    return float(torch.logsumexp(logp[ids_a], -1) - torch.logsumexp(logp[ids_b], -1))


def _reference(judge: LLMJudge, item: JudgeItem, question: str) -> float:
    """The answer from one forward pass over each whole prompt, no cache, no padding: P(Yes), or
    for style sigmoid(target-ness(rewrite) − target-ness(source) − margin)."""
    if question == "style" and judge.choice is not None:
        t, s = item.target_style, item.source_style

        def target_ness(text: str) -> float:
            return (_log_odds(judge, text, t, s) - _log_odds(judge, text, s, t)) / 2

        return 1 / (1 + math.exp(-(target_ness(item.rewrite) - target_ness(item.source) - judge.choice["margin"])))
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


@pytest.mark.parametrize("kind", MAIN_KINDS)
def test_answers_equal_a_plain_forward_pass_and_do_not_depend_on_the_batch(kind: str) -> None:
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
    assert judge.choice is not None and judge.yes_no == ("meaning", "fluency")  # the packaged prompt: judge-v2


def test_the_style_choice_refuses_a_copy_and_cancels_the_order_of_the_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer is sigmoid(target-ness(rewrite) − target-ness(source) − margin), whatever the
    model's preference for the first-named style: with log-odds made by hand (a bias toward the
    name asked first, plus each text's own lean to the target), the bias cancels and the sign is the
    target's. A copy is exactly as much in the target style as its source: sigmoid(−margin) < 0.5."""
    judge = LLMJudge(make_lm("llama", seed=4, words=JUDGE_WORDS))
    assert judge.choice is not None and judge.choice["margin"] > 0
    margin, target, source = float(judge.choice["margin"]), "informal", "formal"
    lean = {"the rewrite": margin + 1.5, "the source": -0.5, "a copy": 2.0}  # toward the target, in nats

    def by_hand(texts: list[str], a: str, b: str) -> list[float]:
        # log-odds of a over b, asked "a or b": 3 nats toward whichever is named first, plus the lean
        return [3.0 + (lean[t] if a == target else -lean[t]) for t in texts]

    monkeypatch.setattr(judge, "_choice_batch", by_hand)
    moved, copied = judge.verdicts(
        [JudgeItem("the source", "the rewrite", source, target), JudgeItem("a copy", "a copy", source, target)]
    )
    assert moved.style == pytest.approx(1 / (1 + math.exp(-(margin + 1.5 - (-0.5) - margin))))  # sigmoid(2)
    assert copied.style == pytest.approx(1 / (1 + math.exp(margin))) and copied.style < 0.5
    # the other direction: the same texts lean away from its target
    back = judge.verdicts([JudgeItem("the source", "the rewrite", target, source)])[0]
    assert back.style == pytest.approx(1 / (1 + math.exp(-(-(margin + 1.5) - 0.5 - margin))))


def test_style_names_the_tokenizer_cannot_tell_apart_are_one_line() -> None:
    judge = LLMJudge(make_lm("llama", seed=1))  # "formal" and "informal" are both unknown words here
    with pytest.raises(SteerError, match="cannot choose between the style names 'informal' and 'formal'"):
        judge.verdicts(ITEMS[:1])


def test_cached_answers_cost_no_forward_pass(tmp_path: Path) -> None:
    lm = make_lm("llama", seed=1, words=JUDGE_WORDS)
    calls: list[int] = []
    handle = lm.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        first = LLMJudge(lm, cache_dir=tmp_path).verdicts(ITEMS)
        assert calls and (tmp_path / f"{lm.fingerprint}-judge-v2.jsonl").is_file()
        calls.clear()
        again = LLMJudge(lm, cache_dir=tmp_path)
        assert again.verdicts(ITEMS) == first and again.forward_passes == 0 and calls == []
        # one new item: only it is judged — the style question's prefill for each order of the two
        # names and its texts in each (4), the instructions' prefill, its item, its questions (3)
        more = again.verdicts([*ITEMS, JudgeItem("hey", "hello there", "informal", "formal")])
        assert more[: len(ITEMS)] == first and again.forward_passes == 4 + 3
    finally:
        handle.remove()
    entries = [json.loads(line) for line in (tmp_path / f"{lm.fingerprint}-judge-v2.jsonl").read_text().splitlines()]
    assert len(entries) == (len(ITEMS) + 1) * len(QUESTIONS)


def test_a_judge_that_decoded_the_rewrites_is_refused() -> None:
    records = [{"model_id": "m", "fingerprint": "abc"}]
    with pytest.raises(SteerError, match="--allow-same-model"):
        check_not_decoder("abc", records, allow_same_model=False)
    check_not_decoder("abc", records, allow_same_model=True)
    check_not_decoder("other", records, allow_same_model=False)


def test_rates_and_agreement_by_hand() -> None:
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
