"""`steer export`: baked weights behave exactly like the hooked model, with stock transformers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FORMAL, make_lm, toy_profile
from transformers import AutoModelForCausalLM

from steer.errors import SteerError
from steer.generation.export import export_model
from steer.generation.steerer import Steerer, TransferSettings
from steer.model.hooks import NeuronEdit, edit_neurons
from steer.model.loading import wrap_model

IDS = torch.tensor([[5, 9, 13, 7, 22, 30]])


@pytest.mark.parametrize("kind", ["llama", "phi3", "gpt2"])
def test_exported_model_equals_hooked_model(tmp_path: Path, kind: str) -> None:
    lm = make_lm(kind)
    prof = toy_profile(lm)
    settings = TransferSettings.bare(
        mode="deactivate+amplify", top_k="10%", method="diff", amplify_factor=1.5, max_new_tokens=8
    )
    steerer = Steerer(lm, prof)
    edit = steerer.build_edit("formal", "informal", settings)
    assert len(edit) > 0
    out = export_model(lm, edit, tmp_path / "edited", description={"mode": settings.mode})
    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        with edit_neurons(lm.activation_sites(), edit):
            hooked = lm.model(input_ids=IDS).logits
        baked = exported(input_ids=IDS).logits
    torch.testing.assert_close(baked, hooked, rtol=1e-5, atol=1e-5)
    # Greedy generation: the hooked steerer and the exported model (prompt only) say the same.
    steered = steerer.transfer(FORMAL, "formal", "informal", settings)
    plain = Steerer(wrap_model(exported, lm.tokenizer, str(out)), None).transfer(
        FORMAL, "formal", "informal", TransferSettings.bare(mode="prompt", max_new_tokens=8)
    )
    assert [r.raw_output for r in steered] == [r.raw_output for r in plain]
    record = json.loads((out / "steer_edit.json").read_text())
    assert record["edited_neurons"] == len(edit) and "steer" in (out / "README.md").read_text()
    # The original model is untouched by the export.
    with torch.no_grad():
        assert not torch.equal(lm.model(input_ids=IDS).logits, baked)


def test_export_refuses_existing_and_shifts(tmp_path: Path) -> None:
    lm = make_lm("llama")
    edit = NeuronEdit.empty(lm.num_layers, lm.num_neurons)
    target = tmp_path / "exists"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    with pytest.raises(SteerError, match="`force`"):
        export_model(lm, edit, target, description={})
    with pytest.raises(SteerError, match="not a 'steer export' directory"):  # --force replaces only exports
        export_model(lm, edit, target, description={}, force=True)
    assert (target / "keep.txt").read_text() == "keep"
    earlier = tmp_path / "earlier"
    export_model(lm, edit, earlier, description={})
    first = (earlier / "steer_edit.json").read_text()
    (earlier / "stale.txt").write_text("from before")
    with pytest.raises(SteerError, match="did not write"):  # a user's file inside an export is never deleted
        export_model(lm, edit, earlier, description={}, force=True)
    assert (earlier / "stale.txt").read_text() == "from before" and (earlier / "steer_edit.json").read_text() == first
    (earlier / "stale.txt").unlink()
    victim = tmp_path / "victim"
    victim.mkdir()
    for added in (lambda: (earlier / "linkdir").symlink_to(victim), lambda: (earlier / "emptysub").mkdir()):
        added()  # a user's link to a folder, or an empty folder, inside an export is never deleted either
        with pytest.raises(SteerError, match="which 'steer export' did not write"):
            export_model(lm, edit, earlier, description={}, force=True)
    assert (earlier / "linkdir").is_symlink() and (earlier / "emptysub").is_dir() and victim.is_dir()
    (earlier / "linkdir").unlink()
    (earlier / "emptysub").rmdir()
    export_model(lm, edit, earlier, description={}, force=True)  # an export holding only its own files is replaced
    assert (earlier / "config.json").is_file()
    assert "config.json" in json.loads((earlier / "steer_edit.json").read_text())["files"]
    shifted = NeuronEdit(edit.mask | True, edit.scale, edit.shift + 1.0)
    with pytest.raises(SteerError, match="cannot be baked"):
        export_model(lm, shifted, tmp_path / "other", description={})
    assert not (tmp_path / "other").exists()
    leftovers: list[Any] = [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []
