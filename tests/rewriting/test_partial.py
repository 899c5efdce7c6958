"""Partial files (`steer.rewriting.partial`): a user's files, links and FIFOs left alone, one writer
at a time, and what --resume may continue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import (
    METRICS,
    _interrupted,
    _profiled,
    _transfer_args,
    _whole_run,
    _write_run,
    files_in,
    refused,
    run,
    transfer_args,
)

from steer.cli import cli
from steer.errors import SteerError
from steer.rewriting.partial import PartialRecords


def _entries(folder: Path) -> dict[str, str]:
    """Every entry of `folder` with what it is: a link's target, a FIFO, or a file's text."""
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_symlink():
            out[p.name] = "link to " + os.readlink(p)
        elif p.is_fifo():
            out[p.name] = "fifo"
        elif p.is_file():
            out[p.name] = p.read_bytes().hex()
    return out


def _with_append_hook(monkeypatch: pytest.MonkeyPatch, before_call: dict[int, Any]) -> None:
    """Run `before_call[n]()` just before the n-th (0-based) append of a partial file; a hook that
    returns "stop" makes that append a Ctrl-C."""
    original = PartialRecords.append
    calls = [0]

    def hooked(self: PartialRecords, items: Any) -> None:
        action = before_call.get(calls[0])
        calls[0] += 1
        if action is not None and action() == "stop":
            raise KeyboardInterrupt
        original(self, items)

    monkeypatch.setattr(PartialRecords, "append", hooked)


def test_close_removes_only_a_header_only_file_it_created(tmp_path: Path) -> None:
    from steer.rewriting.partial import PartialRecords
    from steer.rewriting.records import TransferRecord

    out = tmp_path / "o.jsonl"
    empty = PartialRecords(out, "k")
    empty.open()
    assert empty.path.exists()
    empty.close()
    assert not empty.path.exists()  # nothing was finished: nothing to resume

    written = PartialRecords(out, "k")
    written.open()
    fields = ("source_text", "output", "source_style", "target_style", "mode", "model_id", "fingerprint")
    record = TransferRecord.from_dict({name: "x" for name in fields}, "test")
    written.append([(0, record)])
    written.close()
    assert PartialRecords.leftovers(out) == [written.path]  # a finished rewrite stays, resumable
    assert list(PartialRecords.read_all(out, "k")) == [0]


# case 26: a user's own files named like steer's partial files
def test_a_users_files_named_like_partial_files_are_never_touched(tmp_path: Path, prof: Path, no_model: None) -> None:
    out = tmp_path / "run[1].jsonl"
    mine = tmp_path / "run[1].jsonl.partial"
    mine.write_text("my notes\n")
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "hey", "-o", str(out)),
        f"{mine} is not a steer partial file, and this run would write its own under that name; move it away",
    )
    refused(run(*transfer_args(prof), "hey", "-o", str(out), "--force"), "is not a steer partial file")
    assert files_in(tmp_path) == before


def test_a_users_partial_named_file_of_another_rank_is_left_alone(tmp_path: Path, prof: Path) -> None:
    out = tmp_path / "run[1].jsonl"
    other = tmp_path / "run[1].jsonl.partial.7"  # rank 7's name, and this run has one process
    other.write_text("mine\n")
    done = run(*transfer_args(prof), "hey", "-o", str(out))
    assert done.exit_code == 0, done.output
    assert "--resume" not in done.output and other.read_text() == "mine\n" and out.is_file()


# F: a user's symbolic link (dangling or not) named as steer's partial file is neither followed
# nor removed — refused before the model loads
@pytest.mark.parametrize("target", ["nowhere/made.jsonl", "theirs.txt"])
def test_a_users_link_at_the_partial_name_is_refused_and_left_alone(
    tmp_path: Path, prof: Path, no_model: None, target: str
) -> None:
    (tmp_path / "theirs.txt").write_text("a user's file\n")
    out = tmp_path / "o.jsonl"
    (tmp_path / "o.jsonl.partial").symlink_to(target)
    before = _entries(tmp_path)
    refused(run(*transfer_args(prof), "hey", "-o", str(out)), "o.jsonl.partial is not a steer partial file")
    refused(run(*transfer_args(prof), "hey", "-o", str(out), "--force"), "o.jsonl.partial is not a steer partial")
    assert _entries(tmp_path) == before
    assert not (tmp_path / "nowhere").exists()


# A: a FIFO (the stand-in for a device or socket) named as the partial file: refused before any
# model loads, and never opened for writing even when it appears after that check
def test_a_fifo_at_the_partial_name_is_refused_before_loading_and_never_written(
    tmp_path: Path, prof: Path, no_model: None
) -> None:
    out = tmp_path / "o.jsonl"
    os.mkfifo(tmp_path / "o.jsonl.partial")
    before = _entries(tmp_path)
    refused(run(*transfer_args(prof), "hey", "-o", str(out)), "o.jsonl.partial is not a steer partial file")
    assert _entries(tmp_path) == before
    from steer.errors import SteerError

    with pytest.raises(SteerError, match="o.jsonl.partial is not a regular file; move it away"):
        PartialRecords(out, "key").open()  # the race: made between the check and the open
    assert _entries(tmp_path) == before
    (tmp_path / "o.jsonl.partial").unlink()
    (tmp_path / "o.jsonl.partial").symlink_to("made-by-the-link")
    with pytest.raises(SteerError, match="cannot be opened as steer's partial file"):
        PartialRecords(out, "key").open()
    assert not (tmp_path / "made-by-the-link").exists()


# case 5: two writers on one -o — a second run (--resume or --force) while the first holds the
# partial file, and a file a user makes at -o while a run writes it
def test_two_runs_on_one_output_cannot_interleave_or_replace(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"
    assert CliRunner().invoke(cli, [*args, "-o", str(whole)]).exit_code == 0
    partial = _interrupted(args, out, monkeypatch)
    # a second process holds the partial file's lock, as a running `steer transfer -o out.jsonl` does
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import fcntl, sys, time
            fh = open({str(partial)!r}, "rb")
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            print("locked", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = files_in(tmp_path)
        for extra in (["--resume"], ["--force"]):
            refused(run(*args, "-o", str(out), *extra), f"{out} is being written by another steer run now")
        assert files_in(tmp_path) == before  # the partial file neither removed nor appended to
    finally:
        holder.communicate("")
    resumed = run(*args, "-o", str(out), "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert out.read_bytes() == whole.read_bytes() and not partial.exists()

    # a user's file appears at -o while the run decodes: left as it is, the rewrites kept and resumable
    out.unlink()
    original = PartialRecords.append

    def user_writes_the_output(self: PartialRecords, items: Any) -> None:
        original(self, items)
        if not out.exists():
            out.write_text("the user's own file\n")

    monkeypatch.setattr(PartialRecords, "append", user_writes_the_output)
    raced = run(*args, "-o", str(out))
    monkeypatch.setattr(PartialRecords, "append", original)
    refused(raced, f"{out} appeared while this run was writing it (another program made it) and was left as it is")
    assert out.read_text() == "the user's own file\n" and partial.is_file()
    out.rename(tmp_path / "moved.txt")
    again = run(*args, "-o", str(out), "--resume")
    assert again.exit_code == 0, again.output
    assert out.read_bytes() == whole.read_bytes() and (tmp_path / "moved.txt").read_text() == "the user's own file\n"


# B: the partial file removed mid-run (by hand, a cleaner) is put back whole: the run finishes as
# an uninterrupted one, and a run interrupted after the removal still resumes
def test_a_partial_file_removed_mid_run_is_put_back_and_stays_resumable(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)
    whole, out, cut = tmp_path / "whole.jsonl", tmp_path / "out.jsonl", tmp_path / "cut.jsonl"
    assert CliRunner().invoke(cli, [*args, "-o", str(whole)]).exit_code == 0

    def remover(path: Path) -> Any:
        return lambda: path.with_name(path.name + ".partial").unlink()

    _with_append_hook(monkeypatch, {2: remover(out)})
    result = CliRunner().invoke(cli, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == whole.read_bytes()
    assert not PartialRecords.files(out)

    _with_append_hook(monkeypatch, {1: remover(cut), 3: lambda: "stop"})
    assert CliRunner().invoke(cli, [*args, "-o", str(cut)]).exit_code == 130
    kept = [json.loads(line) for line in cut.with_name("cut.jsonl.partial").read_text().splitlines()]
    assert "partial_of" in kept[0] and len(kept) == 1 + 3 * 2  # the header and three batches of two
    monkeypatch.undo()
    resumed = CliRunner().invoke(cli, [*args, "-o", str(cut), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert cut.read_bytes() == whole.read_bytes()


# B, the other writer: the partial file replaced by another file mid-run stops the run with one
# line, and the other file is left as it is
def test_a_partial_file_replaced_mid_run_stops_the_run_and_is_left_alone(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    out = tmp_path / "out.jsonl"
    partial = tmp_path / "out.jsonl.partial"

    def replace() -> None:
        partial.unlink()
        partial.write_text("someone else's\n")

    _with_append_hook(monkeypatch, {1: replace})
    result = CliRunner().invoke(cli, [*_transfer_args(prof, inputs), "-o", str(out)])
    refused(result, "out.jsonl.partial was replaced by another file while this run was writing it")
    assert partial.read_text() == "someone else's\n" and not out.exists()


# B3: the partial file removed, then the run interrupted before its next batch (Ctrl-C): the batches it
# finished are put back as it stops, so --resume still gives the uninterrupted file
def test_a_partial_file_removed_then_interrupted_keeps_every_finished_batch(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args, whole = _whole_run(tmp_path, saved_model, corpus_files)
    cut = tmp_path / "cut.jsonl"
    partial = cut.with_name("cut.jsonl.partial")

    def remove_then_stop() -> str:
        partial.unlink()
        return "stop"

    _with_append_hook(monkeypatch, {2: remove_then_stop})  # two batches of two written, then both lost
    assert CliRunner().invoke(cli, [*args, "-o", str(cut)]).exit_code == 130
    kept = [json.loads(line) for line in partial.read_text().splitlines()]
    assert "partial_of" in kept[0] and len(kept) == 1 + 2 * 2  # the header and the two finished batches
    monkeypatch.undo()
    resumed = CliRunner().invoke(cli, [*args, "-o", str(cut), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert cut.read_bytes() == whole.read_bytes()


def test_resume_survives_a_cut_line_odd_names_and_leaves_other_files(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial file whose last line was cut (SIGKILL, OOM) resumes; `run[1].jsonl` (glob characters)
    finishes; a user's `FILE.partial.bak` is neither read nor deleted."""
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)
    whole, out = tmp_path / "whole.jsonl", tmp_path / "run[1].jsonl"
    assert CliRunner().invoke(cli, [*args, "-o", str(whole)]).exit_code == 0
    original = PartialRecords.append
    calls: list[int] = []

    def crash_after_one_batch(self: PartialRecords, items: Any) -> None:
        if calls:
            raise KeyboardInterrupt
        calls.append(len(items))
        original(self, items)

    monkeypatch.setattr(PartialRecords, "append", crash_after_one_batch)
    assert CliRunner().invoke(cli, [*args, "-o", str(out)]).exit_code == 130
    monkeypatch.setattr(PartialRecords, "append", original)
    partial = tmp_path / "run[1].jsonl.partial"
    partial.write_bytes(partial.read_bytes() + b'{"index": 7, "rec')  # the crash cut the last line
    backup = tmp_path / "run[1].jsonl.partial.bak"
    backup.write_text("my own notes\n")
    # another batch size changes no output, so the resume may use one
    resumed = CliRunner().invoke(cli, [*args, "-o", str(out), "--resume", "--batch-size", "3"])
    assert resumed.exit_code == 0, resumed.output

    def outputs(path: Path) -> list[tuple[str, str]]:
        return [(r["source_text"], r["output"]) for r in map(json.loads, path.read_text().splitlines())]

    assert outputs(out) == outputs(whole)
    assert not partial.exists() and backup.read_text() == "my own notes\n"


