"""What the seventh fresh-clone hostile pass (issue 43) found — each at the level a user meets it:
one line, the exit code, and every file there before unchanged."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_experiment import _config
from test_hostile import METRICS, _write_run, files_in, refused
from test_hostile import no_model as no_model  # a fixture

from steer.cli import cli


# 1: a tuned.json changed by hand after 'steer tune' wrote it: one line naming the file and the bad value
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: {**d, "chosen": {}}, "chooses nothing for any direction"),
        (lambda d: {**d, "trials": [{"direction": "a-b", "metrics": {}}]}, "trial 0 lacks its settings or metrics"),
        (lambda d: {**d, "trials": [{**d["trials"][0], "direction": "x-y"}]}, "trial 0 names direction 'x-y'"),
        (lambda d: {**d, "trials": "all"}, "'trials' is str, not a list"),
        (lambda d: {**d, "similarity_floor": "abc"}, "similarity_floor is 'abc', not a number"),
        (lambda d: {**d, "trials": [{**d["trials"][0], "metrics": {"j": "high"}}]}, "trial 0 metrics 'j' is 'high'"),
    ],
)
def test_report_on_a_tuned_json_changed_by_hand_is_one_line(tmp_path: Path, change: Any, message: str) -> None:
    run_dir = _write_run(tmp_path / "run", METRICS)
    tuned = run_dir / "tuned.json"
    tuned.write_text(json.dumps(change(json.loads(tuned.read_text()))))
    before = files_in(tmp_path)
    refused(CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(tmp_path / "doc.md")]), message)
    assert files_in(tmp_path) == before


# 2, 3, 7: [tune] values that are not numbers, count backwards or name no candidate, checked when the config is read
@pytest.mark.parametrize(
    ("tune", "message"),
    [
        ('limit = "ten"', "[tune] limit 'ten' is not valid; give a whole number ≥ 1"),
        ("limit = -3", "[tune] limit -3 is not valid"),
        ("limit = 0", "[tune] limit 0 is not valid"),
        ("start = 1.5", "[tune] start 1.5 is not valid; give a whole number ≥ 0"),
        ('similarity_floor = "abc"', "[tune] similarity_floor 'abc' is not valid; give a positive number"),
        ("ppl_ceiling = -1.0", "[tune] ppl_ceiling -1.0 is not valid"),
        ("candidates = [5]", "[tune] candidate 5 is neither a preset name nor a table"),
        ('candidates = "guided"', "[tune] candidates 'guided' is not valid; give a non-empty list"),
        ("candidates = []", "[tune] candidates [] is not valid"),
        ('candidates = ["guided", "guided"]', "[tune] candidate 'guided' is listed twice"),
    ],
)
def test_tune_values_are_checked_when_the_config_is_read(
    tmp_path: Path, saved_model: Path, no_model: None, tune: str, message: str
) -> None:
    cfg = _config(tmp_path, saved_model)  # its [tune] table is the last one: the changed key replaces its own line
    key = tune.split(" =")[0]
    lines = [line for line in cfg.read_text().splitlines() if not line.startswith(f"{key} =")]
    cfg.write_text("\n".join([*lines, tune]) + "\n")
    out = tmp_path / "run"
    refused(CliRunner().invoke(cli, ["tune", str(cfg), "-o", str(out)]), message)
    assert not out.exists()


# 4: the guards objective without the metrics it guards with: said in a warning before the model loads
@pytest.mark.parametrize(("metrics", "missing"), [('["accuracy", "ppl"]', "similarity"),
                                                  ('["accuracy", "similarity"]', "ppl")])  # fmt: skip
def test_guards_without_the_metrics_they_guard_with_are_warned_about(
    tmp_path: Path, saved_model: Path, metrics: str, missing: str, caplog: pytest.LogCaptureFixture
) -> None:
    from steer.runs.experiment import load_experiment
    from steer.runs.tuning import check_tunable

    cfg = _config(tmp_path, saved_model, extra='objective = "guards"')  # inside its [tune] table
    every = 'metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]'
    cfg.write_text(cfg.read_text().replace(every, f"metrics = {metrics}"))
    with caplog.at_level("WARNING", logger="steer.runs.tuning"):
        check_tunable(load_experiment(cfg))
    assert f"'guards' will not check {missing}" in caplog.text and f"add '{missing}' to metrics" in caplog.text


# 5: one rung weighed twice under two spellings (3 and 3.0)
def test_a_rung_weighed_twice_under_two_spellings_is_refused(prof: Path, no_model: None) -> None:
    args = ["--preset", "rerank", "--ladder", "0,3", "--rung-weights", "3=2,3.0=4", "Hello."]
    result = CliRunner().invoke(cli, ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-q", *args])
    refused(result, "weigh rung 3 twice ('3.0' is the same rung)")


# 10: a mode named twice in --modes is blamed on --modes, not on the config
def test_a_mode_named_twice_on_the_command_line_names_the_option(
    tmp_path: Path, saved_model: Path, no_model: None
) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt,prompt"])
    refused(result, "--modes prompt,prompt gives mode 'prompt' twice")
    assert not out.exists()


# 12: a run of the plain prompt alone: the verdict says there is nothing to compare, not an empty table
def test_the_verdict_of_a_prompt_only_run_says_there_is_nothing_to_compare(tmp_path: Path) -> None:
    from steer.runs.records import RunResults

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    row = {"direction": "a-b", "source": "a", "target": "b", "mode": "prompt", "settings": {"mode": "prompt"}}
    RunResults("toy", "tiny", "f00", [{**row, "metrics": METRICS}], judge="tfidf").write(run_dir / "results.json")
    out = tmp_path / "doc.md"
    result = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "No steered mode ran beside the plain prompt in one direction" in text and "| target? |" not in text


# 13: a trade-off chart path that is a symbolic link or a folder: said as such, nothing replaced
@pytest.mark.parametrize("kind", ["link", "folder"])
def test_a_chart_path_that_is_a_link_or_a_folder_is_named_as_such(tmp_path: Path, kind: str) -> None:
    run_dir = _write_run(tmp_path / "run", METRICS)
    chart = tmp_path / "doc-tradeoff.png"
    if kind == "link":
        (tmp_path / "mine.png").write_text("a user's picture\n")
        os.symlink(tmp_path / "mine.png", chart)
    else:
        chart.mkdir()
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(tmp_path / "doc.md"), "--force"])
    refused(result, "is a symbolic link" if kind == "link" else "is not a regular file")
    assert files_in(tmp_path) == before and (chart.is_symlink() if kind == "link" else chart.is_dir())
