"""The CLI end to end on a tiny saved model: profile, inspect, plot, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import profile_args

from steer.cli import cli
from steer.profiling.profile import StyleProfile


def run(*args: str, input: str | None = None) -> object:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


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


def _profile_file(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> Path:
    out = tmp_path / "p.safetensors"
    assert run(*profile_args(saved_model, corpus_files), "-o", str(out), "-q").exit_code == 0
    return out


def _steering(prof: Path) -> list[str]:
    """Profile, direction and a selection large enough to edit the tiny model."""
    return ["-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "--method", "diff"]


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


def test_export_cli(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    prof = _profile_file(tmp_path, saved_model, corpus_files)
    target = tmp_path / "edited"
    args = ["export", *_steering(prof), "-o", str(target)]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file()
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 1 and "--force" in again.output
    assert CliRunner().invoke(cli, [*args, "--mode", "prompt", "--force"]).exit_code == 1


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
