"""Bad input and interruptions (docs/reliability.md): each defect a hostile pass found, reproduced
at the CLI where it is CLI behaviour, and fixed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from conftest import profile_args

from steer.cli import cli


def run(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), input=input)


def one_line_error(result: Any, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert message in result.output, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output


def transfer_args(prof: Path) -> list[str]:
    return ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--max-new-tokens", "3", "-q"]


# 1. inspect --plot must not replace the profile or any existing file without --force
def test_inspect_plot_never_overwrites_without_force(tmp_path: Path, prof: Path) -> None:
    before = prof.read_bytes()
    one_line_error(run("inspect", str(prof), "--plot", str(prof)), "must end in .png")
    png_named_profile = tmp_path / "p.png"
    png_named_profile.write_bytes(before)
    one_line_error(run("inspect", str(png_named_profile), "--plot", str(png_named_profile), "--force"), "the profile")
    existing = tmp_path / "mine.png"
    existing.write_bytes(b"user data")
    one_line_error(run("inspect", str(prof), "--plot", str(existing)), "--force")
    assert existing.read_bytes() == b"user data" and prof.read_bytes() == before
    assert run("inspect", str(prof), "--plot", str(existing), "--force").exit_code == 0
    assert existing.read_bytes()[:4] == b"\x89PNG"


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


# 3. an empty TEXT argument is an error, like an empty file
@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_argument_is_an_error(prof: Path, text: str) -> None:
    one_line_error(run(*transfer_args(prof), text), "TEXT argument 1 is empty")


# 4. export --force replaces only an earlier export, never '.', and survives leftovers
def test_export_force_replaces_only_exports(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = ["export", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "-q"]
    users = tmp_path / "users-dir"
    users.mkdir()
    (users / "thesis.tex").write_text("precious")
    one_line_error(run(*base, "-o", str(users), "--force"), "not a 'steer export' directory")
    assert (users / "thesis.tex").read_text() == "precious"
    monkeypatch.chdir(tmp_path)
    one_line_error(run(*base, "-o", ".", "--force"), "current directory")
    target = tmp_path / "edited"
    (tmp_path / ".edited.old").mkdir()  # a leftover of an older steer must not break --force
    assert run(*base, "-o", str(target)).exit_code == 0
    assert run(*base, "-o", str(target), "--force").exit_code == 0
    assert (target / "steer_edit.json").is_file()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".edited.") and p.name != ".edited.old"]
    assert leftovers == []


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


# issue 43, case 1: --force onto an earlier export never deletes the profile it reads from inside it,
# nor a user's file added to it
def test_export_force_deletes_nothing_it_did_not_write(tmp_path: Path, prof: Path) -> None:
    base = ["export", "--from", "formal", "--to", "informal", "--top-k", "10%", "-q"]
    exp = tmp_path / "exp"
    assert run(*base, "-p", str(prof), "-o", str(exp)).exit_code == 0
    inside = exp / "inside.safetensors"
    inside.write_bytes(prof.read_bytes())
    before = _snapshot(exp)
    one_line_error(run(*base, "-p", str(inside), "-o", str(exp), "--force"), "holds the profile")
    assert _snapshot(exp) == before
    inside.unlink()
    (exp / "notes.txt").write_text("mine")
    before = _snapshot(exp)
    one_line_error(
        run(*base, "-p", str(prof), "-o", str(exp), "--force"), "holds notes.txt, which 'steer export' did not write"
    )
    assert _snapshot(exp) == before
    (exp / "notes.txt").unlink()
    assert run(*base, "-p", str(prof), "-o", str(exp), "--force").exit_code == 0  # its own files only: replaced


# 5. an interrupted export (SIGTERM or Ctrl-C) leaves no hidden directory behind
def test_interrupted_export_leaves_no_debris(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import PreTrainedModel

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", interrupted)
    target = tmp_path / "edited"
    result = run("export", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "-o", str(target))
    assert result.exit_code == 130 and "steer: interrupted" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["formal.txt", "informal.txt", "p.safetensors", "tiny-llama"]


def test_sigterm_is_handled_like_ctrl_c(tmp_path: Path, saved_model: Path) -> None:
    big, other = tmp_path / "big.txt", tmp_path / "other.txt"  # two styles of the same texts are refused
    big.write_text("i would be grateful if you could reply at your earliest convenience .\n" * 200000)
    other.write_text("hey dude send it asap lol\n" * 200000)
    out = tmp_path / "out" / "p.safetensors"
    out.parent.mkdir()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
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


# 6. a text file named .gguf
def test_fake_gguf_is_a_one_line_error(tmp_path: Path, corpus_files: tuple[Path, Path]) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model")
    one_line_error(run(*profile_args(fake, corpus_files), "-o", str(tmp_path / "p.safetensors")), "not a GGUF file")


# 7. bad --prompt / --prompts / --edit-layers are rejected before any model loads
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt", "Rewrite {txt}"], "unknown field {txt}"),
        (["--prompt", "Rewrite {text} {"], "not a valid template"),
        (["--prompt", "Rewrite this"], "must contain '{text}'"),
        (["--edit-layers", "1-x"], "--edit-layers"),
        (["--prompts", "{bad}"], "unknown field {who}"),
    ],
)
def test_bad_templates_fail_before_the_model_loads(
    tmp_path: Path, prof: Path, extra: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steer.model.loading

    bad = tmp_path / "prompts.toml"
    bad.write_text('default = "Rewrite {who}: {text}"\n')

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(steer.model.loading, "load_model", no_loading)
    one_line_error(run(*transfer_args(prof), *[a.replace("{bad}", str(bad)) for a in extra], "hello"), message)


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


# 12. -q hides progress, not warnings
def test_quiet_keeps_warnings(prof: Path) -> None:
    long_text = " ".join(["hey"] * 40)
    result = run(*transfer_args(prof), "--max-input-tokens", "5", long_text)
    assert result.exit_code == 0, result.output
    assert "truncated" in result.stderr


# 13. a mistyped local path or an offline Hub id fails at once, in one line
def test_missing_local_model_fails_fast(
    tmp_path: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    start = time.time()
    out = str(tmp_path / "p.safetensors")
    one_line_error(run(*profile_args(Path("models/typo"), corpus_files), "-o", out), "does not exist")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    one_line_error(run(*profile_args(Path("someone/not-cached-model"), corpus_files), "-o", out), "HF_HUB_OFFLINE")
    assert time.time() - start < 20


# 14. inspect on a directory; a corpus without an extension is plain text
def test_inspect_directory_and_extensionless_corpus(tmp_path: Path, saved_model: Path) -> None:
    one_line_error(run("inspect", str(tmp_path)), "is a directory")
    a, b = tmp_path / "formal", tmp_path / "informal"
    a.write_text("i would be grateful .\nplease reply .\n")
    b.write_text("hey dude\nok lol\n")
    result = run(*profile_args(saved_model, (a, b)), "-o", str(tmp_path / "p.safetensors"), "-q")
    assert result.exit_code == 0, result.output


# 15. exports are readable by others, as the umask allows
def test_export_directory_follows_the_umask(tmp_path: Path, prof: Path) -> None:
    target = tmp_path / "edited"
    old = os.umask(0o022)
    try:
        result = run(
            "export", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "-o", str(target)
        )
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert target.stat().st_mode & 0o777 == 0o755


# 16. hand-made profiles with impossible counts are refused
@pytest.mark.parametrize("change", ["negative", "too_many"])
def test_profiles_with_impossible_counts_are_refused(tmp_path: Path, prof: Path, change: str) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(prof), framework="pt") as fh:
        meta = fh.metadata()
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    key = "fired.formal"
    original = tensors[key]
    tensors[key] = original.clone()
    tensors[key][0, 0] = -1 if change == "negative" else 10**9
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    one_line_error(run("inspect", str(bad)), "impossible")
    assert torch.equal(tensors[key][0, 1:], original[0, 1:]) and not torch.equal(tensors[key], original)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--min-new-tokens", "-1"], "--min-new-tokens must be ≥ 0 (0 is off), got -1"),
        (["--min-new-tokens", "50", "--max-new-tokens", "4"], "--min-new-tokens 50 is more than --max-new-tokens 4"),
    ],
)
def test_min_new_tokens_is_checked_before_the_model_loads(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch, options: list[str], message: str
) -> None:
    """Issue 43, cases 6 and 18: one line, exit 1, no model loaded, no file written."""
    from steer.model import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    out = tmp_path / "o.jsonl"
    one_line_error(run(*transfer_args(prof), *options, "-o", str(out), "hello"), message)
    assert not out.exists()


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
