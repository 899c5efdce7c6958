"""`steer run` end to end (`steer.lab.runner`): every report file, rerank and J, an LLM judge."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import _config

from steer.cli import cli
from steer.errors import SteerError
from steer.lab.experiment import load_experiment
from steer.lab.rundir import RunDir
from steer.probe_fit import probe_fit
from steer.profiling.probe import StyleProbe


def test_run_writes_every_report_file_and_resumes(tmp_path: Path, saved_model: Path) -> None:
    cfg, out = _config(tmp_path, saved_model), tmp_path / "report"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    for name in ["results.json", "results.md", "samples.md", "chart.png", "profile.safetensors"]:
        assert (out / name).is_file(), name
    results = json.loads((out / "results.json").read_text())
    assert {"experiment", "model_id", "fingerprint", "classifier_heldout_accuracy", "rows", "tuned"} <= set(results)
    assert [(r["direction"], r["mode"]) for r in results["rows"]] == [
        (d, m) for d in ["formal-informal", "informal-formal"] for m in ["prompt", "deactivate", "deactivate+contrast"]
    ]
    first = results["rows"][0]["metrics"]
    assert {"n", "bleu", "self_bleu", "copy_rate", "accuracy", "ppl"} <= set(first) and first["n"] == 3
    assert "bleu" not in results["rows"][3]["metrics"]  # no references for informal → formal
    assert "| deactivate+contrast | deactivate diff 10% + contrast β=0.5 |" in (out / "results.md").read_text()
    outputs = sorted((out / "outputs").glob("*.jsonl"))
    assert len(outputs) == 6
    stamps = {p: p.stat().st_mtime_ns for p in outputs + [out / "profile.safetensors"]}
    again = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert "texts" not in again.stderr and "profiling" not in again.stderr  # nothing recomputed
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_run_with_rerank_and_j(tmp_path: Path, saved_model: Path) -> None:
    """Mode `rerank` builds the probe, decodes the ladder, reports J and the chosen strengths."""
    cfg = _config(tmp_path, saved_model)
    text = cfg.read_text()
    text = text.replace('modes = ["prompt", "deactivate", "deactivate+contrast"]', 'modes = ["prompt", "rerank"]')
    text = text.replace('metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]', 'judge = "tfidf"')
    cfg.write_text(text + '[rerank]\nladder = [0, "u1", 2]\n')
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    rerank = [r for r in results["rows"] if r["mode"] == "rerank"]
    assert len(rerank) == 2 and (out / "probe.safetensors").is_file()
    for row in rerank:
        assert sum(row["rerank"]["chosen_strengths"].values()) == row["metrics"]["n"] == 3
        assert set(row["rerank"]["chosen_strengths"]) <= {"0", "u1", "2"}
        assert row["rerank"]["ladder"] == ["0", "u1", "2"]
        assert {"j", "repetition", "length", "empty", "accuracy"} <= set(row["metrics"])
    assert results["judge"] == "tfidf"
    # the λ = 0 rung is the prompt mode's outputs, reused; only u1 and 2 were decoded for rerank
    decoded = sorted(p.name for p in (out / "outputs").glob("*.rerank-strength=*.jsonl"))
    directions = ("formal-informal", "informal-formal")
    assert decoded == [f"{d}.rerank-strength={r}.jsonl" for d in directions for r in (2, "u1")]
    unguided = json.loads((out / "outputs" / "formal-informal.rerank-strength=u1.jsonl").read_text().splitlines()[0])
    assert unguided["settings"]["guidance"] == 0.0 and unguided["settings"]["strength"] == 1.0
    stamps = {p: p.stat().st_mtime_ns for p in (out / "outputs").glob("*strength*.jsonl")}
    again = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert again.exit_code == 0, again.output
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing decoded again
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]
    # a probe fitted with other settings (an older default) is fitted again; the rungs are only re-ranked
    probe_file = out / "probe.safetensors"
    assert StyleProbe.load(probe_file).fit == probe_fit()
    run_dir = RunDir.claim(out)
    replace(StyleProbe.load(probe_file), fit={"top": 512, "limit": 1000, "c": 1.0}).save(probe_file, force=True)
    run_dir.wrote(probe_file)  # as the older steer run that fitted it would have recorded it
    refit = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert refit.exit_code == 0, refit.output
    assert StyleProbe.load(probe_file).fit == probe_fit()
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]  # the same fit, refitted
    table = (out / "results.md").read_text()
    assert "Rerank chose" in table and "| J |" in table.replace("| mode | settings | J |", "| J |")
    assert "Rerank chose" in table and "(usable first; style probe held-out accuracy" in table
    assert [r["rerank"]["rung_weights"] for r in rerank] == [{}, {}]  # no 3k4 rung, no default weight
    assert all(r["rerank"]["usable_first"] for r in rerank)
    # another choice rule re-ranks the stored candidates: nothing is decoded again
    weighted = cfg.read_text().replace('ladder = [0, "u1", 2]', 'ladder = [0, "u1", 2]\nrung_weights = {"2" = 3.0}')
    cfg.write_text(weighted.replace("rung_weights", "usable_first = false\nrung_weights"))
    third = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert third.exit_code == 0, third.output
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["mode"] == "rerank"]
    assert [(r["rerank"]["rung_weights"], r["rerank"]["usable_first"]) for r in rows] == [({"2": 3.0}, False)] * 2
    assert "(2 × 3; style probe" in (out / "results.md").read_text()
    for line in (out / "outputs" / "formal-informal.rerank.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["rerank"]["candidates"][2]["weight"] == 3.0
    for table_line, message in (
        ('rung_weights = {"9" = 1.0}', "names rung '9'"),
        ('rung_weights = {"2" = "x"}', "finite number > 0"),
        ("rung_weights = 3", "must be a table"),
        ('usable_first = "yes"', "true or false"),
    ):
        cfg.write_text(weighted.replace('rung_weights = {"2" = 3.0}', table_line))
        with pytest.raises(SteerError, match=message):
            load_experiment(cfg)
    bad = weighted.replace('ladder = [0, "u1", 2]', "ladder = [-1]").replace('rung_weights = {"2" = 3.0}', "")
    cfg.write_text(bad)
    with pytest.raises(SteerError, match="`ladder`"):
        load_experiment(cfg)


def test_run_with_an_llm_judge_reports_its_rates_and_refuses_the_decoding_model(
    tmp_path: Path, saved_model: Path
) -> None:
    from conftest import JUDGE_WORDS, make_model, make_tokenizer

    judge_dir = tmp_path / "judge-model"
    make_model("llama", 5).save_pretrained(judge_dir)  # another llama: other weights, a tokenizer knowing the styles
    make_tokenizer(JUDGE_WORDS).save_pretrained(judge_dir)
    cfg = _config(tmp_path, saved_model)
    text = cfg.read_text().replace('modes = ["prompt", "deactivate", "deactivate+contrast"]', 'modes = ["prompt"]')
    cfg.write_text(text.replace('name = "tiny"', f'name = "tiny"\nllm_judge = "{judge_dir}"'))
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "results.json").read_text())["rows"]
    for row in rows:
        assert {"llm_style", "llm_meaning", "llm_fluency", "llm_usable"} <= set(row["metrics"])
        assert row["metrics"]["llm_judge"] == f"llm:{judge_dir}"
    assert "LLM-usable%" in (out / "results.md").read_text()  # the run's table shows the judge's columns
    cfg.write_text(text.replace('name = "tiny"', f'name = "tiny"\nllm_judge = "{saved_model}"'))
    with pytest.raises(SteerError, match="allow_same_model"):
        load_experiment(cfg)
    cfg.write_text(text.replace('name = "tiny"', 'name = "tiny"\nallow_same_model = true'))
    with pytest.raises(SteerError, match="there is no llm_judge"):
        load_experiment(cfg)
