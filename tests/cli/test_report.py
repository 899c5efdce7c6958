"""`steer report` on damaged results.json and tuned.json: one line, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import METRICS, _write_run, files_in, one_line_error, refused, run

from steer.cli import cli


# 11 and 15. steer report: malformed results are one line; a missing run is reported before anything else
def test_report_on_bad_results_and_missing_runs(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({"experiment": "x", "rows": [{}]}))
    one_line_error(run("report", str(run_dir), "-o", str(tmp_path / "doc.md")), "not a complete results file")
    (run_dir / "results.json").write_text(
        json.dumps({"experiment": "x", "model_id": "m", "fingerprint": "f", "rows": [{"mode": "prompt"}]})
    )
    one_line_error(run("report", str(run_dir), "-o", str(tmp_path / "doc.md")), "row 1 lacks")
    existing = tmp_path / "results.md"
    existing.write_text("mine")
    one_line_error(run("report", str(tmp_path / "nonexistent"), "-o", str(existing)), "has no results.json")


# issue 43, case 29: the same run twice in steer report
def test_report_refuses_a_run_given_twice(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path / "run", METRICS)
    out = tmp_path / "doc.md"
    before = files_in(tmp_path)
    refused(run("report", str(run_dir), str(run_dir), "-o", str(out)), f"run directory {run_dir} is given twice;")
    again = f"{run_dir}/../run"
    refused(
        run("report", str(run_dir), again, "-o", str(out)),
        f"run directory {again} is given twice (as {run_dir} and {again}); name each run once",
    )
    assert files_in(tmp_path) == before


# case 9: a results.json whose metric values are strings
def test_report_on_results_with_string_metrics_is_one_line(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path / "run", METRICS)
    results = run_dir / "results.json"
    data = json.loads(results.read_text())
    data["rows"][1]["metrics"]["accuracy"] = "high"
    results.write_text(json.dumps(data))
    before = files_in(tmp_path)
    refused(run("report", str(run_dir), "-o", str(tmp_path / "doc.md")), "row 2's metric 'accuracy' is 'high'")
    data["rows"][1]["metrics"]["accuracy"] = 0.5
    data["judge_heldout_accuracy"] = {"tfidf": "good"}
    results.write_text(json.dumps(data))
    refused(run("report", str(run_dir), "-o", str(tmp_path / "doc.md")), "judge_heldout_accuracy is not a table")
    assert files_in(tmp_path) == {**before, "run/results.json": results.read_bytes()}


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


# 2, 3, 20: steer report replaces only a trade-off chart it drew, checks it before writing anything, leaves the
# trade-off out (with a line saying why) when the tuning trials lack its metrics, and refuses a run with no rows
def test_report_never_replaces_a_users_chart_and_needs_the_tradeoff_metrics(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path / "run", METRICS)
    out = tmp_path / "doc.md"
    chart = tmp_path / "doc-tradeoff.png"
    chart.write_text("a user's picture\n")
    before = files_in(tmp_path)
    refused(CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out), "--force"]), "was not written by")
    assert files_in(tmp_path) == before
    chart.unlink()
    assert CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out)]).exit_code == 0
    assert chart.is_file() and "![trade-off" in out.read_text()
    again = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out), "--force"])
    assert again.exit_code == 0, again.output  # its own chart and document are replaced

    short = _write_run(tmp_path / "short", {"n": 2, "length": 1.0, "repetition": 0.0})
    result = CliRunner().invoke(cli, ["report", str(short), "-o", str(tmp_path / "short.md")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "short.md").read_text()
    assert "Not shown: the tuning trials were not scored with j, accuracy, similarity, ppl" in text
    assert not (tmp_path / "short-tradeoff.png").exists()

    results = run_dir / "results.json"
    data = json.loads(results.read_text())
    results.write_text(json.dumps({**data, "rows": []}))
    refused(CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(tmp_path / "e.md")]), "has no rows")