# case 33: a partial file with input indices that do not exist; a record version that is not a number
def test_a_changed_partial_file_or_results_version_is_refused(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)
    out = tmp_path / "out.jsonl"
    partial = _interrupted(args, out, monkeypatch)
    lines = partial.read_text().splitlines()
    first = json.loads(lines[1])
    edited = [lines[0], *(json.dumps({**first, "index": i}) for i in (99, -1))]
    partial.write_text("\n".join(edited) + "\n")
    before = files_in(tmp_path)
    total = len([line for line in inputs.read_text().splitlines() if line])
    refused(run(*args, "-o", str(out), "--resume"), f"holds rewrites of input -1, but the input has {total} texts")
    partial.write_text(lines[0] + '\n{"record": {}}\n')
    refused(run(*args, "-o", str(out), "--resume"), "line 2 is not a rewrite steer wrote")
    partial.write_text("\n".join(edited) + "\n")
    assert files_in(tmp_path) == before

    run_dir = _write_run(tmp_path / "run", METRICS)
    results = run_dir / "results.json"
    data = json.loads(results.read_text())
    results.write_text(json.dumps({**data, "record_version": "one"}))
    refused(run("report", str(run_dir), "-o", str(tmp_path / "doc.md")), "record version 'one', which is not a version")
    assert "upgrade" not in run("report", str(run_dir), "-o", str(tmp_path / "doc.md")).output
    assert not (tmp_path / "doc.md").exists()


