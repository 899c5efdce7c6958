"""`steer eval`: the records and profiles it reads, what it refuses in one line, strict JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL, files_in, refused, run, transfer_args, write_corpora
from conftest import one_line_error_exit_1 as one_line_error

from steer.cli import cli


# 8. a non-UTF-8 outputs file
def test_eval_non_utf8_file(tmp_path: Path) -> None:
    bad = tmp_path / "out.txt"
    bad.write_bytes(b"fine\n\xff\xfe broken\n")
    one_line_error(run("eval", str(bad), "--metrics", "repetition"), "line 2 is not valid UTF-8")


# 9. records name their profile; eval finds it and checks its sha256
def test_eval_finds_the_records_profile_and_checks_it(tmp_path: Path, prof: Path) -> None:
    out = tmp_path / "o.jsonl"
    assert run(*transfer_args(prof), "-o", str(out), "hey dude", "ok lol").exit_code == 0
    record = json.loads(out.read_text().splitlines()[0])
    assert record["profile"] == str(prof)
    found = run("eval", str(out), "--metrics", "accuracy", "--classifier", "tfidf", "--json")
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["judge"] == "tfidf"
    prof.write_bytes(prof.read_bytes() + b" ")
    one_line_error(run("eval", str(out), "--metrics", "accuracy", "--classifier", "tfidf"), "has changed")


# 10. --src of the wrong length names --src
def test_eval_src_length_is_named(tmp_path: Path) -> None:
    outputs, src = tmp_path / "o.txt", tmp_path / "s.txt"
    outputs.write_text("a\nb\n")
    src.write_text("a\n")
    one_line_error(run("eval", str(outputs), "--src", str(src), "--metrics", "copy"), "--src has 1 lines")


# 11. a metric that cannot be computed: an error when asked by name, a note otherwise
def test_eval_uncomputable_metrics(tmp_path: Path) -> None:
    outputs = tmp_path / "o.txt"
    outputs.write_text("a b\nc d\n")
    one_line_error(run("eval", str(outputs), "--metrics", "bleu"), "'bleu' cannot be computed: it needs --ref")
    result = run("eval", str(outputs), "--fluency-model", "none", "--embedder", "none")
    assert result.exit_code == 0 and "note: bleu not computed (it needs --ref)" in result.output


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


# steer eval --json: a metric with nothing to measure is null, and the output is strict JSON
def test_eval_json_is_strict_json(tmp_path: Path, prof: Path) -> None:
    out = tmp_path / "o.jsonl"
    assert run(*transfer_args(prof), "--preset", "prompt", FORMAL[0], "-o", str(out)).exit_code == 0
    result = run("eval", str(out), "--json", "--fluency-model", "none", "--embedder", "none")
    assert result.exit_code == 0, result.output

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in steer eval --json")

    printed = result.stdout[result.stdout.index("{") :]
    scores = json.loads(printed, parse_constant=refuse)
    assert scores["judge tfidf held-out"] is None and scores["n"] == 1


# case 30: records name the profile absolutely, so steer eval finds it from another folder
def test_eval_from_another_folder_finds_the_recorded_profile(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(*transfer_args(Path(prof.name)), "--preset", "prompt", "hey", "-o", "o.jsonl").exit_code == 0
    record = json.loads((tmp_path / "o.jsonl").read_text())
    assert record["profile"] == str(prof)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    scored = run("eval", "../o.jsonl", "--metrics", "accuracy", "--classifier", "tfidf")
    assert scored.exit_code == 0 and "Traceback" not in scored.output, scored.output


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


def test_eval_says_what_an_unmeasured_judge_accuracy_means_and_resume_says_it_starts_over(
    tmp_path: Path, prof: Path
) -> None:
    from conftest import FORMAL, run, transfer_args

    out = tmp_path / "o.jsonl"
    made = run(*transfer_args(prof), "--preset", "prompt", FORMAL[0], "-o", str(out), "--resume")
    assert made.exit_code == 0, made.output
    assert "--resume found no finished rewrites of this recipe and input; starting from the first text" in made.output
    result = run("eval", str(out), "--fluency-model", "none", "--embedder", "none")
    assert result.exit_code == 0, result.output
    shown = next(line for line in result.output.splitlines() if line.startswith("judge tfidf held-out"))
    assert "n/a (too few training texts to hold any out" in shown and "nan" not in shown


# 15, 16, 19: steer eval on a device, an LLM judge rate asked as a metric, a newer record or a non-string style
@pytest.mark.parametrize(
    ("record", "args", "message"),
    [
        (None, ["/dev/null"], "/dev/null is not a regular file"),
        (
            {"output": "hi"},
            ["--metrics", "llm-style"],
            "'llm-style' is one of the LLM judge's rates, not a metric name; add --judge llm",
        ),
        ({"output": "hi", "record_version": 99}, [], "this steer reads up to 1: upgrade steer"),
        ({"output": "hi", "target_style": 5}, [], "field 'target_style' is int, not a string"),
    ],
)
def test_eval_refuses_what_it_cannot_read_in_one_line(
    tmp_path: Path, no_model: None, record: dict | None, args: list[str], message: str
) -> None:
    path = tmp_path / "r.jsonl"
    if record is not None:
        path.write_text(json.dumps(record) + "\n")
        args = [str(path), *args]
    refused(
        CliRunner().invoke(cli, ["eval", *args, "--metrics", "length"] if "--metrics" not in args else ["eval", *args]),
        message,
    )


def test_eval_cli_refuses_the_selection_encoder(tmp_path: Path) -> None:
    outputs = tmp_path / "out.txt"
    outputs.write_text("hey\n")
    result = CliRunner().invoke(cli, ["eval", str(outputs), "--src", str(outputs), "--embedder", "all-minilm-l6-v2"])
    assert result.exit_code == 1 and "--allow-selection-encoder" in result.output
    assert "Traceback" not in result.output


def test_eval_cli_faithfulness_metrics_need_no_model(tmp_path: Path) -> None:
    import json

    records = [
        {
            "source_text": "I shall attend.",
            "output": "I'll be there!",
            "source_style": "formal",
            "target_style": "informal",
        },
        {
            "source_text": "Kindly reply.",
            "output": "Rewrite this sentence in a casual, informal style, as you would say it to a friend.",
            "source_style": "formal",
            "target_style": "informal",
        },
    ]
    path = tmp_path / "out.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(cli, ["eval", str(path), "--metrics", "meta,near-loop,junk,content", "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output[result.output.index("{") :])
    assert scores["meta"] == 0.5 and scores["near_loop"] == 0.0 and scores["junk"] == 0.0
