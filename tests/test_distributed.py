"""Several processes equal one: profiling (gloo via accelerate) gives the same profile, transfer the
same JSONL bytes; a killed transfer resumed with --resume writes the same file as an uninterrupted one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL, profile_args

from steer.cli import cli
from steer.distributed import shard_indices
from steer.profile import StyleProfile, shard
from steer.records import PartialRecords


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


def _transfer_args(prof: Path, inputs: Path) -> list[str]:
    return ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-i", str(inputs),
            "--max-new-tokens", "4", "--batch-size", "2", "-q"]  # fmt: skip


def _profiled(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> tuple[Path, Path]:
    prof = tmp_path / "p.safetensors"
    subprocess.run([sys.executable, "-m", "steer", *profile_args(saved_model, corpus_files), "-o", str(prof), "-q"],
                   check=True, capture_output=True)  # fmt: skip
    inputs = tmp_path / "in.txt"  # a blank line stays a blank record
    inputs.write_text("\n".join([*FORMAL[:3], "", *FORMAL[3:], *INFORMAL[:3]]) + "\n", encoding="utf-8")
    return prof, inputs


def test_shard_indices_balance_lengths_and_cover_every_input() -> None:
    lengths = [5, 1, 9, 3, 7, 2, 8]
    parts = [shard_indices(lengths, rank, 3) for rank in range(3)]
    assert sorted(sum(parts, [])) == list(range(7))
    assert parts[0] == [2, 0, 1]  # lengths 9 8 7 5 3 2 1 dealt round robin: 9, 5, 1
    assert shard(["aa", "b", "ccc"], 0, 2) == ["ccc", "b"]  # profiling's shards use the same helper


def test_transfer_two_processes_write_the_same_records(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    base = [sys.executable, "-m", "steer", *_transfer_args(prof, inputs)]
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    subprocess.run([*base, "-o", str(one)], check=True, capture_output=True)
    done = subprocess.run([*base, "-o", str(two), "--processes", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert two.read_bytes() == one.read_bytes()
    assert not list(tmp_path.glob("two.jsonl.partial*"))


def test_killed_then_resumed_transfer_equals_an_uninterrupted_one(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    assert CliRunner().invoke(cli, [*args, "-o", str(whole)]).exit_code == 0
    calls = []
    original = PartialRecords.append

    def crash_after_two_batches(self: PartialRecords, items: Any) -> None:
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(items))
        original(self, items)

    monkeypatch.setattr(PartialRecords, "append", crash_after_two_batches)
    killed = CliRunner().invoke(cli, [*args, "-o", str(cut)])
    assert killed.exit_code == 130 and not cut.exists()
    partial = tmp_path / "cut.jsonl.partial"
    assert len(partial.read_text().splitlines()) == 1 + 4  # header + two batches of two
    monkeypatch.setattr(PartialRecords, "append", original)
    again = CliRunner().invoke(cli, [*args, "-o", str(cut)])
    assert again.exit_code == 1 and "--resume" in again.output and partial.exists()
    other = CliRunner().invoke(cli, [*args, "--max-new-tokens", "5", "-o", str(cut), "--resume"])
    assert other.exit_code == 1 and "other settings" in other.output
    resumed = CliRunner().invoke(cli, [*args, "-o", str(cut), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert cut.read_bytes() == whole.read_bytes()
    assert not partial.exists()


def test_transfer_processes_need_an_output(tmp_path: Path, saved_model: Path) -> None:
    """Checked before any model loads: the profile path does not even have to exist."""
    base = ["transfer", "-p", str(tmp_path / "none.safetensors"), "--from", "a", "--to", "b", "hello"]
    for extra in (["--processes", "2"], ["--resume"], ["--resume", "--compare", "-o", str(tmp_path / "x.jsonl")]):
        result = CliRunner().invoke(cli, [*base, *extra])
        assert result.exit_code == 1 and "write through -o FILE" in result.output, result.output
    bad = CliRunner().invoke(cli, [*base, "--processes", "0", "-o", str(tmp_path / "x.jsonl")])
    assert bad.exit_code == 1 and "--processes must be at least 1" in bad.output
