"""Output paths (`steer.files`): never an input, never a device, folders checked and made before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import (
    FORMAL,
    INFORMAL,
    METRICS,
    _transfer,
    _write_run,
    files_in,
    profile_args,
    refused,
    run,
    transfer_args,
)
from conftest import one_line_error_exit_1 as one_line_error

from steer.cli import cli


# 1: -o onto the input named with a :FIELD / :COLUMN selector is the input, with --force too
@pytest.mark.parametrize(("name", "body", "selector"), [("in.jsonl", '{"text": "Hello."}\n', "text"),
                                                       ("in.tsv", "text\nHello.\n", "text")])  # fmt: skip
def test_output_onto_the_input_named_with_a_selector_is_refused(
    tmp_path: Path, prof: Path, no_model: None, name: str, body: str, selector: str
) -> None:
    source = tmp_path / name
    source.write_text(body)
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, _transfer(prof, "-i", f"{source}:{selector}", "-o", str(source), "--force"))
    refused(result, "is the input (-i)")
    assert files_in(tmp_path) == before


# issue 43, case 2: a device, FIFO or socket at -o is refused, --force or not, and left as it is
def test_an_output_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, prof: Path, saved_model: Path, corpus_files: tuple[Path, Path]
) -> None:
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for args in (
        [*profile_args(saved_model, corpus_files), "-o", str(fifo), "--force", "-q"],
        [*transfer_args(prof), "hello", "-o", str(fifo), "--force"],
        ["probe", str(prof), "-o", str(fifo), "--force", "-q"],
    ):
        one_line_error(run(*args), f"-o {fifo} is a FIFO, not a file")
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# issue 43, cases 3 and 4: an output inside a file is one line before the model loads; missing folders are made
def test_output_folders_are_checked_and_made_before_the_work(tmp_path: Path, prof: Path) -> None:
    afile = tmp_path / "in.txt"
    afile.write_text("mine")
    for args in (
        [*transfer_args(prof), "hello", "-o", str(afile / "o.jsonl")],
        ["probe", str(prof), "-o", str(afile / "p.safetensors"), "-q"],
        ["inspect", str(prof), "--plot", str(afile / "x.png")],
    ):
        result = run(*args)
        assert result.exit_code == 1 and f"{afile} is a file, not a folder" in result.output, result.output
        assert "Traceback" not in result.output and afile.read_text() == "mine"
    deep = tmp_path / "nodir" / "deep" / "o.jsonl"
    assert run(*transfer_args(prof), "hello", "-o", str(deep)).exit_code == 0
    assert deep.is_file()


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


def test_an_output_inside_the_model_directory_is_refused_even_with_force(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], prof: Path
) -> None:
    """The model's own files are inputs: `-o MODEL/config.json --force` never replaces them."""
    config = (saved_model / "config.json").read_bytes()
    args = [*profile_args(saved_model, corpus_files), "-o", str(saved_model / "config.json"), "--force", "-q"]
    refused(CliRunner().invoke(cli, args), "is inside the model")
    moved = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-q", "hello"]
    refused(CliRunner().invoke(cli, [*moved, "-o", str(saved_model / "x.txt")]), "is inside the profile's model")
    assert (saved_model / "config.json").read_bytes() == config and not (saved_model / "x.txt").exists()
