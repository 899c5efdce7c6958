"""`steer train` end to end on the tiny model: the file it writes beside the profile, `--mode trained`
and `steer.apply` using it, `steer export` baking a learned scale, what it refuses before the model
loads, and an interrupted training resuming to the same edit as an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FORMAL, INFORMAL, files_in, make_model, refused, run, transfer_args


def _pairs(folder: Path, header: str = "formal\tinformal1\tinformal2") -> Path:
    path = folder / "pairs.tsv"
    rows = [f"{f}\t\t{i}" for f, i in zip(FORMAL, INFORMAL, strict=False)]  # the first target column empty
    path.write_text(header + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _train(prof: Path, *extra: str) -> Any:
    pairs = _pairs(prof.parent)
    return run(
        "train", str(prof), "--from", "formal", "--to", "informal", "--pairs", str(pairs), "--lr", "0.05", "-q", *extra
    )


def test_train_writes_the_edit_and_transfer_applies_it(prof: Path) -> None:
    from steer.profiling.trained import TrainedEdits, trained_path

    result = _train(prof, "--layers", "1")
    assert result.exit_code == 0, result.output
    assert "formal → informal:" in result.output and "held-out loss" in result.output
    found = TrainedEdits.load(trained_path(prof))
    edit, info = found.edit("formal", "informal"), found.info("formal", "informal")
    assert edit.layers == [1] and info["pairs_used"] + info["pairs_held"] == len(FORMAL)
    assert len(info["held_loss"]) == 3 and info["params"] == "scale+shift" and info["best_epoch"] >= 0
    assert not (
        prof.parent / "p.trained.formal-informal.partial.safetensors"
    ).exists()  # the checkpoint is gone once done
    out = prof.parent / "trained.jsonl"
    result = run(*transfer_args(prof), "--preset", "trained", "-o", str(out), "I would be grateful for your reply.")
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text().splitlines()[0])["settings"]["mode"] == "trained"
    before = files_in(prof.parent)
    refused(_train(prof), "already holds formal → informal; pass --force")
    assert files_in(prof.parent) == before


def test_steer_apply_and_export_use_the_trained_edit(prof: Path, saved_model: Path, tmp_path: Path) -> None:
    import steer
    from steer.model.hooks import edit_neurons
    from steer.model.loading import load_model

    assert _train(prof, "--params", "scale").exit_code == 0
    model = make_model("llama")
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad(), steer.apply(model, prof, "formal", "informal", mode="trained") as edit:
        hooked = model(ids).logits
    assert len(edit) > 0
    out = tmp_path / "baked"
    result = run(
        "export", "-p", str(prof), "--from", "formal", "--to", "informal", "--mode", "trained", "-o", str(out), "-q"
    )
    assert result.exit_code == 0, result.output
    baked = load_model(str(out), dtype="float32")
    with torch.no_grad():
        assert torch.allclose(baked.model(ids).logits, hooked, atol=1e-5)
        with edit_neurons(baked.activation_sites(), edit, "all"):  # the hooks on the baked model would edit twice
            assert not torch.allclose(baked.model(ids).logits, hooked, atol=1e-5)


def test_train_refuses_mistakes_before_the_model(prof: Path, no_model: None) -> None:
    pairs = _pairs(prof.parent)
    base = ["train", str(prof), "--from", "formal", "--to", "informal", "--pairs", str(pairs), "-q"]
    refused(run(*base[:-3], "--pairs", str(prof.parent / "none.tsv"), "-q"), "no such file")
    refused(run(*base[:-3], "--pairs", str(_pairs(prof.parent, "a\tb")), "-q"), "needs one named 'formal'")
    refused(run(*base, "--epochs", "0"), "--epochs must be at least 1")
    refused(run(*base, "--lr", "0"), "--lr must be positive")
    refused(run(*base, "--layers", "9"), "--layers")
    refused(run(*base, "--top-k", "lots"), "lots")
    refused(run(*base, "--dtype", "float32", "--to", "casual"), "casual")
    refused(run(*transfer_args(prof), "--mode", "trained", "x"), f"run: steer train {prof} --from SOURCE")


def test_an_interrupted_training_resumes_to_the_same_edit(prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import steer.generation.training as training
    from steer.profiling.trained import TrainedEdits, trained_path

    assert _train(prof, "--epochs", "3").exit_code == 0
    whole = TrainedEdits.load(trained_path(prof))
    trained_path(prof).unlink()
    real = training.held_loss
    calls = {"n": 0}

    def crash_in_epoch_three(*args: Any) -> float:
        calls["n"] += 1
        if calls["n"] == 4:  # before training, after epochs 1 and 2, then the third: the checkpoint holds two
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(training, "held_loss", crash_in_epoch_three)
    assert _train(prof, "--epochs", "3").exit_code != 0
    assert (prof.parent / "p.trained.formal-informal.partial.safetensors").is_file()
    monkeypatch.setattr(training, "held_loss", real)
    assert _train(prof, "--epochs", "3").exit_code == 0
    resumed = TrainedEdits.load(trained_path(prof))
    a, b = whole.edit("formal", "informal"), resumed.edit("formal", "informal")
    assert torch.equal(a.scale, b.scale) and torch.equal(a.shift, b.shift)
    assert whole.info("formal", "informal")["held_loss"] == resumed.info("formal", "informal")["held_loss"]
