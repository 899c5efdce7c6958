"""`steer report` (`steer.lab.report`): tables equal each run's own table, verdict thresholds come from
the runs' tuned.json, a file or chart steer did not write is never replaced, records round-trip."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import METRICS, _write_run, files_in, refused

from steer.cli import cli
from steer.errors import SteerError
from steer.lab.report import REPORT_MARKER
from steer.lab.tables import results_table
from steer.rewriting.records import (
    RECORD_VERSION,
    RunResults,
    TransferRecord,
    TunedChoice,
    TuneResult,
    read_transfer_records,
    write_transfer_records,
)

PROMPT = {"n": 10, "j": 0.20, "accuracy": 0.40, "similarity": 0.80, "ppl": 50.0, "repetition": 0.0, "usable": 0.10,
          "meta": 0.1, "near_loop": 0.1, "invented": 0.0}  # fmt: skip
GUIDED = {"n": 10, "j": 0.30, "accuracy": 0.60, "similarity": 0.60, "ppl": 55.0, "repetition": 0.0, "usable": 0.30,
          "meta": 0.0, "near_loop": 0.0, "invented": 0.0}  # fmt: skip
GUIDED_SETTINGS = {"mode": "shift", "top_k": "5%", "strength": 2.0, "guidance": 1.0, "positions": "generated"}


def _run_dir(path: Path, floor: float) -> Path:
    rows = [
        {"direction": "a-b", "source": "a", "target": "b", "mode": "prompt", "settings": {"mode": "prompt"},
         "metrics": PROMPT},
        {"direction": "a-b", "source": "a", "target": "b", "mode": "guided", "settings": GUIDED_SETTINGS,
         "metrics": GUIDED},
    ]  # fmt: skip
    path.mkdir()
    RunResults("toy", "tiny", "f00", rows, judge="tfidf", judge_heldout_accuracy={"tfidf": 0.9}).write(
        path / "results.json"
    )
    chosen = {"a-b": TunedChoice(GUIDED_SETTINGS, GUIDED, PROMPT)}
    trials = [{"direction": "a-b", "settings": {"mode": "prompt"}, "metrics": PROMPT},
              {"direction": "a-b", "settings": GUIDED_SETTINGS, "metrics": GUIDED}]  # fmt: skip
    TuneResult("j", "minilm", floor, 1.2, 32, chosen, trials).write(path / "tuned.json")
    return path


def test_report_tables_verdict_and_thresholds_from_tuned(tmp_path: Path) -> None:
    strict, loose = _run_dir(tmp_path / "strict", 0.8), _run_dir(tmp_path / "loose", 0.7)
    out = tmp_path / "doc" / "results.md"
    out.parent.mkdir()
    result = CliRunner().invoke(cli, ["report", str(strict), str(loose), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.splitlines()[0] == REPORT_MARKER
    table = results_table(RunResults.read(strict / "results.json").to_dict())
    body = table.replace("# ", "## ", 1).replace("\n## ", "\n### ")
    assert body in text  # each run's table, byte for byte
    verdict = [line for line in text.splitlines() if line.startswith("| a → b | ")]
    # similarity ratio 0.75: below the strict run's floor 0.8, above the loose run's 0.7
    # usable +20 (≥ +15), no meta/near-loop/invented, accuracy +20: only the similarity floor decides
    assert (
        verdict[0]
        == "| a → b | strict (n = 10) | guided | 30 (10) | +20 | 0 | 0 | 0 | +20 | 0.75 | +10.0 | 1.10 | no |"
    )
    assert verdict[1].endswith("| 1.10 | **yes** |")
    assert "Tuned choices: a-b: shift 5% λ=2" in text
    assert (out.parent / "results-tradeoff.png").is_file()


def test_report_never_replaces_what_it_did_not_write(tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run", 0.8)
    mine = tmp_path / "notes.md"
    mine.write_text("my notes\n")
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(mine)])
    assert result.exit_code == 1 and "--force" in result.output
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(mine), "--force"])
    assert result.exit_code == 1 and "not written by 'steer report'" in result.output
    assert mine.read_text() == "my notes\n"
    out = tmp_path / "results.md"
    assert CliRunner().invoke(cli, ["report", str(run), "-o", str(out)]).exit_code == 0
    assert CliRunner().invoke(cli, ["report", str(run), "-o", str(out), "--force"]).exit_code == 0
    missing = CliRunner().invoke(cli, ["report", str(tmp_path / "nowhere"), "-o", str(tmp_path / "x.md")])
    assert missing.exit_code == 1 and "has no results.json" in missing.output
    assert "Traceback" not in missing.output


def test_records_round_trip_and_versions(tmp_path: Path) -> None:
    record = TransferRecord("a", "b", "b\n", "formal", "informal", "prompt", "tiny", "f00", settings={"mode": "prompt"})
    path = tmp_path / "x.jsonl"
    write_transfer_records(path, [record, record])
    assert read_transfer_records(path) == [record, record]
    assert json.loads(path.read_text().splitlines()[0])["record_version"] == RECORD_VERSION
    newer = json.loads(path.read_text().splitlines()[0]) | {"record_version": RECORD_VERSION + 1}
    path.write_text(json.dumps(newer) + "\n")
    with pytest.raises(SteerError, match="upgrade steer"):
        read_transfer_records(path)
    tuned = _run_dir(tmp_path / "run", 0.8) / "tuned.json"
    result = TuneResult.read(tuned)
    assert result.settings_for("a-b") == GUIDED_SETTINGS and result.similarity_floor == 0.8
    with pytest.raises(SteerError, match="no tuned settings for b → a; it has: a-b"):
        result.settings_for("b-a")
    tuned.write_text(json.dumps({"chosen": {"a-b": {"mode": "prompt"}}}))
    with pytest.raises(SteerError, match="older 'steer tune'"):
        TuneResult.read(tuned)


def test_report_header_is_an_input_and_findings_are_linked_not_copied(tmp_path: Path) -> None:
    run = _run_dir(tmp_path / "run", 0.8)
    docs = tmp_path / "docs"
    docs.mkdir()
    header, findings = docs / "header.md", docs / "findings.md"
    header.write_text("# My experiment\n\nHow the runs were made.\n")
    findings.write_text("# Findings\n\n## 2026-12-04: a finding only findings.md holds\n")
    out = docs / "results.md"
    args = ["report", str(run), "-o", str(out), "--header", str(header), "--findings", str(findings)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith(f"{REPORT_MARKER}\n\n# My experiment\n\nHow the runs were made.\n")
    assert "a finding only findings.md holds" not in text
    assert "[findings.md](findings.md)" in text  # a link relative to the document
    plain = tmp_path / "plain.md"
    assert CliRunner().invoke(cli, ["report", str(run), "-o", str(plain)]).exit_code == 0
    first = plain.read_text().split("\n\n")[1]
    assert first == "# Results: toy"  # the default header names the run and its model, no one's prose
    assert "Model: tiny." in plain.read_text()
    missing = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "x.md"), "--header", "nope.md"])
    assert missing.exit_code == 1 and "`header` nope.md does not exist" not in missing.output
    assert "--header nope.md does not exist" in missing.output


def test_the_verdict_heads_with_llm_usable_only_when_every_compared_row_was_judged(tmp_path: Path) -> None:
    """LLM-usable (which agrees with blind reads better) heads the verdict and decides its target
    when the LLM judge graded every row compared; the rules' Usable% stands beside it. One row
    without it (absent, or null in results.json) puts the whole verdict back on the rules' Usable%,
    never a mix of scales."""
    from steer.lab.report import RunReport, headline_measure, verdict

    def judged(name: str, prompt_llm: float | None, guided_llm: float | None) -> RunReport:
        run = _run_dir(tmp_path / name, 0.7)
        results = RunResults.read(run / "results.json")
        results.rows[0]["metrics"] = {**PROMPT, "llm_usable": prompt_llm}
        results.rows[1]["metrics"] = {**GUIDED, "llm_usable": guided_llm}
        results.write(run / "results.json")
        return RunReport(run)

    def rows(text: str) -> list[str]:
        table = [line for line in text.splitlines() if line.startswith("|")]
        assert len({line.count("|") for line in table}) == 1, table  # header, separator and rows align
        return table[2:]

    # the LLM judge says the guided rewrites lost usability although the rules say +20: no target
    worse = judged("worse", 0.40, 0.30)
    assert headline_measure([worse]) == "llm_usable"
    text = verdict([worse])
    assert (
        "target = ΔLLM-usable ≥ +15" in text
        and "| LLM-usable%: steered (prompt) | ΔLLM-usable | Usable%: steered (prompt) |" in text
    )
    assert rows(text) == [
        "| a → b | worse (n = 10) | guided | 30 (40) | -10 | 30 (10) | +20 | 0 | 0 | 0 | +20 | 0.75 | +10.0 | 1.10 "
        "| no |"
    ]
    # the LLM judge's +20 with the rules' +0: the headline alone reaches the target
    better = judged("better", 0.10, 0.30)
    results = RunResults.read(better.path / "results.json")
    results.rows[1]["metrics"]["usable"] = PROMPT["usable"]
    results.write(better.path / "results.json")
    assert rows(verdict([RunReport(better.path)]))[0].endswith(
        "| 30 (10) | +20 | 10 (10) | +0 | 0 | 0 | 0 | +20 | 0.75 | +10.0 | 1.10 | **yes** |"
    )

    # a run without the LLM judge, or one row it did not grade (null, read back as NaN): the rules head
    for other in (RunReport(_run_dir(tmp_path / "plain", 0.7)), judged("unjudged", None, 0.30)):
        assert headline_measure([worse, other]) == "usable"
        mixed = verdict([worse, other])
        assert "target = ΔUsable ≥ +15" in mixed and "LLM-usable" not in mixed
        assert rows(mixed)[0] == (
            "| a → b | worse (n = 10) | guided | 30 (10) | +20 | 0 | 0 | 0 | +20 | 0.75 | +10.0 | 1.10 | **yes** |"
        )


# 12: a run of the plain prompt alone: the verdict says there is nothing to compare, not an empty table
def test_the_verdict_of_a_prompt_only_run_says_there_is_nothing_to_compare(tmp_path: Path) -> None:
    from steer.rewriting.records import RunResults

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
