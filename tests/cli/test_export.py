"""`steer export`: what it writes, what --force may replace, the umask, checks before the model loads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import _profile_file, _steering, files_in, refused, run
from conftest import one_line_error_exit_1 as one_line_error

from steer.cli import cli


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def test_export_cli(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    prof = _profile_file(tmp_path, saved_model, corpus_files)
    target = tmp_path / "edited"
    args = ["export", *_steering(prof), "-o", str(target)]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file()
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 1 and "--force" in again.output
    assert CliRunner().invoke(cli, [*args, "--mode", "prompt", "--force"]).exit_code == 1


# 4. export --force replaces only an earlier export, never '.', and survives leftovers
def test_export_force_replaces_only_exports(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = ["export", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "-q"]
    users = tmp_path / "users-dir"
    users.mkdir()
    (users / "thesis.tex").write_text("precious")
    one_line_error(run(*base, "-o", str(users), "--force"), "not a 'steer export' directory")
    assert (users / "thesis.tex").read_text() == "precious"
    monkeypatch.chdir(tmp_path)
    one_line_error(run(*base, "-o", ".", "--force"), "current directory")
    target = tmp_path / "edited"
    (tmp_path / ".edited.old").mkdir()  # a leftover of an older steer must not break --force
    assert run(*base, "-o", str(target)).exit_code == 0
    assert run(*base, "-o", str(target), "--force").exit_code == 0
    assert (target / "steer_edit.json").is_file()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".edited.") and p.name != ".edited.old"]
    assert leftovers == []


# issue 43, case 1: --force onto an earlier export never deletes the profile it reads from inside it,
# nor a user's file added to it
def test_export_force_deletes_nothing_it_did_not_write(tmp_path: Path, prof: Path) -> None:
    base = ["export", "--from", "formal", "--to", "informal", "--top-k", "10%", "-q"]
    exp = tmp_path / "exp"
    assert run(*base, "-p", str(prof), "-o", str(exp)).exit_code == 0
    inside = exp / "inside.safetensors"
    inside.write_bytes(prof.read_bytes())
    before = _snapshot(exp)
    one_line_error(run(*base, "-p", str(inside), "-o", str(exp), "--force"), "holds the profile")
    assert _snapshot(exp) == before
    inside.unlink()
    (exp / "notes.txt").write_text("mine")
    before = _snapshot(exp)
    one_line_error(
        run(*base, "-p", str(prof), "-o", str(exp), "--force"), "holds notes.txt, which 'steer export' did not write"
    )
    assert _snapshot(exp) == before
    (exp / "notes.txt").unlink()
    assert run(*base, "-p", str(prof), "-o", str(exp), "--force").exit_code == 0  # its own files only: replaced


# 5. an interrupted export (SIGTERM or Ctrl-C) leaves no hidden directory behind
def test_interrupted_export_leaves_no_debris(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import PreTrainedModel

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", interrupted)
    target = tmp_path / "edited"
    result = run("export", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "-o", str(target))
    assert result.exit_code == 130 and "steer: interrupted" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["formal.txt", "informal.txt", "p.safetensors", "tiny-llama"]


# 15. exports are readable by others, as the umask allows
def test_export_directory_follows_the_umask(tmp_path: Path, prof: Path) -> None:
    target = tmp_path / "edited"
    old = os.umask(0o022)
    try:
        result = run(
            "export", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "-o", str(target)
        )
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert target.stat().st_mode & 0o777 == 0o755


# case 25: an export's files all have the permissions open() gives under the umask
def test_an_export_is_readable_under_the_umask(tmp_path: Path, prof: Path) -> None:
    old = os.umask(0o022)
    try:
        result = run("export", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(tmp_path / "exp"))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    modes = {
        str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777
        for p in [tmp_path / "exp", *(tmp_path / "exp").rglob("*")]
    }
    assert modes["exp/model.safetensors"] == 0o644
    assert all(m == (0o755 if (tmp_path / name).is_dir() else 0o644) for name, m in modes.items()), modes


# issue 43, case 24: steer export checks --from/--to against the profile before the model loads
def test_export_checks_the_styles_before_the_model_loads(tmp_path: Path, prof: Path, no_model: None) -> None:
    before = files_in(tmp_path)
    target = tmp_path / "exp"
    for given in (["--from", "formal", "--to", "pirate"], ["--from", "pirate", "--to", "informal"]):
        result = run("export", "-p", str(prof), *given, "-o", str(target), "-q")
        refused(result, "style 'pirate' is not in this profile; its styles: formal, informal")
    assert not target.exists() and files_in(tmp_path) == before
