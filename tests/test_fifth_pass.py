"""What the fifth hostile pass found (issue 43): `steer run -o DIR` writing over a user's own files in
DIR, a config `name` used as a path, `steer eval` grading records of several target styles against
the first one's, and rerank's options silently ignored where the default is the plain prompt — each
at the level a user meets it: one line, the exit code, and every file there before unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_experiment import _config
from test_hostile import files_in, refused
from test_hostile import no_model as no_model  # a fixture

from steer.cli import cli
from steer.runs.rundir import MARKER


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


def test_a_config_name_that_is_a_path_is_refused(tmp_path: Path, saved_model: Path, no_model: None) -> None:
    cfg = _config(tmp_path, saved_model)
    cfg.write_text(cfg.read_text().replace('name = "tiny"', 'name = "../x"'))
    result = CliRunner().invoke(cli, ["run", str(cfg), "-q"])
    refused(result, "name '../x' is not a plain name")
    assert not (tmp_path / "x").exists()


def test_eval_of_records_of_two_directions_is_refused_unless_one_target_is_given(tmp_path: Path) -> None:
    data = tmp_path / "both.jsonl"
    rows = [("formal", "informal", "hey"), ("formal", "informal", "yo"), ("informal", "formal", "Good day.")]
    records = [{"output": o, "source_text": o, "source_style": s, "target_style": t} for s, t, o in rows]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, ["eval", str(data), "--metrics", "length"])
    refused(result, f"{data}: line 3 is a informal → formal rewrite but line 1 is formal → informal")
    assert files_in(tmp_path) == before
    graded = CliRunner().invoke(cli, ["eval", str(data), "--metrics", "length", "--target", "informal", "--json"])
    assert graded.exit_code == 0, graded.output
    assert set(json.loads(graded.stdout)) >= {"length"}


@pytest.mark.parametrize(
    ("option", "named"),
    [
        (["--ladder", "0,2"], "--ladder 0,2"),
        (["--style-exponent", "1"], "--style-exponent 1"),
        (["--length-weight", "0.3"], "--length-weight 0.3"),
        (["--score-only"], "--score-only"),
    ],
)
def test_rerank_options_where_the_read_default_is_the_plain_prompt_are_refused(
    tmp_path: Path, prof: Path, no_model: None, option: list[str], named: str
) -> None:
    from steer.profiling.defaults import write_read_defaults

    entry = {"preset": "prompt", "read": "docs/reads/x", "n": 20, "usable": {"prompt": 6, "rerank": 3}}
    write_read_defaults(prof, {"formal->informal": entry}, force=False)
    out = tmp_path / "o.jsonl"
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(out), *option, "hello"]
    before = files_in(tmp_path)
    refused(
        CliRunner().invoke(cli, args),
        f"{named} ranks rerank candidates, but the recipe is --preset prompt (this direction's read default); "
        "add --preset rerank or drop it",
    )
    refused(
        CliRunner().invoke(cli, [*args, "--preset", "guided"]),
        f"{named} ranks rerank candidates, but the recipe is --preset guided; add",
    )
    assert files_in(tmp_path) == before


def test_eval_says_what_an_unmeasured_judge_accuracy_means_and_resume_says_it_starts_over(
    tmp_path: Path, prof: Path
) -> None:
    from conftest import FORMAL
    from test_reliability import run, transfer_args

    out = tmp_path / "o.jsonl"
    made = run(*transfer_args(prof), "--preset", "prompt", FORMAL[0], "-o", str(out), "--resume")
    assert made.exit_code == 0, made.output
    assert "--resume found no finished rewrites of this recipe and input; starting from the first text" in made.output
    result = run("eval", str(out), "--fluency-model", "none", "--embedder", "none")
    assert result.exit_code == 0, result.output
    shown = next(line for line in result.output.splitlines() if line.startswith("judge tfidf held-out"))
    assert "n/a (too few training texts to hold any out" in shown and "nan" not in shown
