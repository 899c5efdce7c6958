"""`-o FILE` output (`steer.rewriting.output`): an interrupted run resumed writes what an uninterrupted one writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import (
    _interrupted,
    _profiled,
    _transfer,
    _transfer_args,
    _whole_run,
    files_in,
    one_line_error,
    refused,
    run,
    transfer_args,
)

from steer.cli import cli
from steer.rewriting.partial import PartialRecords


def test_killed_then_resumed_transfer_equals_an_uninterrupted_one(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args, whole = _whole_run(tmp_path, saved_model, corpus_files)
    cut = tmp_path / "cut.jsonl"
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


# case 27: a resume at another batch size writes what an uninterrupted run at that size writes
def test_a_resume_at_another_batch_size_records_one_batch_size(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)  # --batch-size 2
    whole3, out = tmp_path / "whole3.jsonl", tmp_path / "out.jsonl"
    assert CliRunner().invoke(cli, [*args, "--batch-size", "3", "-o", str(whole3)]).exit_code == 0
    _interrupted(args, out, monkeypatch, batches=2)
    resumed = run(*args, "--batch-size", "3", "-o", str(out), "--resume")
    assert resumed.exit_code == 0, resumed.output
    sizes = {json.loads(line)["settings"]["batch_size"] for line in out.read_text().splitlines()}
    assert sizes == {3}
    assert out.read_bytes() == whole3.read_bytes()


# 9: --resume onto an output that exists (an interrupted --force run) says how to finish it
def test_resume_onto_an_existing_output_says_how_to_finish(tmp_path: Path, prof: Path, no_model: None) -> None:
    out = tmp_path / "o.jsonl"
    out.write_text("an earlier output\n")
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, _transfer(prof, "-o", str(out), "--resume", "Hello."))
    refused(result, "exists and no interrupted run of it is waiting to resume; pass --force (without --resume)")
    assert files_in(tmp_path) == before
    rewrite = json.dumps({"index": 0, "record": {}})  # a header alone holds nothing to resume (ninth pass, D1)
    (tmp_path / "o.jsonl.partial").write_text(json.dumps({"partial_of": "o.jsonl", "key": "k"}) + "\n" + rewrite + "\n")
    before = files_in(tmp_path)  # an interrupted --force run: its rewrites wait in the partial file
    result = CliRunner().invoke(cli, _transfer(prof, "-o", str(out), "--resume", "Hello."))
    refused(result, "--resume never replaces a file: to finish an interrupted --force run, move")
    assert files_in(tmp_path) == before


# 8. --keep-candidates needs a JSONL output
def test_keep_candidates_needs_a_jsonl_output(tmp_path: Path, prof: Path) -> None:
    one_line_error(run(*transfer_args(prof), "--keep-candidates", "hey"), "add -o FILE.jsonl")
    one_line_error(run(*transfer_args(prof), "--keep-candidates", "-o", str(tmp_path / "o.txt"), "hey"), "FILE.jsonl")
