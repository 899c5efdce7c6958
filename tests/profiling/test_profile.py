"""Counting: equals a naive reference, invariant to batch size and padding side, never counts padding;
the profile's styles and recorded corpora are checked before any model loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FORMAL, INFORMAL, one_line_error, run, transfer_args

from steer.errors import SteerError
from steer.model.hooks import record_activations
from steer.profiling.profile import count_activations, make_batches, tokenize
from steer.settings import ProfileSettings

TEXTS = FORMAL + INFORMAL


def naive_counts(lm: Any, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One text at a time, no padding, a plain forward hook per site: the reference."""
    fired = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.int64)
    sums = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.float64)
    tokens = 0
    seen: dict[int, torch.Tensor] = {}
    handles = [
        site.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out.detach()))
        for i, site in enumerate(lm.activation_sites())
    ]
    try:
        for text in texts:
            ids = torch.tensor([lm.tokenizer(text)["input_ids"]])
            tokens += ids.shape[1]
            with torch.no_grad():
                lm.model(input_ids=ids)
            for i, act in seen.items():
                act = act.reshape(-1, lm.num_neurons)
                fired[i] += (act > 0).sum(0)
                sums[i] += act.double().sum(0)
    finally:
        for h in handles:
            h.remove()
    return fired, sums, tokens


def test_counts_equal_naive_reference(lm: Any) -> None:
    counts, truncated = count_activations(lm, "x", TEXTS, ProfileSettings(batch_size=4))
    fired, sums, tokens = naive_counts(lm, TEXTS)
    assert truncated == 0
    assert counts.num_tokens == tokens and counts.num_texts == len(TEXTS)
    assert torch.equal(counts.fired, fired)
    assert torch.allclose(counts.sums, sums, rtol=1e-5, atol=1e-5)
    assert 0 < counts.fired.sum() < tokens * lm.num_layers * lm.num_neurons  # neither all nor nothing fired


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_counts_invariant_to_batch_size_and_padding_side(lm: Any, padding_side: str) -> None:
    one, _ = count_activations(lm, "x", TEXTS, ProfileSettings(batch_size=1))
    seven, _ = count_activations(lm, "x", TEXTS, ProfileSettings(batch_size=7, padding_side=padding_side))
    assert one.num_tokens == seven.num_tokens
    assert torch.equal(one.fired, seven.fired)
    assert torch.allclose(one.sums, seven.sums, rtol=1e-5, atol=1e-5)


def test_padding_is_never_counted(llama_lm: Any) -> None:
    lm = llama_lm
    seqs, _ = tokenize(lm.tokenizer, TEXTS, 512)
    (tight,) = make_batches(seqs, len(seqs), lm.tokenizer.pad_token_id)
    extra = 5  # the same batch with five more padding columns on the right
    ids = torch.cat([tight.input_ids, torch.full((len(seqs), extra), lm.tokenizer.pad_token_id)], 1)
    mask = torch.cat([tight.attention_mask, torch.zeros(len(seqs), extra, dtype=torch.long)], 1)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    results = []
    for batch in [(tight.input_ids, tight.attention_mask, tight.position_ids), (ids, mask, positions)]:
        with record_activations(lm.model.base_model, lm.activation_sites()) as rec, torch.inference_mode():
            lm.model.base_model(input_ids=batch[0], attention_mask=batch[1], position_ids=batch[2])
        results.append((rec.result()[0], rec.num_tokens))
    assert results[0][1] == results[1][1] == sum(len(s) for s in seqs)
    assert torch.equal(results[0][0], results[1][0])


def test_truncation_is_counted(llama_lm: Any) -> None:
    counts, truncated = count_activations(llama_lm, "x", TEXTS, ProfileSettings(max_length=3))
    assert truncated == sum(len(t.split()) > 3 for t in TEXTS)
    assert counts.num_tokens == sum(min(len(t.split()), 3) for t in TEXTS)


def test_batches_are_length_sorted_and_masked() -> None:
    batches = make_batches([[1], [1, 2, 3], [], [4, 5]], batch_size=2, pad_id=0, padding_side="left")
    assert [b.input_ids.tolist() for b in batches] == [[[1, 2, 3], [0, 4, 5]], [[1]]]
    assert batches[0].attention_mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert batches[0].position_ids.tolist() == [[0, 1, 2], [0, 0, 1]]


def test_zero_tokens_is_an_error(llama_lm: Any) -> None:
    # The word-level tokenizer maps "" to no tokens at all.
    with pytest.raises(SteerError, match="zero tokens"):
        count_activations(llama_lm, "empty", [""], ProfileSettings())


# 13. --from/--to are checked against the profile (and the probe) before any model loads
def test_styles_are_checked_before_a_model_loads(prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import steer.model.loading

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the styles were checked")

    monkeypatch.setattr(steer.model.loading, "load_model", no_loading)
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "casual", "hey"]
    one_line_error(run(*args), "'casual' is not in this profile")
    other = ["transfer", "-p", str(prof), "--from", "nope", "--to", "informal", "hey"]
    one_line_error(run(*other), "'nope' is not in this profile")


# 12. eval on a fresh clone: the profile's recorded corpora are missing → a note for the defaults, an error
#     naming --train-style when accuracy is asked for; a changed corpus is refused by its sha256 (7)
def test_eval_with_missing_or_changed_recorded_corpora(
    tmp_path: Path, prof: Path, corpus_files: tuple[Path, Path]
) -> None:
    out = tmp_path / "o.jsonl"
    assert run(*transfer_args(prof), "--preset", "prompt", "hey dude", "-o", str(out)).exit_code == 0
    formal, _ = corpus_files
    original = formal.read_text()
    formal.write_text("a line that was not profiled\n" + original)
    changed = run("eval", str(out), "--metrics", "accuracy")
    one_line_error(changed, "sha256 differs")
    assert "--train-style" in changed.output
    formal.unlink()
    quiet = run("eval", str(out), "--fluency-model", "none", "--embedder", "none")
    assert quiet.exit_code == 0, quiet.output
    assert "note: no judge" in quiet.output and "does not exist" in quiet.output
    one_line_error(run("eval", str(out), "--metrics", "accuracy"), "--train-style")
