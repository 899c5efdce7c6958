"""`steer instruct` and the recipes that read it: the file it writes beside the profile, what it
refuses (before the model loads where it can), and `steer transfer --push` / `--refusal` end to end."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import files_in, refused, run, transfer_args


def test_instruct_writes_the_measurements_and_transfer_pushes_with_them(prof: Path) -> None:
    from steer.profiling.instruction import InstructionShifts, instruction_path

    result = run("instruct", str(prof), "--from", "formal", "--to", "informal", "--refusal", "--limit", "4", "-q")
    assert result.exit_code == 0, result.output
    assert "formal → informal: instruction shift measured on 4 texts" in result.output
    found = InstructionShifts.load(instruction_path(prof))
    assert set(found.shifts) == {"formal->informal"} and found.refusal is not None
    out = prof.parent / "pushed.jsonl"
    args = [*transfer_args(prof), "--preset", "prompt", "--push", "2", "--guidance", "1", "--refusal", "0.5"]
    result = run(*args, "-o", str(out), "-q", "I would be grateful for your reply.")
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text().splitlines()[0])
    assert record["settings"]["push"] == 2.0 and record["settings"]["refusal"] == 0.5
    steps = record["filtered_steps"]
    assert set(steps) == {"guidance", "of"} and 0 <= steps["guidance"] <= steps["of"] <= 3
    # a second measurement of the same direction needs --force; the file is left as it was
    before = files_in(prof.parent)
    refused(run("instruct", str(prof), "--from", "formal", "--to", "informal", "-q"), "already holds formal → informal")
    assert files_in(prof.parent) == before


def test_push_without_measurements_names_the_command(prof: Path, no_model: None) -> None:
    result = run(*transfer_args(prof), "--preset", "prompt", "--push", "1", "-q", "Good morning.")
    refused(result, f"run: steer instruct {prof} --from SOURCE --to TARGET")


def test_instruct_refuses_bad_options_before_the_model(prof: Path, no_model: None) -> None:
    refused(run("instruct", str(prof), "-q"), "nothing to measure: pass --from SOURCE --to TARGET, or --refusal")
    refused(run("instruct", str(prof), "--from", "formal", "-q"), "1 --from but 0 --to")
    refused(run("instruct", str(prof), "--from", "formal", "--to", "casual", "-q"), "casual")
    refused(run("instruct", str(prof), "--refusal", "--neutral", "echo", "-q"), "--neutral 'echo' is not valid")


def test_push_options_are_checked(prof: Path, no_model: None) -> None:
    refused(run(*transfer_args(prof), "--preset", "prompt", "--push-schedule", "first:2", "x"), "--push is 0")
    refused(run(*transfer_args(prof), "--preset", "prompt", "--push", "1", "--push-schedule", "soon", "x"), "first:N")
    refused(run(*transfer_args(prof), "--preset", "prompt", "--refusal", "2", "x"), "between 0 (off) and 1")
