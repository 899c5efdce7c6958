"""`steer inspect`: the layer table, its plot (never over a file without --force) and one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import one_line_error_exit_1 as one_line_error
from conftest import profile_args, run

from steer.cli import cli


def test_inspect_errors(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path / "nope.safetensors")])
    assert result.exit_code == 1 and "does not exist" in result.output
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"garbage")
    result = CliRunner().invoke(cli, ["inspect", str(bad)])
    assert result.exit_code == 1 and "not a readable" in result.output


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


# 14. inspect on a directory; a corpus without an extension is plain text
def test_inspect_directory_and_extensionless_corpus(tmp_path: Path, saved_model: Path) -> None:
    one_line_error(run("inspect", str(tmp_path)), "is a directory")
    a, b = tmp_path / "formal", tmp_path / "informal"
    a.write_text("i would be grateful .\nplease reply .\n")
    b.write_text("hey dude\nok lol\n")
    result = run(*profile_args(saved_model, (a, b)), "-o", str(tmp_path / "p.safetensors"), "-q")
    assert result.exit_code == 0, result.output


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


# 12. inspect shows the recorded corpora, and with them missing suggests --train-style, not a bare `steer probe`
def test_inspect_shows_recorded_corpora(prof: Path, corpus_files: tuple[Path, Path]) -> None:
    shown = run("inspect", str(prof))
    assert shown.exit_code == 0 and str(corpus_files[0]) in shown.output and "not found" not in shown.output
    # the layer table is headed by the styles, not by a corpus path
    assert re.search(r"^layer +formal-only +informal-only +shared$", shown.output, re.M), shown.output
    for path in corpus_files:
        path.unlink()
    missing = run("inspect", str(prof))
    assert missing.exit_code == 0 and "(not found from here)" in missing.output
    assert "--train-style formal=FILE --train-style informal=FILE" in missing.output


def test_inspect_and_models_speak_json(prof: Path) -> None:
    """`--json` holds what the text shows: the model, every style, the selection per layer."""
    import json

    text = run("inspect", str(prof), "--top-k", "10%")
    got = run("inspect", str(prof), "--top-k", "10%", "--json")
    assert text.exit_code == 0 and got.exit_code == 0, got.output
    info = json.loads(got.output)
    assert info["model"]["layers"] == 3 and [s["style"] for s in info["styles"]] == ["formal", "informal"]
    per_layer = info["selection"]["per_layer"]
    assert set(per_layer) == {"formal_only", "informal_only", "shared"}
    assert all(len(col) == 3 for col in per_layer.values())
    total = re.search(r"total\s+(\d+)\s+(\d+)\s+(\d+)", text.output)
    assert total is not None and [int(x) for x in total.groups()] == [sum(c) for c in per_layer.values()]
    listed = run("models", "--json")
    assert listed.exit_code == 0
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert {"smollm2-135m", "qwen2.5-coder-1.5b"} <= {r["alias"] for r in rows} and all("installed" in r for r in rows)
