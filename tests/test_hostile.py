"""The second hostile pass (issue 23), each case at the level a user meets it: nothing steer writes
replaces a file it reads, resumes finish, nothing is silently wrong, no tracebacks, clear messages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import profile_args
from test_reliability import run, transfer_args

from steer.profiling.corpus import read_texts


def one_line_error(result: Any, message: str, code: int = 1) -> None:
    """A user's mistake: `code` (1, or 2 for click's usage errors), the message, no traceback."""
    assert result.exit_code == code, result.output
    assert message in result.output, result.output
    assert "Traceback" not in result.output, result.output


# 1. no command writes onto a file it reads, --force or not
def test_no_command_writes_onto_its_own_input(
    tmp_path: Path, prof: Path, saved_model: Path, corpus_files: tuple[Path, Path]
) -> None:
    before = prof.read_bytes()
    one_line_error(run("probe", str(prof), "-o", str(prof), "--force"), "is the profile, which this command reads")
    for bad, message, code in (("nan", "is not a finite number", 2), ("0", "--c must be a finite number > 0", 1)):
        new = tmp_path / "new.probe.safetensors"
        one_line_error(run("probe", str(prof), "-o", str(new), "--c", bad), message, code)
        assert not new.exists()
    one_line_error(run(*transfer_args(prof), "hey", "-o", str(prof), "--force"), "is the profile")
    infile = tmp_path / "x.txt"
    infile.write_text("hey dude\n")
    one_line_error(run(*transfer_args(prof), "-i", str(infile), "-o", str(infile), "--force"), "the input (-i)")
    formal, _ = corpus_files
    corpus = formal.read_bytes()
    one_line_error(run(*profile_args(saved_model, corpus_files), "-o", str(formal), "--force"), "'formal' corpus")
    # export writes a directory: click already refuses a file there (usage error), the profile included
    export = run("export", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(prof), "--force")
    assert export.exit_code == 2 and "is a file" in export.output
    assert prof.read_bytes() == before and infile.read_text() == "hey dude\n" and formal.read_bytes() == corpus


# 5. a NaN (or infinite) number is refused as a usage error naming the option
@pytest.mark.parametrize("option", ["--length-weight", "--style-exponent", "--temperature", "--strength", "--alpha"])
def test_non_finite_numbers_are_refused(prof: Path, option: str) -> None:
    for bad in ("nan", "inf", "-inf"):
        one_line_error(run(*transfer_args(prof), option, bad, "hey"), "is not a finite number", code=2)


# 6. unknown keys in a run config, at the top level and in every table
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("limt = 3\n", "unknown top-level key 'limt'"),
        ("[transfer]\nmax_new_token = 3\n", "unknown [transfer] key 'max_new_token'"),
        ("[selection]\ntopk = '1%'\n", "unknown [selection] key 'topk'"),
        ("[styles.a]\ntrain = 'a.txt'\ndevv = 'a.txt'\n", "unknown [styles.a] key 'devv'"),
        ("[styles.a]\ntrain = { path = 'a.txt', stopp = 1 }\ndev = 'a.txt'\n", "unknown key 'stopp'"),
    ],
)
def test_unknown_config_keys_are_errors(
    tmp_path: Path, extra: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the corpora are named relative to the config's folder
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.txt").write_text("y\n")
    styles = "" if "styles.a" in extra else "[styles.a]\ntrain = 'a.txt'\ndev = 'a.txt'\n"
    config = tmp_path / "c.toml"
    config.write_text(
        ("limit = 1\n" if "limt" not in extra else "")
        + (extra if extra.startswith("limt") else "")
        + f"data_dir = '{tmp_path}'\n"
        + styles
        + "[styles.b]\ntrain = 'b.txt'\ndev = 'b.txt'\n"
        + ("" if extra.startswith("limt") else extra)
    )
    one_line_error(run("run", str(config), "-o", str(tmp_path / "out")), message)


# 8. --keep-candidates needs a JSONL output
def test_keep_candidates_needs_a_jsonl_output(tmp_path: Path, prof: Path) -> None:
    one_line_error(run(*transfer_args(prof), "--keep-candidates", "hey"), "add -o FILE.jsonl")
    one_line_error(run(*transfer_args(prof), "--keep-candidates", "-o", str(tmp_path / "o.txt"), "hey"), "FILE.jsonl")


# 9. a byte-order mark is no text, and does not rename the first column
def test_byte_order_marks_are_dropped(tmp_path: Path) -> None:
    txt, csv = tmp_path / "a.txt", tmp_path / "a.csv"
    txt.write_bytes(b"\xef\xbb\xbfhello\nworld\n")
    csv.write_bytes(b"\xef\xbb\xbftext,id\nhello,1\n")
    assert read_texts(str(txt)) == ["hello", "world"]
    assert read_texts(str(csv)) == ["hello"]


# 10. duplicate rungs are refused; absurd strengths get a warning
def test_duplicate_and_absurd_rungs(prof: Path) -> None:
    one_line_error(run(*transfer_args(prof), "--preset", "rerank", "--ladder", "0,0,0", "hey"), "repeats rung 0")
    from steer.generation.rerank import RerankSettings

    with _captured_warning() as seen:
        RerankSettings(ladder=(0, "u1e9"))
    assert any("u1e+09" in m or "u1e9" in m for m in seen)


class _captured_warning:
    """Collect the messages steer.generation.rerank logs at WARNING."""

    def __enter__(self) -> list[str]:
        import logging

        self.messages: list[str] = []
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.messages.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("steer.generation.rerank").addHandler(self.handler)
        return self.messages

    def __exit__(self, *exc: Any) -> None:
        import logging

        logging.getLogger("steer.generation.rerank").removeHandler(self.handler)


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


# 12. eval on a fresh clone: the profile's recorded corpora are missing → a note for the defaults, an error
#     naming --train-style when accuracy is asked for; a changed corpus is refused by its sha256 (7)
def test_eval_with_missing_or_changed_recorded_corpora(
    tmp_path: Path, prof: Path, corpus_files: tuple[Path, Path]
) -> None:
    out = tmp_path / "o.jsonl"
    assert run(*transfer_args(prof), "--preset", "prompt", "hey dude", "-o", str(out)).exit_code == 0
    formal, _ = corpus_files
    original = formal.read_text()
    formal.write_text("a line that was not profiled\n" + original)
    changed = run("eval", str(out), "--metrics", "accuracy")
    one_line_error(changed, "sha256 differs")
    assert "--train-style" in changed.output
    formal.unlink()
    quiet = run("eval", str(out), "--fluency-model", "none", "--embedder", "none")
    assert quiet.exit_code == 0, quiet.output
    assert "note: no judge" in quiet.output and "does not exist" in quiet.output
    one_line_error(run("eval", str(out), "--metrics", "accuracy"), "--train-style")


# 14 and 17. messages name the running command's options, and only options that were given
def test_messages_name_options_that_exist(tmp_path: Path, prof: Path) -> None:
    one_line_error(run(*transfer_args(prof), "--preset", "rerank", "--style-exponent", "2", "hey"), "--style-exponent")
    sampled = run(*transfer_args(prof), "--preset", "guided", "--temperature", "0.7", "hey")
    one_line_error(sampled, "--temperature")
    assert "drop --guidance" not in sampled.output
    no_output = run(*transfer_args(prof), "--processes", "3", "hey")
    one_line_error(no_output, "add -o FILE")
    assert "--compare" not in no_output.output


# 13. --from/--to are checked against the profile (and the probe) before any model loads
def test_styles_are_checked_before_a_model_loads(prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import steer.model.loading

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the styles were checked")

    monkeypatch.setattr(steer.model.loading, "load_model", no_loading)
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "casual", "hey"]
    one_line_error(run(*args), "'casual' is not in this profile")
    other = ["transfer", "-p", str(prof), "--from", "nope", "--to", "informal", "hey"]
    one_line_error(run(*other), "'nope' is not in this profile")


# 12. inspect shows the recorded corpora, and with them missing suggests --train-style, not a bare `steer probe`
def test_inspect_shows_recorded_corpora(prof: Path, corpus_files: tuple[Path, Path]) -> None:
    shown = run("inspect", str(prof))
    assert shown.exit_code == 0 and str(corpus_files[0]) in shown.output and "not found" not in shown.output
    # the layer table is headed by the styles, not by a corpus path
    assert re.search(r"^layer +formal-only +informal-only +shared$", shown.output, re.M), shown.output
    for path in corpus_files:
        path.unlink()
    missing = run("inspect", str(prof))
    assert missing.exit_code == 0 and "(not found from here)" in missing.output
    assert "--train-style formal=FILE --train-style informal=FILE" in missing.output


# issue 43, cases 8 and 20: a config of random bytes, a limit that is not a whole number ≥ 1, modes not a list
@pytest.mark.parametrize(
    ("head", "message"),
    [
        ("limit = 'ten'\n", "limit 'ten' is not valid"),
        ("limit = -4\n", "limit -4 is not valid"),
        ("modes = []\nlimit = 1\n", "modes [] is not valid"),
        ("modes = 'prompt'\nlimit = 1\n", "modes 'prompt' is not valid"),
        (b"\xff\xfe\x00garbage", "is not a UTF-8 text file"),
    ],
)
def test_bad_config_values_are_one_line(tmp_path: Path, head: str | bytes, message: str) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.txt").write_text("y\n")
    config = tmp_path / "c.toml"
    if isinstance(head, bytes):
        config.write_bytes(head)
    else:
        styles = "".join(f"[styles.{s}]\ntrain = '{tmp_path}/{s}.txt'\ndev = '{tmp_path}/{s}.txt'\n" for s in "ab")
        config.write_text(head + styles)
    one_line_error(run("run", str(config), "-o", str(tmp_path / "out")), message)
    assert not (tmp_path / "out").exists()


# issue 43, case 15: a JSONL text that is null or a number is refused with its line, not rewritten as "None"
@pytest.mark.parametrize(("value", "shown"), [("null", "null"), ("5", "int"), ('["a"]', "list")])
def test_a_jsonl_text_that_is_not_a_string_is_refused(tmp_path: Path, prof: Path, value: str, shown: str) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "fine"}\n{"text": ' + value + "}\n")
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-i", str(data), "-q"]
    one_line_error(run(*args), f"line 2's field 'text' is {shown}, not a string")


# issue 43, the third batch: each refusal is one line and leaves every file as it was


def refused(result: Any, message: str, code: int = 1) -> None:
    """`one_line_error`, and the output is that one line: nothing printed before it, no note."""
    one_line_error(result, message, code)
    assert len(result.output.strip().splitlines()) == 1, result.output


def files_in(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes: equal before and after, nothing was written or changed."""
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any model loads: these mistakes are refused before that."""
    import steer.model.loading
    import steer.runs.service

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the mistake was refused")

    monkeypatch.setattr(steer.model.loading, "load_model", no_loading)
    monkeypatch.setattr(steer.runs.service, "load_model", no_loading)


# issue 43, cases 6 and 18: --min-new-tokens below 0, or above --max-new-tokens
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--min-new-tokens", "-1"], "--min-new-tokens must be ≥ 0 (0 is off), got -1"),
        (["--min-new-tokens", "50", "--max-new-tokens", "4"], "--min-new-tokens 50 is more than --max-new-tokens 4"),
    ],
)
def test_min_new_tokens_below_zero_or_above_the_maximum_is_refused(
    tmp_path: Path, prof: Path, no_model: None, options: list[str], message: str
) -> None:
    out = tmp_path / "o.jsonl"
    out.write_text("an earlier output\n")
    before = files_in(tmp_path)
    refused(run(*transfer_args(prof), *options, "-o", str(out), "--force", "hello"), message)
    assert files_in(tmp_path) == before


# issue 43, cases 10 and 22: eval's records: a source_text missing from some, or not a string; an output
# that is a number (null stays an empty output); the line named is the file's, blank lines counted
@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('{"output": "a", "source_text": "x"}\n\n{"output": "b"}\n', "line 3 has no 'source_text' field, which line 1"),
        ('{"output": "a"}\n{"output": "b", "source_text": "y"}\n', "line 1 has no 'source_text' field, which line 2"),
        (
            '{"output": "a", "source_text": "x"}\n{"output": "b", "source_text": 12}\n',
            "line 2's field 'source_text' is int",
        ),
        ('{"output": "a", "source_text": null}\n', "line 1's field 'source_text' is null, not a string"),
        ('{"output": "a"}\n{"output": 5}\n', "line 2's field 'output' is int, not a string"),
    ],
)
def test_eval_records_with_a_missing_or_non_string_field_are_refused(tmp_path: Path, lines: str, message: str) -> None:
    data = tmp_path / "o.jsonl"
    data.write_text(lines)
    before = files_in(tmp_path)
    refused(run("eval", str(data), "--metrics", "length"), f"{data}: {message}")
    assert files_in(tmp_path) == before


def test_eval_of_a_directory_says_it_is_one_and_a_null_output_is_empty(tmp_path: Path) -> None:
    refused(run("eval", str(tmp_path)), f"outputs {tmp_path} is a directory; pass the file 'steer transfer -o' wrote")
    data = tmp_path / "o.jsonl"
    data.write_text('{"output": null}\n{"output": "a b"}\n')
    counted = run("eval", str(data), "--metrics", "empty", "--json")
    assert counted.exit_code == 0, counted.output
    assert json.loads(counted.stdout)["empty"] == 0.5


# issue 43, case 13: transfer -i - (or no input at all) with standard input closed
def test_transfer_from_a_closed_stdin_is_one_line(tmp_path: Path, prof: Path) -> None:
    import io
    import os
    import subprocess
    import sys

    from steer.config import SteerError

    before = files_in(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    for given in (["-i", "-"], []):
        command = [sys.executable, "-m", "steer", *transfer_args(prof), *given]
        closed = subprocess.run(  # `<&-`: Python starts with sys.stdin None
            ["bash", "-c", 'exec "$@" <&-', "bash", *command], capture_output=True, text=True, env=env, timeout=300
        )
        assert closed.returncode == 1, closed.stderr
        assert "steer: error: standard input is closed" in closed.stderr and "Traceback" not in closed.stderr
        assert len(closed.stderr.strip().splitlines()) == 1 and closed.stdout == "", closed.stderr
    shut = io.StringIO("hello\n")
    shut.close()
    with pytest.raises(SteerError, match="standard input is closed"):
        read_texts("-", stdin=shut)
    assert files_in(tmp_path) == before


# issue 43, case 14: a prompts TOML with a misspelt table, an unknown key or a key that is no direction
@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[pair]\n"formal->informal" = "Casual: {text}"\n', "unknown top-level table [pair]; the known ones are"),
        ('defualt = "Rewrite {text}"\n', "unknown top-level key 'defualt'; the known ones are default (a template)"),
        ('[pairs]\n"formal-informal" = "Casual: {text}"\n', "[pairs] key 'formal-informal' is not SOURCE->TARGET"),
        ('[openings]\n"formal" = "Sure: "\n', "[openings] key 'formal' is not SOURCE->TARGET or default"),
        ('pairs = "Casual: {text}"\n', "'pairs' must be a table ([pairs]) keyed SOURCE->TARGET"),
        ("[pairs]\n'formal->informal' = 3\n", "[pairs] 'formal->informal' must be a string, got int"),
    ],
)
def test_a_prompts_file_with_unknown_tables_or_keys_is_refused(
    tmp_path: Path, prof: Path, no_model: None, toml: str, message: str
) -> None:
    from steer.prompts import load_openings, load_prompts

    prompts = tmp_path / "prompts.toml"
    prompts.write_text(toml)
    before = files_in(tmp_path)
    out = tmp_path / "o.jsonl"
    refused(run(*transfer_args(prof), "--prompts", str(prompts), "-o", str(out), "hello"), f"{prompts}: {message}")
    assert files_in(tmp_path) == before
    assert "formal->informal" in load_prompts() and "default" in load_openings()  # the packaged file still loads


# issue 43, case 16: a probe on too few texts to hold any out is refused (before the model), saying how many
def test_a_probe_on_too_few_texts_to_measure_is_refused(tmp_path: Path, prof: Path, no_model: None) -> None:
    from steer.profiling.probe import probe_path

    few = {}
    for style in ("formal", "informal"):
        few[style] = tmp_path / f"{style}-3.txt"
        few[style].write_text(f"a {style} text\nanother {style} text\na third {style} text\n")
    earlier = probe_path(prof)
    earlier.write_bytes(b"an earlier probe")
    before = files_in(tmp_path)
    given = ["--train-style", f"formal={few['formal']}", "--train-style", f"informal={few['informal']}"]
    refused(
        run("probe", str(prof), *given, "--force", "-q"),
        "too few texts to hold any out and measure the probe ('formal' 3, 'informal' 3; --limit 2000): it needs "
        "at least 20 in all, 10 per style; give more with --train-style NAME=SOURCE, or pass --allow-no-heldout",
    )
    refused(run("probe", str(prof), "--force", "-q"), "('formal' 5, 'informal' 6; --limit 2000)")  # its own corpora
    assert files_in(tmp_path) == before


# issue 43, case 19: a layer range that runs backwards, or last:0, names the spec and the valid forms
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("29-0", "--edit-layers '29-0' is not valid: the range '29-0' runs backwards; write it LOW-HIGH ('0-29')"),
        ("last:0", "--edit-layers 'last:0' is not valid: last:N needs N ≥ 1, got 0"),
        ("3,-1", "--edit-layers '3,-1' is not valid"),
    ],
)
def test_backwards_or_empty_layer_specs_name_the_valid_forms(
    tmp_path: Path, prof: Path, no_model: None, spec: str, message: str
) -> None:
    before = files_in(tmp_path)
    export = ["export", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(tmp_path / "exp"), "-q"]
    for args in ([*transfer_args(prof), "--mode", "deactivate", "hello"], export):
        result = run(*args, "--edit-layers", spec)
        refused(result, message)
        assert "'24,26,28', '24-28' (LOW-HIGH) or 'last:4'" in result.output and "1000000" not in result.output
    assert files_in(tmp_path) == before


# issue 43, case 24: steer export checks --from/--to against the profile before the model loads
def test_export_checks_the_styles_before_the_model_loads(tmp_path: Path, prof: Path, no_model: None) -> None:
    before = files_in(tmp_path)
    target = tmp_path / "exp"
    for given in (["--from", "formal", "--to", "pirate"], ["--from", "pirate", "--to", "informal"]):
        result = run("export", "-p", str(prof), *given, "-o", str(target), "-q")
        refused(result, "style 'pirate' is not in this profile; its styles: formal, informal")
    assert not target.exists() and files_in(tmp_path) == before


METRICS = {"n": 2, "j": 0.2, "accuracy": 0.5, "similarity": 0.8, "ppl": 50.0, "repetition": 0.0, "usable": 0.1}


def _write_run(path: Path, metrics: dict[str, float]) -> Path:
    """A run directory as `steer run` leaves it (its one writers of results.json and tuned.json)."""
    from steer.runs.records import RunResults, TunedChoice, TuneResult

    guided = {"mode": "shift", "top_k": "5%", "strength": 2.0}
    rows = [
        {"direction": "a-b", "source": "a", "target": "b", "mode": m, "settings": s, "metrics": metrics}
        for m, s in (("prompt", {"mode": "prompt"}), ("guided", guided))
    ]
    path.mkdir()
    RunResults("toy", "tiny", "f00", rows, judge="tfidf", judge_heldout_accuracy={"tfidf": float("nan")}).write(
        path / "results.json"
    )
    trials = [{"direction": "a-b", "settings": guided, "metrics": metrics}]
    chosen = {"a-b": TunedChoice(guided, metrics, metrics)}
    TuneResult("j", "minilm", 0.8, 1.2, 2, chosen, trials).write(path / "tuned.json")
    return path


# issue 43, case 28: results.json (and tuned.json) of a run are strict JSON (NaN as null), and report reads them
def test_a_runs_results_are_strict_json_that_report_reads(tmp_path: Path) -> None:
    import math

    from steer.runs.records import TuneResult

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


# issue 43, case 31: two styles profiled from the same texts (one file twice, or a copy) are refused
def test_two_styles_of_the_same_texts_are_refused(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], no_model: None
) -> None:
    formal, _ = corpus_files
    copy = tmp_path / "copy.txt"
    copy.write_bytes(formal.read_bytes())
    out = tmp_path / "p.safetensors"
    before = files_in(tmp_path)
    for other in (formal, copy):
        args = ["profile", "--model", str(saved_model), "--style", f"a={formal}", "--style", f"b={other}"]
        refused(
            run(*args, "-o", str(out), "-q"),
            f"styles 'a' ({formal}) and 'b' ({other}) have the same 5 texts, so nothing tells them apart; "
            "give each style its own texts",
        )
    assert files_in(tmp_path) == before
