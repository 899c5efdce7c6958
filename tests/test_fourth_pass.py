"""What a fresh-clone hostile pass still found after the third (issue 43): a user's link or FIFO
where steer's partial file goes, a partial file removed mid-run, nested values in results.json, a
misspelt prompt pair and `steer eval` run from another folder (config values of the wrong type are
among test_third_pass.py's config cases) — each at the level a user meets it: one line, the exit
code, and every file there before unchanged."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL, write_corpora
from test_distributed import _profiled, _transfer_args
from test_hostile import METRICS, _write_run, files_in, refused
from test_hostile import no_model as no_model  # a fixture
from test_reliability import run, transfer_args

from steer.cli import cli
from steer.runs.partial import PartialRecords


def _entries(folder: Path) -> dict[str, str]:
    """Every entry of `folder` with what it is: a link's target, a FIFO, or a file's text."""
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_symlink():
            out[p.name] = "link to " + os.readlink(p)
        elif p.is_fifo():
            out[p.name] = "fifo"
        elif p.is_file():
            out[p.name] = p.read_bytes().hex()
    return out


# F: a user's symbolic link (dangling or not) named as steer's partial file is neither followed
# nor removed — refused before the model loads
@pytest.mark.parametrize("target", ["nowhere/made.jsonl", "theirs.txt"])
def test_a_users_link_at_the_partial_name_is_refused_and_left_alone(
    tmp_path: Path, prof: Path, no_model: None, target: str
) -> None:
    (tmp_path / "theirs.txt").write_text("a user's file\n")
    out = tmp_path / "o.jsonl"
    (tmp_path / "o.jsonl.partial").symlink_to(target)
    before = _entries(tmp_path)
    refused(run(*transfer_args(prof), "hey", "-o", str(out)), "o.jsonl.partial is not a steer partial file")
    refused(run(*transfer_args(prof), "hey", "-o", str(out), "--force"), "o.jsonl.partial is not a steer partial")
    assert _entries(tmp_path) == before
    assert not (tmp_path / "nowhere").exists()


# A: a FIFO (the stand-in for a device or socket) named as the partial file: refused before any
# model loads, and never opened for writing even when it appears after that check
def test_a_fifo_at_the_partial_name_is_refused_before_loading_and_never_written(
    tmp_path: Path, prof: Path, no_model: None
) -> None:
    out = tmp_path / "o.jsonl"
    os.mkfifo(tmp_path / "o.jsonl.partial")
    before = _entries(tmp_path)
    refused(run(*transfer_args(prof), "hey", "-o", str(out)), "o.jsonl.partial is not a steer partial file")
    assert _entries(tmp_path) == before
    from steer.config import SteerError

    with pytest.raises(SteerError, match="o.jsonl.partial is not a regular file; move it away"):
        PartialRecords(out, "key").open()  # the race: made between the check and the open
    assert _entries(tmp_path) == before
    (tmp_path / "o.jsonl.partial").unlink()
    (tmp_path / "o.jsonl.partial").symlink_to("made-by-the-link")
    with pytest.raises(SteerError, match="cannot be opened as steer's partial file"):
        PartialRecords(out, "key").open()
    assert not (tmp_path / "made-by-the-link").exists()


def _with_append_hook(monkeypatch: pytest.MonkeyPatch, before_call: dict[int, Any]) -> None:
    """Run `before_call[n]()` just before the n-th (0-based) append of a partial file; a hook that
    returns "stop" makes that append a Ctrl-C."""
    original = PartialRecords.append
    calls = [0]

    def hooked(self: PartialRecords, items: Any) -> None:
        action = before_call.get(calls[0])
        calls[0] += 1
        if action is not None and action() == "stop":
            raise KeyboardInterrupt
        original(self, items)

    monkeypatch.setattr(PartialRecords, "append", hooked)


# B: the partial file removed mid-run (by hand, a cleaner) is put back whole: the run finishes as
# an uninterrupted one, and a run interrupted after the removal still resumes
def test_a_partial_file_removed_mid_run_is_put_back_and_stays_resumable(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)
    whole, out, cut = tmp_path / "whole.jsonl", tmp_path / "out.jsonl", tmp_path / "cut.jsonl"
    assert CliRunner().invoke(cli, [*args, "-o", str(whole)]).exit_code == 0

    def remover(path: Path) -> Any:
        return lambda: path.with_name(path.name + ".partial").unlink()

    _with_append_hook(monkeypatch, {2: remover(out)})
    result = CliRunner().invoke(cli, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == whole.read_bytes()
    assert not PartialRecords.files(out)

    _with_append_hook(monkeypatch, {1: remover(cut), 3: lambda: "stop"})
    assert CliRunner().invoke(cli, [*args, "-o", str(cut)]).exit_code == 130
    kept = [json.loads(line) for line in cut.with_name("cut.jsonl.partial").read_text().splitlines()]
    assert "partial_of" in kept[0] and len(kept) == 1 + 3 * 2  # the header and three batches of two
    monkeypatch.undo()
    resumed = CliRunner().invoke(cli, [*args, "-o", str(cut), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert cut.read_bytes() == whole.read_bytes()


# B, the other writer: the partial file replaced by another file mid-run stops the run with one
# line, and the other file is left as it is
def test_a_partial_file_replaced_mid_run_stops_the_run_and_is_left_alone(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    out = tmp_path / "out.jsonl"
    partial = tmp_path / "out.jsonl.partial"

    def replace() -> None:
        partial.unlink()
        partial.write_text("someone else's\n")

    _with_append_hook(monkeypatch, {1: replace})
    result = CliRunner().invoke(cli, [*_transfer_args(prof, inputs), "-o", str(out)])
    refused(result, "out.jsonl.partial was replaced by another file while this run was writing it")
    assert partial.read_text() == "someone else's\n" and not out.exists()


# C: a results.json whose metric is a list (or whose rerank is not a table) is one line
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["rows"][0]["metrics"].update(accuracy=[0.5]), "row 1's metric 'accuracy' is [0.5], not a number"),
        (lambda d: d["rows"][1]["metrics"].update(j={"a": 1}), "row 2's metric 'j' is {'a': 1}, not a number"),
        (lambda d: d["rows"][1].update(rerank=[1]), "row 2's rerank is not a table with chosen_strengths"),
        (
            lambda d: d["rows"][1].update(rerank={"chosen_strengths": {}, "probe_heldout_accuracy": "x"}),
            "row 2's rerank is not a table",
        ),
        (lambda d: d.update(judge_heldout_accuracy={"tfidf": [1]}), "judge_heldout_accuracy is not a table of numbers"),
        (lambda d: d["rows"][0].update(settings=None), "row 1's direction and mode must be names and its settings a"),
        (lambda d: d["rows"][1].update(direction=3), "row 2's direction and mode must be names"),
    ],
)
def test_report_on_results_with_nested_metrics_is_one_line(tmp_path: Path, change: Any, message: str) -> None:
    run_dir = _write_run(tmp_path / "run", METRICS)
    results = run_dir / "results.json"
    data = json.loads(results.read_text())
    change(data)
    results.write_text(json.dumps(data))
    before = files_in(tmp_path)
    refused(run("report", str(run_dir), "-o", str(tmp_path / "doc.md")), message)
    assert files_in(tmp_path) == before


# D: a misspelt direction in a prompts file's [pairs], with no default to fall back on
def test_a_misspelt_prompt_pair_is_refused_before_loading(tmp_path: Path, prof: Path, no_model: None) -> None:
    prompts = tmp_path / "prompts.toml"
    prompts.write_text('[pairs]\n"formall->informal" = "Rewrite this casually: {text}"\n')
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "--prompts", str(prompts), "hey"),
        "has no [pairs] entry 'formal->informal' and no default, so the generic prompt would be used; its pairs are "
        "formall->informal",
    )
    assert files_in(tmp_path) == before


def test_a_prompts_file_with_a_default_or_the_pair_is_used(tmp_path: Path, prof: Path) -> None:
    for text in (
        '[pairs]\n"informal->formal" = "Formal: {text}"\n"formal->informal" = "Casual: {text}"\n',
        'default = "Rewrite it as {target}: {text}"\n[pairs]\n"informal->formal" = "Formal: {text}"\n',
    ):
        prompts = tmp_path / "prompts.toml"
        prompts.write_text(text)
        result = run(*transfer_args(prof), "--preset", "prompt", "--prompts", str(prompts), "hey")
        assert result.exit_code == 0, result.output


# case 30: a profile made with relative corpus paths in one folder, its rewrites scored from another:
# steer eval finds the profile and its corpora (checked by sha256, not by name) and reports accuracy
def test_eval_from_another_folder_finds_the_profiles_relative_corpora(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "project"
    work.mkdir()
    write_corpora(work, FORMAL, INFORMAL)
    monkeypatch.chdir(work)
    made = run("profile", "--model", str(saved_model), "--style", "formal=formal.txt", "--style",
               "informal=informal.txt", "-o", "p.safetensors", "-q")  # fmt: skip
    assert made.exit_code == 0, made.output
    assert run(*transfer_args(Path("p.safetensors")), "--preset", "prompt", FORMAL[0], "-o", "o.jsonl").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "formal.txt").write_text("not the texts the profile was made on\n")  # same name, other texts
    monkeypatch.chdir(elsewhere)
    scored = run("eval", "../project/o.jsonl", "--classifier", "tfidf", "--json", "--fluency-model", "none",
                 "--embedder", "none")  # fmt: skip
    assert scored.exit_code == 0, scored.output
    assert "no judge" not in scored.output, scored.output
    assert json.loads(scored.stdout[scored.stdout.index("{") :])["accuracy"] is not None
    asked = run("eval", "../project/o.jsonl", "--metrics", "accuracy", "--classifier", "tfidf")
    assert asked.exit_code == 0 and "accuracy" in asked.output, asked.output
    (work / "formal.txt").write_text("changed since profiling\n")
    changed = run("eval", "../project/o.jsonl", "--metrics", "accuracy", "--classifier", "tfidf")
    refused(changed, "corpus formal.txt is not the file it was profiled on (sha256 differs)")


# the fifth pass: the profile's read defaults as -o, a non-UTF-8 TEXT argument, a folder as --prompts
def test_transfer_never_writes_onto_the_profiles_read_defaults(tmp_path: Path, prof: Path, no_model: None) -> None:
    from steer.profiling.defaults import defaults_path

    defaults = defaults_path(prof)
    defaults.write_text('{"steer_read_defaults": 1}\n')
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "hey", "-o", str(defaults), "--force"),
        "is the profile's read defaults, which this command reads",
    )
    assert files_in(tmp_path) == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["caf\udce9 ok"], "TEXT argument 1 is not valid UTF-8; pass UTF-8 text"),
        (["--prompts", "FOLDER", "hey"], "is a folder; pass a TOML file"),
    ],
)
def test_a_non_utf8_text_or_a_folder_of_prompts_is_one_line(
    tmp_path: Path, prof: Path, no_model: None, extra: list[str], message: str
) -> None:
    before = files_in(tmp_path)
    refused(run(*transfer_args(prof), *[str(tmp_path) if e == "FOLDER" else e for e in extra]), message)
    assert files_in(tmp_path) == before
