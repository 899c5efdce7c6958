"""Metrics: equal to sacrebleu's own functions and to hand/reference computations, J from the three
per-sentence scores, fluency left out when nothing can calibrate it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import sacrebleu
from click.testing import CliRunner

from steer.cli import cli
from steer.errors import SteerError
from steer.evaluation.metrics import (
    bleu,
    chrf,
    copy_rate,
    empty_rate,
    evaluate,
    joint_score,
    length_ratio,
    parse_metrics,
    read_outputs,
    self_bleu,
)

HYPS = ["the cat sat on the mat", "a quick brown fox", "hello there friend"]
REFS1 = ["the cat is on the mat", "the quick brown fox", "hello friend"]
REFS2 = ["a cat sat on a mat", None, "hi there friend"]


def test_bleu_and_chrf_equal_sacrebleu() -> None:
    assert bleu(HYPS, [REFS1]).value == sacrebleu.corpus_bleu(HYPS, [REFS1]).score
    assert bleu(HYPS, [REFS1, REFS2]).value == sacrebleu.corpus_bleu(HYPS, [REFS1, REFS2]).score
    assert chrf(HYPS, [REFS1]).value == sacrebleu.corpus_chrf(HYPS, [REFS1]).score
    assert self_bleu(HYPS, REFS1).value == sacrebleu.corpus_bleu(HYPS, [REFS1]).score
    assert bleu(HYPS, [REFS1]).signature.startswith("nrefs:1|case:mixed")
    # A row without any reference is left out, as sacrebleu cannot score it.
    assert (
        bleu(HYPS, [[REFS1[0], None, REFS1[2]]]).value
        == sacrebleu.corpus_bleu([HYPS[0], HYPS[2]], [[REFS1[0], REFS1[2]]]).score
    )


def test_copy_rate_hand_made() -> None:
    assert copy_rate(["Hello  World", "b", "c "], ["hello world", "B.", "c"]) == pytest.approx(2 / 3)
    assert copy_rate([], []) == 0.0
    with pytest.raises(SteerError, match="2 outputs but 1 sources"):
        copy_rate(["a", "b"], ["a"])


def test_evaluate_reports_requested_metrics_only() -> None:
    out = evaluate(HYPS, sources=REFS1, references=[REFS1], metrics=["bleu", "copy"])
    assert set(out) == {"n", "bleu", "copy_rate", "signatures"}
    with pytest.raises(SteerError, match="unknown metric 'rouge'"):
        parse_metrics("bleu,rouge")
    with pytest.raises(SteerError, match="no outputs"):
        evaluate([])


def test_eval_cli_jsonl_and_errors(tmp_path: Path) -> None:
    records = [{"source_text": s, "output": h, "target_style": "b"} for s, h in zip(REFS1, HYPS, strict=True)]
    out = tmp_path / "out.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(REFS1) + "\n")
    result = CliRunner().invoke(
        cli, ["eval", str(out), "--ref", str(ref), "--metrics", "bleu,chrf,self-bleu,copy", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS1]).score and data["copy_rate"] == 0.0
    short = tmp_path / "short.txt"
    short.write_text("one line\n")
    bad = CliRunner().invoke(cli, ["eval", str(out), "--ref", str(short), "--metrics", "bleu"])
    assert bad.exit_code == 1 and "3 outputs but 1 references" in bad.output
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    bad = CliRunner().invoke(cli, ["eval", str(empty), "--metrics", "copy"])
    assert bad.exit_code == 1 and "is empty" in bad.output
    bad = CliRunner().invoke(cli, ["eval", str(out), "--metrics", "bleurt"])
    assert bad.exit_code == 1 and "unknown metric 'bleurt'" in bad.output
    assert read_outputs(out)[0]["output"] == HYPS[0]


def test_loop_rate_and_empty_and_length() -> None:
    outputs = ["ha ha ha", "fine", None, "  ", "a b c d"]
    assert evaluate(outputs, metrics=("repetition",))["repetition"] == pytest.approx(1 / 5)
    assert empty_rate(outputs) == pytest.approx(2 / 5)
    sources = ["x y", "x y", "x y", "x y", "x y"]
    assert length_ratio(outputs, sources) == pytest.approx((3 / 2 + 1 / 2 + 0 + 0 + 4 / 2) / 5)
    result = evaluate(outputs, sources=sources, metrics=["repetition", "empty", "length", "copy"])
    assert result["repetition"] == pytest.approx(0.2) and result["empty"] == pytest.approx(0.4)
    assert result["copy_rate"] == 0.0  # a missing output is empty, never the text "None"


def test_joint_score_hand_made() -> None:
    assert joint_score([1.0, 0.5], [0.8, -0.3], [1.0, 1.0]) == pytest.approx((0.8 + 0.0) / 2)  # cosine clipped at 0
    assert joint_score([0.9, 0.9], [1.0, 1.0], [0.0, 0.5]) == pytest.approx(0.225)
    assert math.isnan(joint_score([], [], []))
    with pytest.raises(SteerError):
        joint_score([1.0], [1.0, 1.0], [1.0])


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


# 10: records whose sources are all one token have nothing to calibrate fluency on: fluency and J are left out
# (steer eval notes them), the rest is scored — no error
def test_fluency_is_left_out_when_no_source_has_two_tokens(llama_lm: Any) -> None:
    from steer.evaluation.metrics import Scorers, evaluate

    one_token = [llama_lm.tokenizer.decode([llama_lm.tokenizer.convert_tokens_to_ids("a")])]
    assert len(llama_lm.tokenizer(one_token[0], add_special_tokens=False)["input_ids"]) == 1
    result = evaluate(["a b c"], sources=one_token, metrics=["ppl", "j"], scorers=Scorers(fluency_lm=llama_lm),
                      per_sentence=True)  # fmt: skip
    assert "ppl" in result and "j" not in result and "fluency" not in result["sentences"]
