"""Multi-process profiling on CPU (gloo via accelerate) equals the single-process profile exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from conftest import profile_args

from steer.neurons import StyleProfile
from steer.profile import shard


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
