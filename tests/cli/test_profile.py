"""`steer profile` end to end on a tiny saved model: the profile it writes, stdin, --force, and one-line errors."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import files_in, profile_args, refused, run
from conftest import one_line_error_exit_1 as one_line_error

from steer.cli import cli
from steer.profiling.profile import StyleProfile


def test_profile_inspect_plot(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    informal = corpus_files[1]
    out = tmp_path / "p.safetensors"
    result = run(*profile_args(saved_model, corpus_files), "-o", str(out), "--batch-size", "3", "-q")
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "tokens/s" in result.output
    prof = StyleProfile.load(out)
    assert prof.styles == ["formal", "informal"]
    assert prof.counts["formal"].num_texts == 5 and prof.counts["informal"].num_texts == 6
    assert prof.counts["informal"].num_tokens == sum(len(line.split()) for line in informal.read_text().split("\n"))
    assert prof.settings["batch_size"] == 3 and len(prof.corpora["formal"]["sha256"]) == 64
    plot = tmp_path / "layers.png"
    result = run("inspect", str(out), "--top-k", "10%", "--plot", str(plot))
    assert result.exit_code == 0, result.output
    assert "formal-only" in result.output and "informal-only" in result.output and "shared" in result.output
    total_line = [ln for ln in result.output.splitlines() if ln.startswith("total")][0]
    sel = prof.neurons("formal", "informal", top_k="10%")
    assert total_line.split()[1:] == [str(len(sel.source)), str(len(sel.target)), str(len(sel.shared))]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_from_stdin_matches_file(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    formal, informal = corpus_files
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert run(*profile_args(saved_model, corpus_files), "-o", str(a), "-q").exit_code == 0
    from_stdin = profile_args(saved_model, (formal, Path("-")))
    assert run(*from_stdin, "-o", str(b), "-q", input=informal.read_text()).exit_code == 0
    pa, pb = StyleProfile.load(a), StyleProfile.load(b)
    assert torch.equal(pa.counts["informal"].fired, pb.counts["informal"].fired)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--style", "formal={formal}"], "at least two styles"),
        (["--style", "formal={formal}", "--style", "formal={informal}"], "'formal' is given twice"),
        (["--style", "formal={formal}", "--style", "informal={missing}"], "does not exist"),
        (["--style", "formal={formal}", "--style", "informal={informal}", "--batch-size", "0"], "--batch-size"),
        (
            ["--style", "formal={formal}", "--style", "informal={informal}", "--model", "{missing}.gguf"],
            "does not exist",
        ),
    ],
)
def test_profile_errors_are_one_line_exit_1(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], extra: list[str], message: str
) -> None:
    formal, informal = corpus_files
    fill = {"formal": formal, "informal": informal, "missing": tmp_path / "missing.txt"}
    args = [a.format(**fill) for a in extra]
    if "--model" not in args:
        args += ["--model", str(saved_model)]
    result = CliRunner().invoke(cli, ["profile", "-o", str(tmp_path / "o.safetensors"), "-q", *args])
    assert result.exit_code == 1
    assert message in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "o.safetensors").exists()


def test_existing_output_needs_force(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    formal, informal = corpus_files
    out = tmp_path / "p.safetensors"
    out.write_bytes(b"precious")
    args = [
        "profile",
        "--model",
        str(saved_model),
        "--style",
        f"formal={formal}",
        "--style",
        f"informal={informal}",
        "-o",
        str(out),
        "-q",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "--force" in result.output
    assert out.read_bytes() == b"precious"
    assert CliRunner().invoke(cli, [*args, "--force"]).exit_code == 0
    assert StyleProfile.load(out).styles == ["formal", "informal"]


def test_unknown_architecture_via_cli(tmp_path: Path, corpus_files: tuple[Path, Path]) -> None:
    from conftest import make_tokenizer
    from transformers import MambaConfig, MambaForCausalLM

    path = tmp_path / "mamba"
    MambaForCausalLM(MambaConfig(vocab_size=99, hidden_size=16, num_hidden_layers=2, state_size=4)).save_pretrained(
        path
    )
    make_tokenizer().save_pretrained(path)
    result = CliRunner().invoke(cli, [*profile_args(path, corpus_files), "-o", str(tmp_path / "o.safetensors"), "-q"])
    assert result.exit_code == 1
    assert "found no MLP activation module in this 'mamba' model" in result.output
    assert "--mlp-activation-path" in result.output and "Traceback" not in result.output


# 6. a text file named .gguf
def test_fake_gguf_is_a_one_line_error(tmp_path: Path, corpus_files: tuple[Path, Path]) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model")
    one_line_error(run(*profile_args(fake, corpus_files), "-o", str(tmp_path / "p.safetensors")), "not a GGUF file")


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
