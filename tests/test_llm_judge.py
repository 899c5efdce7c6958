"""The LLM judge: its answers equal a plain forward pass of the whole prompt, do not depend on the
batch, are cached (a cached call makes no forward pass), refuse to grade the decoding model's own
rewrites, and agreement statistics match hand computations."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from conftest import MAIN_KINDS, make_lm

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


def _reference(judge: LLMJudge, item: JudgeItem, question: str) -> float:
    """P(Yes) from one forward pass over the whole prompt, no cache, no padding."""
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
    lm = make_lm(kind, seed=3)
    together = LLMJudge(lm, batch_size=len(ITEMS)).verdicts(ITEMS)
    one_by_one = LLMJudge(lm, batch_size=1).verdicts(ITEMS)
    judge = LLMJudge(lm)
    for item, verdict, alone in zip(ITEMS, together, one_by_one, strict=True):
        for question in QUESTIONS:
            reference = _reference(judge, item, question)
            assert abs(getattr(verdict, question) - reference) <= TOLERANCE
            assert abs(getattr(alone, question) - reference) <= TOLERANCE
            assert 0.0 < reference < 1.0


def test_cached_answers_cost_no_forward_pass(tmp_path: Path) -> None:
    lm = make_lm("llama", seed=1)
    calls: list[int] = []
    handle = lm.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        first = LLMJudge(lm, cache_dir=tmp_path).verdicts(ITEMS)
        assert calls and (tmp_path / f"{lm.fingerprint}-judge-v1.jsonl").is_file()
        calls.clear()
        again = LLMJudge(lm, cache_dir=tmp_path)
        assert again.verdicts(ITEMS) == first and again.forward_passes == 0 and calls == []
        # one new item: only it is judged (the instructions' prefill, its item, its questions)
        more = again.verdicts([*ITEMS, JudgeItem("hey", "hello there", "informal", "formal")])
        assert more[: len(ITEMS)] == first and again.forward_passes == 3
    finally:
        handle.remove()
    entries = [json.loads(line) for line in (tmp_path / f"{lm.fingerprint}-judge-v1.jsonl").read_text().splitlines()]
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


def test_steer_eval_judge_llm_prints_rates_and_sentences(tmp_path: Path, saved_model: Path) -> None:
    records = _records(tmp_path / "out.jsonl", "smollm2-135m", "elsewhere")
    args = ["eval", str(records), "--metrics", "copy", "--judge", f"llm:{saved_model}"]
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
