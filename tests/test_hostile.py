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
