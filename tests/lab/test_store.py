"""The run directory's store (`steer.lab.store`): its key, reuse across labels, resume per batch, older formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import _config

from steer.cli import cli
from steer.lab.experiment import load_experiment
from steer.lab.rundir import RunDir


def test_the_run_store_key_is_one_function_with_a_format_version(monkeypatch: Any) -> None:
    """Every settings field is in the key (a field added later too), and the format version: a
    change that makes stored rewrites stale raises STORE_FORMAT instead of listing exceptions."""
    from dataclasses import fields, replace

    from steer.lab import store
    from steer.lab.experiment import Direction
    from steer.settings import TransferSettings

    direction = Direction("formal", "informal", ("a text",), ())
    base = TransferSettings.preset("guided")
    key = store._settings_key(base, direction)
    assert key.startswith(f"s{store.STORE_FORMAT}-")
    changed = {"keep_words": 2.0, "guidance": 2.5, "no_repeat_ngram": 3, "examples": 2, "strength": 3.0}
    assert {f.name for f in fields(TransferSettings)} >= set(changed)
    for name, value in changed.items():
        assert store._settings_key(replace(base, **{name: value}), direction) != key, name
    monkeypatch.setattr(store, "STORE_FORMAT", store.STORE_FORMAT + 1)
    assert store._settings_key(base, direction) != key


def test_an_edited_packaged_prompt_changes_the_key_of_its_direction_only(monkeypatch: Any) -> None:
    """Outputs stored with a packaged template's old wording are not reused once it is edited;
    directions whose template is unchanged keep their keys."""
    from steer import prompts
    from steer.lab import store
    from steer.lab.experiment import Direction
    from steer.settings import TransferSettings

    settings = TransferSettings.preset("guided")
    edited = Direction("modern", "shakespearean", ("a text",), ())
    kept = Direction("formal", "informal", ("a text",), ())
    before = store._settings_key(settings, edited), store._settings_key(settings, kept)
    packaged = prompts.load_prompts()
    changed = {**packaged, "modern->shakespearean": "Rewrite this line as Shakespeare would.\n\n{text}"}
    monkeypatch.setattr(prompts, "load_prompts", lambda path=None: changed)
    assert store._settings_key(settings, edited) != before[0]
    assert store._settings_key(settings, kept) == before[1]


def test_outputs_are_reused_across_labels_only_for_identical_settings(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from steer.generation.steerer import Steerer
    from steer.lab.runner import Runner
    from steer.model.loading import load_model

    exp = load_experiment(_config(tmp_path, saved_model))
    runner = Runner(exp, tmp_path / "out", load_model(str(saved_model), progress=False), progress=False)
    direction, settings = exp.directions[0], replace(exp.base, mode="deactivate")
    first = runner.rewrites.transfer(direction, settings, "a")
    calls: list[int] = []
    original = Steerer.transfer_candidates
    monkeypatch.setattr(
        Steerer, "transfer_candidates", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    assert runner.rewrites.transfer(direction, settings, "b") == first and calls == []
    assert (tmp_path / "out" / "outputs" / f"{direction.name}.b.jsonl").is_file()
    runner.rewrites.transfer(direction, replace(settings, top_k="5%"), "c")
    assert calls == [1]


def test_an_interrupted_run_resumes_per_batch_and_writes_what_a_whole_run_writes(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped after its first decoded batch keeps that batch in the label files' partial
    files; run again it decodes only the texts it had not, and the outputs are byte for byte those
    of a run never interrupted (rerank rungs decoded together included); no partial file remains."""
    from steer.generation.steerer import Steerer

    cfg = _config(tmp_path, saved_model, "[rerank]\nladder = [0, 1, 2]\n")
    cfg.write_text(cfg.read_text().replace('"deactivate", "deactivate+contrast"]', '"rerank"]'))
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert CliRunner().invoke(cli, ["run", str(cfg), "-o", str(whole), "-q"]).exit_code == 0
    decode_batch, decoded = Steerer._decode_batch, []

    def counting(self: Any, plan: Any, texts: Any, rows: list[int], *shared: Any) -> Any:
        if fail_after is not None and len(decoded) == fail_after:
            raise RuntimeError("killed mid-run")
        decoded.append(len(rows))
        return decode_batch(self, plan, texts, rows, *shared)

    monkeypatch.setattr(Steerer, "_decode_batch", counting)
    fail_after: int | None = 1
    stopped = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(cut), "-q"])
    assert stopped.exit_code != 0 and "killed mid-run" in str(stopped.exception)
    assert decoded == [2] and [p.name for p in (cut / "outputs").iterdir()] == ["formal-informal.prompt.jsonl.partial"]
    fail_after, decoded = None, []
    assert CliRunner().invoke(cli, ["run", str(cfg), "-o", str(cut), "-q"]).exit_code == 0
    # prompt: 1 of formal→informal's 3 texts left, then all 3 of informal→formal; rerank's rungs 1 and 2 together
    assert sum(decoded) == 1 + 3 + 3 + 3
    names = sorted(p.name for p in (whole / "outputs").iterdir())
    assert names == sorted(p.name for p in (cut / "outputs").iterdir()) and not any(".partial" in n for n in names)
    for name in names:
        assert (cut / "outputs" / name).read_bytes() == (whole / "outputs" / name).read_bytes(), name
    assert (cut / "results.md").read_text() == (whole / "results.md").read_text()


def test_a_run_directory_an_older_steer_stored_is_refused_in_one_line(tmp_path: Path, saved_model: Path) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "run"
    assert CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt", "-q"]).exit_code == 0
    stored = out / "outputs" / "formal-informal.prompt.jsonl"
    lines = [json.loads(line) for line in stored.read_text().splitlines()]
    run_dir = RunDir.claim(out)
    stored.write_text("".join(json.dumps({**r, "key": r["key"].split("-", 1)[1]}) + "\n" for r in lines))
    run_dir.wrote(stored)  # as the older steer that stored it would have recorded it
    before = {p.name: p.read_bytes() for p in (out / "outputs").iterdir()}
    again = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt", "-q"])
    assert again.exit_code == 1, again.output
    assert "holds rewrites an older steer stored (another store format than" in again.output
    assert again.output.count("\n") == 1 and "Traceback" not in again.output, again.output
    assert {p.name: p.read_bytes() for p in (out / "outputs").iterdir()} == before
