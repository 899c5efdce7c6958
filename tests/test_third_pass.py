"""The third hostile pass (issue 43), the cases its first fixes left open, each at the level a user
meets it: one line naming the bad value and the fix, the exit code, and every file that was there
before left as it was — two runs on one -o, a user's files beside steer's, a changed results file,
the Hub offline, an unwritable cache, ragged tables, invisible texts, options a recipe ignores."""

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
from conftest import FORMAL, INFORMAL
from test_distributed import _profiled, _transfer_args
from test_hostile import METRICS, _write_run, files_in, refused
from test_hostile import no_model as no_model  # a fixture
from test_reliability import run, transfer_args

from steer.cli import cli
from steer.runs.partial import PartialRecords


def _interrupted(args: list[str], out: Path, monkeypatch: pytest.MonkeyPatch, batches: int = 1) -> Path:
    """`steer transfer ARGS -o OUT` stopped by Ctrl-C after `batches` batches: its partial file."""
    original = PartialRecords.append
    calls: list[int] = []

    def crash(self: PartialRecords, items: Any) -> None:
        if len(calls) == batches:
            raise KeyboardInterrupt
        calls.append(len(items))
        original(self, items)

    monkeypatch.setattr(PartialRecords, "append", crash)
    assert CliRunner().invoke(cli, [*args, "-o", str(out)]).exit_code == 130
    monkeypatch.setattr(PartialRecords, "append", original)
    partial = out.with_name(out.name + ".partial")
    assert partial.is_file()
    return partial


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


# case 27: a resume at another batch size writes what an uninterrupted run at that size writes
def test_a_resume_at_another_batch_size_records_one_batch_size(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prof, inputs = _profiled(tmp_path, saved_model, corpus_files)
    args = _transfer_args(prof, inputs)  # --batch-size 2
    whole3, out = tmp_path / "whole3.jsonl", tmp_path / "out.jsonl"
    assert CliRunner().invoke(cli, [*args, "--batch-size", "3", "-o", str(whole3)]).exit_code == 0
    _interrupted(args, out, monkeypatch, batches=2)
    resumed = run(*args, "--batch-size", "3", "-o", str(out), "--resume")
    assert resumed.exit_code == 0, resumed.output
    sizes = {json.loads(line)["settings"]["batch_size"] for line in out.read_text().splitlines()}
    assert sizes == {3}
    assert out.read_bytes() == whole3.read_bytes()


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


# case 11: steer push with the Hub offline or unreachable
def test_push_offline_or_unreachable_is_one_line(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = files_in(tmp_path)
    refused(run("push", str(prof), "me/repo"), "HF_HUB_OFFLINE is set, and 'steer push' uploads to the Hub; unset it")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    refused(run("push", str(prof), "me/repo"), f"could not push {prof} to me/repo: ")  # no probe note before it
    assert "check the network and your login" in run("push", str(prof), "me/repo").output
    assert files_in(tmp_path) == before


# case 12: STEER_CACHE where no folder can be made
def test_an_unusable_steer_cache_is_one_line(tmp_path: Path, corpus_files: tuple[Path, Path]) -> None:
    from conftest import profile_args

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF" + bytes(64))
    before = files_in(tmp_path)
    os.environ["STEER_CACHE"], saved = str(blocker / "cache"), os.environ.get("STEER_CACHE")
    try:
        result = run(*profile_args(fake, corpus_files), "-o", str(tmp_path / "p.safetensors"))
    finally:
        os.environ["STEER_CACHE"] = saved or ""
    refused(result, f"STEER_CACHE {blocker / 'cache'} cannot hold steer's converted models and encoders")
    assert "point STEER_CACHE at a folder you can write" in result.output
    assert files_in(tmp_path) == before


# case 21: a TSV row too short to have the selected column
def test_a_table_row_without_the_column_is_refused_with_its_line(
    tmp_path: Path, prof: Path, saved_model: Path, no_model: None
) -> None:
    table = tmp_path / "in.tsv"
    table.write_text("id\ttext\n1\thello there\n\n2\n3\tgood day\n")
    before = files_in(tmp_path)
    message = f"{table}: line 4 has 1 of the header's 2 columns, so no 'text'"
    refused(run(*transfer_args(prof), "-i", str(table), "-o", str(tmp_path / "o.jsonl")), message)
    other = tmp_path / "b.txt"
    other.write_text("\n".join(INFORMAL) + "\n")
    style = ["profile", "--model", str(saved_model), "--style", f"formal={table}", "--style", f"informal={other}"]
    refused(run(*style, "-o", str(tmp_path / "p2.safetensors")), message)
    assert files_in(tmp_path) == {**before, "b.txt": other.read_bytes()}


# case 23: a probe that is not one names the fix; a profile that is not one says only that
def test_a_bad_probe_or_profile_names_the_fix(tmp_path: Path, prof: Path) -> None:
    probe = tmp_path / "p.probe.safetensors"
    probe.write_text("junk")
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "--preset", "rerank", "hey"),
        f"not a probe; rebuild it with: steer probe {prof} --force",
    )
    refused(run("push", str(prof), "me/repo"), "not a probe; rebuild it with")
    bad = tmp_path / "bad.safetensors"
    bad.write_text("not a profile")
    refused(run(*transfer_args(bad), "hey"), "not a profile; pass the file 'steer profile' wrote, or make one with it")
    refused(run("inspect", str(bad)), "not a profile; pass the file")
    assert files_in(tmp_path) == {**before, "bad.safetensors": b"not a profile"}


