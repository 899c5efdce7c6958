"""The CLI end to end on a tiny saved model: profile, inspect, plot, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from steer.cli import cli
from steer.neurons import StyleProfile


def run(*args: str, input: str | None = None) -> object:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def test_profile_inspect_plot(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    formal, informal = corpus_files
    out = tmp_path / "p.safetensors"
    result = run(
        "profile",
        "--model",
        str(saved_model),
        "--style",
        f"formal={formal}",
        "--style",
        f"informal={informal}",
        "-o",
        str(out),
        "--batch-size",
        "3",
        "-q",
    )
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
    assert (
        run(
            "profile",
            "--model",
            str(saved_model),
            "--style",
            f"formal={formal}",
            "--style",
            f"informal={informal}",
            "-o",
            str(a),
            "-q",
        ).exit_code
        == 0
    )
    assert (
        run(
            "profile",
            "--model",
            str(saved_model),
            "--style",
            f"formal={formal}",
            "--style",
            "informal=-",
            "-o",
            str(b),
            "-q",
            input=informal.read_text(),
        ).exit_code
        == 0
    )
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
    formal, informal = corpus_files
    result = CliRunner().invoke(
        cli,
        [
            "profile",
            "--model",
            str(path),
            "--style",
            f"a={formal}",
            "--style",
            f"b={informal}",
            "-o",
            str(tmp_path / "o.safetensors"),
            "-q",
        ],
    )
    assert result.exit_code == 1
    assert "unknown architecture 'mamba'" in result.output and "--mlp-activation-path" in result.output


def test_inspect_errors(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "nope.safetensors")])
    assert result.exit_code == 1 and "does not exist" in result.output
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"garbage")
    result = CliRunner().invoke(cli, ["inspect", str(bad)])
    assert result.exit_code == 1 and "not a readable" in result.output


def test_usage_error_exit_2() -> None:
    result = CliRunner().invoke(cli, ["profile", "--nope"])
    assert result.exit_code == 2
