"""Records (`steer.rewriting.records`): results.json is strict JSON and round-trips."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import METRICS, _write_run, run


def test_results_json_is_strict_json_and_nan_round_trips(tmp_path: Path) -> None:
    """Issue 43, case 28: a metric with nothing to measure (NaN) is written as null — the file parses
    as strict JSON — and read back as NaN."""
    import math

    from steer.rewriting.records import RunResults

    rows = [{"direction": "a-b", "mode": "prompt", "metrics": {"bleu": float("nan"), "acc": 0.5}, "settings": {}}]
    path = tmp_path / "results.json"
    RunResults("e", "m", "f", rows, judge_heldout_accuracy={"tfidf": float("nan")}).write(path)

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in results.json")

    raw = json.loads(path.read_text(), parse_constant=refuse)
    assert raw["rows"][0]["metrics"] == {"bleu": None, "acc": 0.5}
    back = RunResults.read(path)
    assert math.isnan(back.rows[0]["metrics"]["bleu"]) and back.rows[0]["metrics"]["acc"] == 0.5
    assert math.isnan(back.judge_heldout_accuracy["tfidf"])


# issue 43, case 28: results.json (and tuned.json) of a run are strict JSON (NaN as null), and report reads them
def test_a_runs_results_are_strict_json_that_report_reads(tmp_path: Path) -> None:
    import math

    from steer.rewriting.records import TuneResult

    nan = float("nan")
    run_dir = _write_run(tmp_path / "run", {**METRICS, "bleu": nan})

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in a file steer run wrote")

    for name in ("results.json", "tuned.json"):
        json.loads((run_dir / name).read_text(), parse_constant=refuse)
    tuned = TuneResult.read(run_dir / "tuned.json")
    assert math.isnan(tuned.chosen["a-b"].metrics["bleu"]) and math.isnan(tuned.trials[0]["metrics"]["bleu"])
    out = tmp_path / "doc.md"
    result = run("report", str(run_dir), "-o", str(out))
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert re.search(r"^\| prompt \| .* \| — \|", out.read_text(), re.M), out.read_text()  # BLEU: nothing measured


def test_a_record_holding_line_separators_stays_one_line() -> None:
    from steer.rewriting.records import TransferRecord

    record = TransferRecord("a\u2028b\x85c\u2029", "out", "out", "formal", "informal", "prompt", "m", "f")
    line = record.to_json()
    assert len(line.splitlines()) == 1 and json.loads(line)["source_text"] == "a\u2028b\x85c\u2029"
