"""Metrics: equal to sacrebleu's own functions and to hand/reference computations."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import sacrebleu
import torch
from click.testing import CliRunner

from steer.cli import cli
from steer.config import SteerError
from steer.evaluation.metrics import (
    bleu,
    chrf,
    copy_rate,
    evaluate,
    parse_metrics,
    read_outputs,
    self_bleu,
)
from steer.scoring.encoders import Embedder
from steer.scoring.fluency import perplexity
from steer.scoring.judges import StyleClassifier

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


def test_classifier_separates_a_trivial_corpus() -> None:
    a = [f"the cat number {i} purrs softly" for i in range(60)]
    b = [f"dude {i} lol gimme that asap" for i in range(60)]
    clf = StyleClassifier({"cats": a, "slang": b})
    assert clf.heldout_accuracy == 1.0 and clf.heldout_size == 12
    assert clf.accuracy(["a cat purrs", "lol dude"], "cats") == 0.5
    with pytest.raises(SteerError, match="not 'dogs'"):
        clf.accuracy(["x"], "dogs")


def test_perplexity_equals_reference(llama_lm: Any) -> None:
    texts = ["hey dude send it", "thou shalt not", "i would be grateful if you could reply ."]
    nll, n = 0.0, 0
    for t in texts:
        ids = torch.tensor([llama_lm.tokenizer(t)["input_ids"]])
        with torch.no_grad():
            logits = llama_lm.model(input_ids=ids).logits
        nll += torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum").item()
        n += ids.shape[1] - 1
    assert perplexity(llama_lm, texts, batch_size=2) == pytest.approx(math.exp(nll / n), rel=1e-5)


def test_embedder_similarity() -> None:
    emb = Embedder()
    assert emb.similarity(["a cat sat on the mat"], ["a cat sat on the mat"]) == pytest.approx(1.0, abs=1e-5)
    close = emb.similarity(["a cat sat on the mat"], ["the cat is sitting on the mat"])
    far = emb.similarity(["a cat sat on the mat"], ["quarterly revenue exceeded forecasts"])
    assert close > far


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
