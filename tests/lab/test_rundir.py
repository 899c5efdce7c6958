"""The run directory (`steer.lab.rundir`): a user's files beside a run's are never replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import _config, files_in, refused

from steer.cli import cli
from steer.lab.rundir import MARKER


def _run(cfg: Path, out: Path, *extra: str) -> object:
    return CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt", "-q", *extra])


def test_a_folder_holding_a_users_results_is_refused_before_the_model_loads(
    tmp_path: Path, saved_model: Path, no_model: None
) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.md").write_text("my own results\n")
    (out / "chart.png").write_bytes(b"my chart")
    before = files_in(out)
    refused(_run(cfg, out), f"-o {out} holds chart.png, which no {MARKER} lists as a run's")
    assert files_in(out) == before and not (out / MARKER).exists()


def test_a_run_writes_beside_a_users_other_files_and_records_its_own(tmp_path: Path, saved_model: Path) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("a user's notes\n")
    assert (done := _run(cfg, out)).exit_code == 0, getattr(done, "output", "")
    assert (out / "notes.txt").read_text() == "a user's notes\n"
    recorded = json.loads((out / MARKER).read_text())["files"]
    assert {"results.json", "results.md", "samples.md", "chart.png", "profile.safetensors"} <= set(recorded)
    assert "outputs/formal-informal.prompt.jsonl" in recorded and "notes.txt" not in recorded
    # run again: its own files are its to rewrite
    assert (again := _run(cfg, out)).exit_code == 0, getattr(again, "output", "")


def test_a_users_file_put_into_a_run_directory_is_refused_and_kept(tmp_path: Path, saved_model: Path) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "run"
    assert _run(cfg, out).exit_code == 0
    (out / "samples.md").write_text("my edited samples\n")  # the user's now, not the run's
    before = files_in(out)
    refused(_run(cfg, out), f"{out / 'samples.md'} is not a file this run wrote")
    assert files_in(out) == before


def test_a_damaged_marker_and_the_working_directory_are_refused(
    tmp_path: Path, saved_model: Path, no_model: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "run"
    out.mkdir()
    (out / MARKER).write_text("not json")
    refused(_run(cfg, out), f"{out / MARKER} is damaged")
    monkeypatch.chdir(out)
    refused(_run(cfg, Path(".")), "-o . is the current directory or above it")
