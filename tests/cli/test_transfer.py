"""`steer transfer` end to end: records, input lines, options checked before the model loads, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import _profile_file, _steering, _transfer, files_in, refused, run, transfer_args
from conftest import one_line_error_exit_1 as one_line_error

from steer.cli import cli
from steer.profiling.corpus import read_texts


def test_transfer_round_trip_jsonl(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    import json

    prof = _profile_file(tmp_path, saved_model, corpus_files)
    out = tmp_path / "out.jsonl"
    result = run(
        "transfer", *_steering(prof), "-i", str(corpus_files[0]), "-o", str(out), "--preset", "paper",
        "--contrast-layers", "0-1", "--max-new-tokens", "4", "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["source_text"] for r in records] == corpus_files[0].read_text().splitlines()
    keys = {
        "source_text",
        "output",
        "raw_output",
        "source_style",
        "target_style",
        "mode",
        "settings",
        "model_id",
        "fingerprint",
        "profile_sha256",
        "seed",
        "truncated",
        "recipe",
        "steer_version",
    }
    assert all(keys <= set(r) for r in records)
    import hashlib

    assert records[0]["profile_sha256"] == hashlib.sha256(prof.read_bytes()).hexdigest()
    settings = records[0]["settings"]
    assert settings["top_k"] == "10%" and settings["method"] == "diff"  # explicit options win over the preset
    assert records[0]["mode"] == "deactivate" and settings["contrast"] and settings["beta"] == 1.0  # the rest: paper
    assert records[0]["recipe"] == "deactivate diff 10% + contrast β=1"
    clash = run("transfer", *_steering(prof), "--contrast", "-q", "hello")
    assert clash.exit_code == 1 and "add --guidance 0 or pick --preset paper" in clash.output
    spelled_out = tmp_path / "spelled.jsonl"  # an explicit --mode starts from that mode's bare settings
    result = run(
        "transfer", *_steering(prof), "--mode", "deactivate", "--contrast", "--contrast-layers", "0-1",
        "--max-new-tokens", "4", "-q", "-o", str(spelled_out), "hello",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    spelled = json.loads(spelled_out.read_text())["settings"]
    assert spelled["mode"] == "deactivate" and spelled["contrast"] and spelled["guidance"] == 0.0


def test_transfer_stdin_and_args(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    prof = _profile_file(tmp_path, saved_model, corpus_files)
    base = ["transfer", "-p", str(prof), "--from", "informal", "--to", "formal", "--max-new-tokens", "3", "-q"]
    from_args = run(*base, "hey dude", "ok lol")
    from_stdin = run(*base, input="hey dude\nok lol\n")
    assert from_args.exit_code == from_stdin.exit_code == 0
    assert from_args.stdout == from_stdin.stdout and len(from_args.stdout.split("\n")) == 3
    compare = run(*base, "--compare", "hey dude")
    assert compare.exit_code == 0 and "prompt:" in compare.output and "steered:" in compare.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--from", "formal", "--to", "casual"], "its styles: formal, informal"),
        (["--from", "formal", "--to", "informal", "--top-k", "-3"], "--top-k"),
        (["--from", "formal", "--to", "informal", "--top-k", "999999"], "--top-k"),
        (["--from", "formal", "--to", "informal", "--preset", "paper", "--contrast-layers", "7"], "--contrast-layers"),
        (["--from", "formal", "--to", "informal", "--alpha", "0"], "--alpha"),
        (["--from", "formal", "--to", "informal", "--edit-layers", "last:99"], "--edit-layers"),
        (["--from", "formal", "--to", "informal", "-i", "{empty}"], "no texts"),
        (["--from", "formal", "--to", "informal", "--model", "{other}"], "fingerprint"),
    ],
)
def test_transfer_errors(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], extra: list[str], message: str
) -> None:
    from conftest import make_model, make_tokenizer

    prof = _profile_file(tmp_path, saved_model, corpus_files)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    other = tmp_path / "other"
    make_model("llama", seed=9).save_pretrained(other)
    make_tokenizer().save_pretrained(other)
    args = [a.format(empty=empty, other=other) for a in extra]
    out = tmp_path / "o.jsonl"
    result = CliRunner().invoke(
        cli,
        ["transfer", "-p", str(prof), *args, "-o", str(out), "-q", "hello"]
        if "-i" not in args
        else ["transfer", "-p", str(prof), *args, "-o", str(out), "-q"],
    )
    assert result.exit_code == 1, result.output
    assert message in result.output and result.output.count("\n") == 1
    assert not out.exists()


# 2. blank input lines stay blank output lines (line alignment for pipes and --ref)
def test_transfer_keeps_blank_lines_aligned(tmp_path: Path, prof: Path) -> None:
    result = run(*transfer_args(prof), input="hey dude\n\nok lol\n")
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # three lines in, three lines out
    out = tmp_path / "o.jsonl"
    infile = tmp_path / "in.txt"
    infile.write_text("hey dude\n\nok lol\n")
    assert run(*transfer_args(prof), "-i", str(infile), "-o", str(out)).exit_code == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["source_text"] for r in records] == ["hey dude", "", "ok lol"] and records[1]["output"] == ""


def test_an_invisible_input_line_is_a_blank_line(tmp_path: Path, prof: Path) -> None:
    infile = tmp_path / "in.txt"
    infile.write_text("hey dude\n\u200b\nok lol\n")
    result = run(*transfer_args(prof), "-i", str(infile))
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2]


# 3. an empty TEXT argument is an error, like an empty file
@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_argument_is_an_error(prof: Path, text: str) -> None:
    one_line_error(run(*transfer_args(prof), text), "TEXT argument 1 is empty")


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


# issue 43, case 13: transfer -i - (or no input at all) with standard input closed
def test_transfer_from_a_closed_stdin_is_one_line(tmp_path: Path, prof: Path) -> None:
    import io
    import os
    import subprocess
    import sys

    from steer.errors import SteerError

    before = files_in(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
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


# 12. -q hides progress, not warnings
def test_quiet_keeps_warnings(prof: Path) -> None:
    long_text = " ".join(["hey"] * 40)
    result = run(*transfer_args(prof), "--max-input-tokens", "5", long_text)
    assert result.exit_code == 0, result.output
    assert "truncated" in result.stderr


# case 17: a rewrite that cleaning emptied although the model replied is counted and warned about
def test_transfer_warns_of_outputs_cleaning_emptied(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from steer.rewriting.service import RewriteService

    original = RewriteService.results

    def first_emptied(self: RewriteService, texts: Any, on_batch: Any = None) -> Any:
        results = original(self, texts, on_batch)
        return [replace(results[0], output="", raw_output="Rewrite this sentence: hey"), *results[1:]]

    monkeypatch.setattr(RewriteService, "results", first_emptied)
    result = run(*transfer_args(prof), "hey dude", "ok lol")
    assert result.exit_code == 0, result.output
    assert "steer: warning: 1 of 2 rewrites came out empty: cleaning removed all of the model's reply" in result.output
    assert "--no-clean keeps replies" in result.output
    monkeypatch.setattr(RewriteService, "results", original)
    assert "came out empty" not in run(*transfer_args(prof), "hey dude").output


# case 32: invisible texts, options the recipe ignores, out-of-range values, --resume with --force
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["\u200b"], "TEXT argument 1 is empty (only zero-width or invisible characters)"),
        (["\u200b\ufeff "], "TEXT argument 1 is empty (only zero-width"),
        (["--preset", "prompt", "--guidance", "3", "hey"], "--guidance 3.0 has no effect here: the plain prompt"),
        (["--preset", "prompt", "--top-k", "3", "hey"], "--top-k '3' has no effect here"),
        (["--preset", "paper", "--strength", "2", "hey"], "--strength 2.0 has no effect here: it is λ of --mode shift"),
        (["--top-k", "100%", "hey"], "--top-k '100%' is not valid; give a count, a percentage below 100%"),
        (["--top-k", "1.0", "hey"], "--top-k '1.0' is not valid; give a count, a percentage below 100%"),
        (
            ["--strength", "-1e308", "hey"],
            "--strength must be between 0 and 1e+06, got -1e+308; to steer the other way",
        ),
        (["--strength", "1e300", "hey"], "--strength must be between 0 and 1e+06"),
        (["--resume", "--force", "-o", "OUT", "hey"], "--resume continues an interrupted run and --force starts over"),
    ],
)
def test_options_that_would_do_nothing_or_harm_are_refused(
    tmp_path: Path, prof: Path, no_model: None, options: list[str], message: str
) -> None:
    options = [str(tmp_path / "o.jsonl") if o == "OUT" else o for o in options]
    before = files_in(tmp_path)
    refused(run(*transfer_args(prof), *options), message)
    assert files_in(tmp_path) == before


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


# 18: -o naming a folder (a trailing slash) or nothing is a usage error, and nothing is created
@pytest.mark.parametrize("output", ["newdir/", ""])
def test_an_output_that_names_a_folder_or_nothing_is_a_usage_error(
    tmp_path: Path, prof: Path, no_model: None, output: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, _transfer(prof, "-o", output, "Hello."))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ("names a folder" if output else "is empty") in result.output
    assert files_in(tmp_path) == before and not (tmp_path / "newdir").exists()


def test_transfer_processes_need_an_output(tmp_path: Path, saved_model: Path) -> None:
    """Checked before any model loads: the profile path does not even have to exist."""
    base = ["transfer", "-p", str(tmp_path / "none.safetensors"), "--from", "a", "--to", "b", "hello"]
    for extra in (["--processes", "2"], ["--resume"], ["--resume", "--compare", "-o", str(tmp_path / "x.jsonl")]):
        result = CliRunner().invoke(cli, [*base, *extra])
        assert result.exit_code == 1 and "write through -o FILE" in result.output, result.output
    bad = CliRunner().invoke(cli, [*base, "--processes", "0", "-o", str(tmp_path / "x.jsonl")])
    assert bad.exit_code == 1 and "--processes must be at least 1" in bad.output


def test_transfer_json_prints_the_records_o_writes(prof: Path, tmp_path: Path) -> None:
    args = [*transfer_args(prof), "--top-k", "10%", "could you please send it ?", "thanks , i would be grateful ."]
    out = tmp_path / "r.jsonl"
    assert run(*args, "-o", str(out)).exit_code == 0
    printed = run(*args, "--json")
    assert printed.exit_code == 0, printed.output
    assert [json.loads(x) for x in printed.output.splitlines()] == [
        json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()
    ]
    refused(run(*args, "--json", "-o", str(tmp_path / "x.jsonl")), "--json prints records to stdout")
