"""Bake a neuron edit into the weights and write a plain Hugging Face model directory.

Scaling neuron j of the gated activation by s is exactly scaling input column j of the down
projection by s (zeroing is s = 0), because the down projection is linear in its input and its
bias does not depend on it. The result loads in stock `transformers` (and so vLLM/TGI) with no
`steer` code. Shifts cannot be baked this way and are refused.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from steer.errors import SteerError
from steer.files import check_not_an_input
from steer.model.hooks import NeuronEdit
from steer.model.loading import LoadedModel
from steer.profiling.hub import export_card
from steer.version import __version__


def apply_edit_to_weights(lm: LoadedModel, edit: NeuronEdit) -> Any:
    """A copy of `lm.model` whose down projections carry the edit; the original is untouched."""
    if bool((edit.shift[edit.mask] != 0).any()):
        raise SteerError(
            "this edit adds constants to neurons, which cannot be baked into weights; bake a scaling edit "
            "(deactivate, amplify, or one trained with: steer train --params scale)"
        )
    if lm.weights is not None:
        raise SteerError(f"an export edits float weights; load the model without --dtype {lm.weights}")
    if lm.arch.down_proj is None:
        raise SteerError(f"steer does not know the down projection of {lm.model_type!r} models, so cannot export")
    model = copy.deepcopy(lm.model)
    projections = [model.get_submodule(lm.arch.down_proj.format(layer=i)) for i in range(lm.num_layers)]
    with torch.no_grad():
        for layer in edit.layers:
            weight = projections[layer].weight
            scale = torch.where(edit.mask[layer], edit.scale[layer], torch.ones_like(edit.scale[layer]))
            scale = scale.to(weight.device, weight.dtype)
            # nn.Linear stores [out, in]; GPT-2's Conv1D stores [in, out].
            factor = scale.unsqueeze(1) if lm.arch.down_proj_transposed else scale.unsqueeze(0)
            weight.copy_(weight * factor)
    return model


def export_model(
    lm: LoadedModel, edit: NeuronEdit, output: str | Path, *, description: dict[str, Any], force: bool = False
) -> Path:
    """Write the edited model, tokenizer and a README naming the edit; atomic, `--force` to replace."""
    output = Path(output)
    check_export_target(output, force=force)
    model = apply_edit_to_weights(lm, edit)
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}."))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a serving account must be able to read the export
    try:
        model.save_pretrained(tmp)
        lm.tokenizer.save_pretrained(tmp)
        record = {
            **description,
            "edited_neurons": len(edit),
            "per_layer": edit.mask.sum(1).tolist(),
            "steer_version": __version__,
        }
        (tmp / "README.md").write_text(export_card(record), encoding="utf-8")
        # every file the export writes, so that a later --force replaces nothing a user added
        record["files"] = sorted([*(str(f.relative_to(tmp)) for f in tmp.rglob("*") if f.is_file()), "steer_edit.json"])
        (tmp / "steer_edit.json").write_text(json.dumps(record, indent=2))
        for written in tmp.rglob("*"):  # safetensors writes model.safetensors 0600: every file as open() makes it
            os.chmod(written, (0o777 if written.is_dir() else 0o666) & ~umask)
        if output.exists():  # an earlier export (checked above): swap, then remove the old one
            backup = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}.old."))
            os.replace(output, backup / "old")
            os.replace(tmp, output)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return output


def check_export_target(output: Path, *, force: bool, inputs: dict[str, str | Path | None] | None = None) -> None:
    """Refuse to replace anything but an earlier `steer export`, and never the working directory.

    Without `force` an existing path is an error; with it, only a directory holding
    `steer_edit.json` (written by every export) is replaced, so `--force` cannot delete a user's
    other files.
    """
    resolved = output.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents or resolved == resolved.parent:
        raise SteerError(f"-o {output} is the current directory or above it; name a new directory for the export")
    check_not_an_input(output, inputs or {})
    if not output.exists():
        return
    if not force:
        raise SteerError(f"{output} exists; pass `force` to replace it")
    if not output.is_dir() or not (output / "steer_edit.json").is_file():
        raise SteerError(
            f"{output} exists and is not a 'steer export' directory (no steer_edit.json); `force` replaces only "
            "earlier exports, so pick another -o"
        )
    try:
        written = set(json.loads((output / "steer_edit.json").read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise SteerError(
            f"{output} is an export that does not list the files it wrote (an older steer, or a damaged "
            "steer_edit.json); `force` cannot tell them from yours: remove it yourself or pick another -o"
        ) from None
    folders = {str(parent) for name in written for parent in Path(name).parents if str(parent) != "."}
    foreign = sorted(  # a user's link (to a folder too) or folder, empty or not, is not the export's either
        str(f.relative_to(output))
        for f in output.rglob("*")
        if str(f.relative_to(output)) not in (folders if f.is_dir() and not f.is_symlink() else written)
    )
    if foreign:
        raise SteerError(
            f"{output} holds {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, which "
            "'steer export' did not write; `force` replaces only an export's own files: move them or pick another -o"
        )
