"""`steer`'s command group: usage errors, options named as the running command's, signals and the one-line guard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import one_line_error, profile_args, refused, run, transfer_args

from steer.cli import cli
from steer.rewriting.partial import PartialRecords


def test_usage_error_exit_2() -> None:
    result = CliRunner().invoke(cli, ["profile", "--nope"])
    assert result.exit_code == 2


def test_library_parameters_are_shown_as_the_commands_options() -> None:
    """Library errors name parameters (`top_k`); the CLI shows each as the running command's option."""
    from steer.cli.app import as_options

    transfer, profile = cli.commands["transfer"], cli.commands["profile"]
    message = "`top_k` 'x' is bad; `source` and `target` differ; set `guidance` 0; `ladder_size` is a config key"
    assert as_options(message, transfer) == (
        "--top-k 'x' is bad; --from and --to differ; set --guidance 0; ladder_size is a config key"
    )
    assert as_options("point `activation_path` at it", profile) == "point --mlp-activation-path at it"
    assert as_options("`batch_size` must be at least 1", None) == "batch_size must be at least 1"
    result = CliRunner().invoke(cli, ["transfer", "-p", "none.safetensors", "--from", "a", "--to", "b", "--mode",
                                      "deactivate", "--top-k", "2x", "hello"])  # fmt: skip
    assert result.exit_code == 1 and result.output.startswith("steer: error: --top-k '2x' is not valid"), result.output


# 14 and 17. messages name the running command's options, and only options that were given
def test_messages_name_options_that_exist(tmp_path: Path, prof: Path) -> None:
    one_line_error(run(*transfer_args(prof), "--preset", "rerank", "--style-exponent", "2", "hey"), "--style-exponent")
    sampled = run(*transfer_args(prof), "--preset", "guided", "--temperature", "0.7", "hey")
    one_line_error(sampled, "--temperature")
    assert "drop --guidance" not in sampled.output
    no_output = run(*transfer_args(prof), "--processes", "3", "hey")
    one_line_error(no_output, "add -o FILE")
    assert "--compare" not in no_output.output


# 5. a NaN (or infinite) number is refused as a usage error naming the option
@pytest.mark.parametrize("option", ["--length-weight", "--style-exponent", "--temperature", "--strength", "--alpha"])
def test_non_finite_numbers_are_refused(prof: Path, option: str) -> None:
    for bad in ("nan", "inf", "-inf"):
        one_line_error(run(*transfer_args(prof), option, bad, "hey"), "is not a finite number", code=2)


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


# issue 43, case 7: a device torch does not know, or this machine lacks, is a usage error before anything loads
@pytest.mark.parametrize("device", ["banana", "cuda:99", "tpu", "cuda"])
def test_a_device_this_machine_lacks_is_a_usage_error(prof: Path, device: str) -> None:
    import torch

    from steer.model.loading import check_device

    if device == "cuda" and torch.cuda.is_available():  # a GPU machine has it: accepted as given
        assert check_device(device) == device
        return
    for args in ([*transfer_args(prof), "hello", "--device", device], ["eval", str(prof), "--device", device]):
        result = run(*args)
        assert result.exit_code == 2 and f"Invalid value for '--device': '{device}'" in result.output, result.output
        assert "Traceback" not in result.output


def test_sigterm_is_handled_like_ctrl_c(tmp_path: Path, saved_model: Path) -> None:
    big, other = tmp_path / "big.txt", tmp_path / "other.txt"  # two styles of the same texts are refused
    big.write_text("i would be grateful if you could reply at your earliest convenience .\n" * 200000)
    other.write_text("hey dude send it asap lol\n" * 200000)
    out = tmp_path / "out" / "p.safetensors"
    out.parent.mkdir()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "steer", *profile_args(saved_model, (big, other)), "-o", str(out), "--batch-size", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.time() + 60
    while time.time() < deadline and "profiling" not in (proc.stderr.readline() if proc.stderr else ""):
        pass  # wait until counting has started
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-500:]
    assert "steer: interrupted" in err
    assert list(out.parent.iterdir()) == []  # no profile, no hidden temporary file


# the top-level guard: an OSError on a path is one line naming it
def test_an_os_error_on_a_path_is_one_line(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(self: PartialRecords) -> None:
        raise PermissionError(13, "Permission denied", str(self.path))

    monkeypatch.setattr(PartialRecords, "open", denied)
    out = tmp_path / "o.jsonl"
    refused(run(*transfer_args(prof), "hey", "-o", str(out)), f"{out}.partial: Permission denied; check the path")


def test_help_and_every_commands_options_load_without_torch() -> None:
    """`steer --help` (and each command's) builds every option from torch-free modules, so it answers
    at once; a fresh interpreter proves nothing imported torch or transformers on the way."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from steer.cli import cli\n"
        "assert CliRunner().invoke(cli, ['--help']).exit_code == 0\n"
        "for name in cli.commands:\n"
        "    result = CliRunner().invoke(cli, [name, '--help'])\n"
        "    assert result.exit_code == 0, (name, result.output)\n"
        "heavy = [m for m in ('torch', 'transformers', 'numpy', 'safetensors', 'fastapi') if m in sys.modules]\n"
        "print(len(cli.commands), heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, heavy = done.stdout.split(" ", 1)
    assert int(count) >= 15 and heavy.strip() == "[]", done.stdout