# case 25: an export's files all have the permissions open() gives under the umask
def test_an_export_is_readable_under_the_umask(tmp_path: Path, prof: Path) -> None:
    old = os.umask(0o022)
    try:
        result = run("export", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(tmp_path / "exp"))
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    modes = {
        str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777
        for p in [tmp_path / "exp", *(tmp_path / "exp").rglob("*")]
    }
    assert modes["exp/model.safetensors"] == 0o644
    assert all(m == (0o755 if (tmp_path / name).is_dir() else 0o644) for name, m in modes.items()), modes


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


def test_an_invisible_input_line_is_a_blank_line(tmp_path: Path, prof: Path) -> None:
    infile = tmp_path / "in.txt"
    infile.write_text("hey dude\n\u200b\nok lol\n")
    result = run(*transfer_args(prof), "-i", str(infile))
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[0] and lines[2]


# case 20, the rest: a direction from a style to itself, and a NaN where a whole number goes
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[[directions]]\nfrom = 'a'\nto = 'a'\n", "direction a→a goes from a style to itself; give two different"),
        (
            "[transfer]\nmax_new_tokens = nan\n",
            "[transfer] max_new_tokens = nan is not valid (max_new_tokens must be a whole",
        ),
        ("[transfer]\nmax_new_tokens = 3.7\n", "[transfer] max_new_tokens = 3.7 is not valid"),
        ("[transfer]\nbatch_size = 0\n", "[transfer] batch_size = 0: batch_size must be at least 1"),
        # the fourth pass (E): values of the wrong type — a mode or metric that is not a name, a flag for a count
        ("modes = [1]\n", "modes [1] is not valid; give a non-empty list"),
        ('modes = ["prompt", 2]\n', "modes ['prompt', 2] is not valid"),
        ('metrics = "j"\n', "metrics 'j' is not valid; give a list of names"),
        ("metrics = [true]\n", "metrics [True] is not valid"),
        (
            "[transfer]\nmax_new_tokens = true\n",
            "max_new_tokens = true is not valid (max_new_tokens must be a whole number, got true)",
        ),
        ("[transfer]\nbatch_size = false\n", "batch_size = false is not valid (batch_size must be a whole number"),
        ('[profile]\nlimit = "ten"\n', "[profile] limit = 'ten' is not valid; give a whole number"),
        ("[profile]\nbatch_size = 0\n", "[profile] batch_size = 0 is not valid; give a whole number"),
        # a ninth-pass note: blocks were checked for syntax only when the edit was built (after profiling)
        (
            "[contrast]\nlayers = '29-0'\n",
            "c.toml: [contrast] layers '29-0' is not valid: the range '29-0' runs "
            "backwards; write it LOW-HIGH ('0-29')",
        ),
        (
            "[tune]\ncandidates = [{preset = 'guided', edit_layers = 'last:0'}]\n",
            "tune candidate {'preset': 'guided', 'edit_layers': 'last:0'}: edit_layers 'last:0' is not valid: last:N "
            "needs N ≥ 1, got 0",
        ),
        (
            "[tune]\ncandidates = [{preset = 'guided', edit_layers = true}]\n",
            "tune candidate {'preset': 'guided', 'edit_layers': True}: edit_layers True is not valid; use '24,26,28'",
        ),
    ],
)
def test_a_config_direction_or_value_is_refused_when_read(
    tmp_path: Path, extra: str, message: str, monkeypatch: pytest.MonkeyPatch, no_model: None
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.txt").write_text("y\n")
    config = tmp_path / "c.toml"
    head, tail = ("", extra) if extra.startswith("[") else (extra, "")  # a top-level key goes above the tables
    styles = "[styles.a]\ntrain = 'a.txt'\ndev = 'a.txt'\n[styles.b]\ntrain = 'b.txt'\ndev = 'b.txt'\n"
    config.write_text(head + "limit = 1\n" + styles + tail)
    before = files_in(tmp_path)
    result = run("run", str(config), "-o", str(tmp_path / "out"))
    refused(result, f"{config}: {message}" if "direction" in extra else message)
    assert files_in(tmp_path) == before


# the top-level guard: an OSError on a path is one line naming it
def test_an_os_error_on_a_path_is_one_line(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(self: PartialRecords) -> None:
        raise PermissionError(13, "Permission denied", str(self.path))

    monkeypatch.setattr(PartialRecords, "open", denied)
    out = tmp_path / "o.jsonl"
    refused(run(*transfer_args(prof), "hey", "-o", str(out)), f"{out}.partial: Permission denied; check the path")


# case 17: a rewrite that cleaning emptied although the model replied is counted and warned about
def test_transfer_warns_of_outputs_cleaning_emptied(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from steer.runs.service import RewriteService

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


# case 3: an unwritable output folder, checked before any work — as an unprivileged user (root writes
# anywhere, so a suite run as root drops to `nobody` with setpriv for these commands)
def test_an_unwritable_output_folder_is_refused_before_any_work(tmp_path: Path, prof: Path) -> None:
    import shutil
    import tempfile

    as_user: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "util-linux's setpriv drops root for this test"
        as_user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    base = Path(tempfile.mkdtemp(prefix="steer-ro-"))  # outside pytest's 0700 root-owned folders
    try:
        os.chmod(base, 0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        os.chmod(locked, 0o555)  # no one but root may write here
        (base / "a.txt").write_text("\n".join(FORMAL) + "\n")
        (base / "b.txt").write_text("\n".join(INFORMAL) + "\n")
        shutil.copyfile(prof, base / "p.safetensors")
        _write_run(base / "run", METRICS)
        for path in [base / "run", *base.rglob("*.*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        styles = ["--style", f"formal={base / 'a.txt'}", "--style", f"informal={base / 'b.txt'}"]
        cases = [
            ["transfer", "-p", str(base / "none.safetensors"), "--from", "formal", "--to", "informal", "hi",
             "-o", str(locked / "o.jsonl")],
            ["profile", "--model", str(base / "no-model"), *styles, "-o", str(locked / "p.safetensors")],
            ["report", str(base / "run"), "-o", str(locked / "results.md")],
            ["inspect", str(base / "p.safetensors"), "--plot", str(locked / "x.png")],
            ["export", "-p", str(base / "p.safetensors"), "--from", "formal", "--to", "informal",
             "-o", str(locked / "export")],
        ]  # fmt: skip
        env = {**os.environ, "HOME": str(base), "STEER_CACHE": str(base / "cache"), "MPLCONFIGDIR": str(base)}
        for args in cases:
            done = subprocess.run(
                [*as_user, sys.executable, "-m", "steer", *args], capture_output=True, text=True, env=env
            )
            assert done.returncode == 1, (args, done.stderr)
            assert f"the folder {locked} is not writable" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert sorted(p.name for p in locked.iterdir()) == []
    finally:
        os.chmod(base / "locked", 0o755)
        shutil.rmtree(base)