# D1: a run that fails after -o FILE.partial is opened but before its first batch leaves no partial
# file behind, so the corrected rerun is not told to --resume an interrupted run that holds nothing
def test_a_run_failing_before_its_first_batch_leaves_nothing_to_resume(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steer.generation.steerer

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise SteerError("the edit cannot be built (a stand-in for any failure before the first batch)")

    out = tmp_path / "o.jsonl"
    args = [*transfer_args(prof), "--mode", "deactivate", "-o", str(out), "hello", "good day"]
    before = files_in(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(steer.generation.steerer.Steerer, "build_edit", fails)
        refused(run(*args), "the edit cannot be built")
    assert files_in(tmp_path) == before  # no header-only o.jsonl.partial
    rerun = run(*args)
    assert rerun.exit_code == 0, rerun.output
    assert len(out.read_text().splitlines()) == 2 and not list(tmp_path.glob("o.jsonl.partial*"))


@pytest.mark.parametrize("resume", [False, True])
def test_a_partial_file_holding_only_its_header_does_not_block_the_run(
    tmp_path: Path, prof: Path, resume: bool
) -> None:
    """What a run killed before its first batch (or by an older steer) leaves: steer's header, no
    rewrite. Without --resume it is not 'rewrites of an interrupted run'; with --resume it is
    nothing to continue, whatever key it carries; either way the run writes its output."""
    out = tmp_path / "o.jsonl"
    partial = tmp_path / "o.jsonl.partial"
    partial.write_text(json.dumps({"partial_of": "o.jsonl", "key": "another run", "record_version": 1}) + "\n")
    result = run(*transfer_args(prof), "--mode", "deactivate", "-o", str(out), *(["--resume"] * resume), "hello")
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 1 and not partial.exists()


def test_a_partial_file_with_a_rewrite_still_asks_for_resume(tmp_path: Path, prof: Path) -> None:
    out = tmp_path / "o.jsonl"
    partial = tmp_path / "o.jsonl.partial"
    header = json.dumps({"partial_of": "o.jsonl", "key": "k", "record_version": 1})
    partial.write_text(header + "\n" + json.dumps({"index": 0, "record": {}}) + "\n")
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "--mode", "deactivate", "-o", str(out), "hello"),
        f"{partial} holds rewrites of an interrupted run; add --resume to continue it or --force to start over",
    )
    assert files_in(tmp_path) == before
