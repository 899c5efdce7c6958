"""Several processes equal one: profiling (gloo via accelerate) gives the same profile, transfer the
same JSONL bytes, eval, run and tune the same scores; shards balance lengths and cover every input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FORMAL, INFORMAL, _profiled, _transfer_args, profile_args

from steer.distributed import shard_indices
from steer.profiling.profile import StyleProfile, shard


def test_shards_partition_the_corpus() -> None:
    texts = [f"t{i}" * (i % 5 + 1) for i in range(11)]
    parts = [shard(texts, i, 3) for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(texts)
    assert [len(p) for p in parts] == [4, 4, 3]


def test_two_processes_equal_one(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    base = [sys.executable, "-m", "steer", *profile_args(saved_model, corpus_files), "--batch-size", "2", "-q"]
    one, two = tmp_path / "one.safetensors", tmp_path / "two.safetensors"
    subprocess.run([*base, "-o", str(one)], check=True, capture_output=True)
    done = subprocess.run([*base, "-o", str(two), "--processes", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = StyleProfile.load(one), StyleProfile.load(two)
    for style in a.styles:
        assert torch.equal(a.counts[style].fired, b.counts[style].fired)
        assert a.counts[style].num_tokens == b.counts[style].num_tokens
        assert a.counts[style].num_texts == b.counts[style].num_texts
        torch.testing.assert_close(
            a.counts[style].sums, b.counts[style].sums, rtol=1e-5, atol=1e-5
        )  # float32 batch sums
    assert a.corpora == b.corpora


def test_shard_indices_balance_lengths_and_cover_every_input() -> None:
    lengths = [5, 1, 9, 3, 7, 2, 8]
    parts = [shard_indices(lengths, rank, 3) for rank in range(3)]
    assert sorted(sum(parts, [])) == list(range(7))
    assert parts[0] == [2, 0, 1]  # lengths 9 8 7 5 3 2 1 dealt round robin: 9, 5, 1
    assert shard(["aa", "b", "ccc"], 0, 2) == ["ccc", "b"]  # profiling's shards use the same helper


@pytest.mark.parametrize("sampling", [[], ["--preset", "prompt", "--temperature", "1.5", "--seed", "7"]])
def test_transfer_two_processes_write_the_same_records(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], sampling: list[str]
) -> None:
    """Greedy, and sampled too: each text draws from its own (seed, text) generator, not the process's."""
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    base = [sys.executable, "-m", "steer", *_transfer_args(prof, inputs), *sampling]
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    subprocess.run([*base, "-o", str(one)], check=True, capture_output=True)
    done = subprocess.run([*base, "-o", str(two), "--processes", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert two.read_bytes() == one.read_bytes()
    assert not list(tmp_path.glob("two.jsonl.partial*"))


def _numbers_close(a: Any, b: Any, path: str = "") -> None:
    """Equal structures; floats equal to 1e-6, relative or absolute (float32 batches of other sizes sum
    in another order, and a mean cosine near 0 — a similarity of 0.057 — carries float32's absolute
    error of about 1e-7, which is more than 1e-6 of the value)."""
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-6, nan_ok=True), path
    elif isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), path
        for key in a:
            _numbers_close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _numbers_close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_eval_two_processes_score_like_one(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    prof, _ = _profiled(tmp_path, saved_model, corpus_files)
    outputs, sources = tmp_path / "out.txt", tmp_path / "src.txt"
    outputs.write_text("\n".join([*INFORMAL[:5], "", FORMAL[0]]) + "\n", encoding="utf-8")  # an empty output too
    sources.write_text("\n".join([*FORMAL, *INFORMAL[:2]]) + "\n", encoding="utf-8")
    base = [sys.executable, "-m", "steer", "eval", str(outputs), "--src", str(sources), "--target", "informal",
            "-p", str(prof), "--classifier", "tfidf", "--fluency-model", str(saved_model), "--json",
            "--metrics", "accuracy,ppl,similarity,j,repetition"]  # fmt: skip
    one = subprocess.run(base, capture_output=True, text=True)
    two = subprocess.run([*base, "--processes", "2"], capture_output=True, text=True)
    assert one.returncode == 0 and two.returncode == 0, two.stderr[-2000:]
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert {"accuracy", "ppl", "similarity", "j", "repetition"} <= set(a)
    _numbers_close(a, b)


def test_run_and_tune_two_processes_equal_one(tmp_path: Path, saved_model: Path) -> None:
    """Profile, probe, tuning, every mode's decoding and the scores split over 2 processes."""
    from conftest import _config

    cfg = _config(tmp_path, saved_model)
    text = cfg.read_text().replace('modes = ["prompt", "deactivate", "deactivate+contrast"]',
                                   'modes = ["prompt", "tuned", "rerank"]')  # fmt: skip
    cfg.write_text(text.replace('metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]', 'judge = "tfidf"')
                   + "[rerank]\nladder = [0, 2]\n")  # fmt: skip
    runs = {}
    for processes in ("1", "2"):
        out = tmp_path / f"run{processes}"
        done = subprocess.run([sys.executable, "-m", "steer", "run", str(cfg), "-o", str(out), "--tune", "-q",
                               "--processes", processes], capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.count("report:") == 1  # only the main process prints
        outputs = {p.name: [r["output"] for r in map(json.loads, p.read_text().splitlines())]
                   for p in sorted((out / "outputs").glob("*.jsonl"))}  # fmt: skip
        runs[processes] = (json.loads((out / "results.json").read_text()), json.loads((out / "tuned.json").read_text()),
                           outputs)  # fmt: skip
    (results1, tuned1, outputs1), (results2, tuned2, outputs2) = runs["1"], runs["2"]
    assert outputs2 == outputs1 and len(outputs1) >= 8
    _numbers_close(results1["rows"], results2["rows"])
    _numbers_close(tuned1, tuned2)
