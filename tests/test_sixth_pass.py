"""What the sixth fresh-clone hostile pass (issue 43) and the fifth's leftovers found — each at the
level a user meets it: one line, the exit code, and every file there before unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_distributed import _whole_run
from test_fourth_pass import _with_append_hook

from steer.cli import cli


# B3: the partial file removed, then the run interrupted before its next batch (Ctrl-C): the batches it
# finished are put back as it stops, so --resume still gives the uninterrupted file
def test_a_partial_file_removed_then_interrupted_keeps_every_finished_batch(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args, whole = _whole_run(tmp_path, saved_model, corpus_files)
    cut = tmp_path / "cut.jsonl"
    partial = cut.with_name("cut.jsonl.partial")

    def remove_then_stop() -> str:
        partial.unlink()
        return "stop"

    _with_append_hook(monkeypatch, {2: remove_then_stop})  # two batches of two written, then both lost
    assert CliRunner().invoke(cli, [*args, "-o", str(cut)]).exit_code == 130
    kept = [json.loads(line) for line in partial.read_text().splitlines()]
    assert "partial_of" in kept[0] and len(kept) == 1 + 2 * 2  # the header and the two finished batches
    monkeypatch.undo()
    resumed = CliRunner().invoke(cli, [*args, "-o", str(cut), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert cut.read_bytes() == whole.read_bytes()
