"""Trained neuron edits stored beside the profile: per direction, a learned `x → x * scale + shift`
on the profile's selected neurons (written by `steer train`, applied as a `NeuronEdit` by the
`trained` mode, `steer.apply` and `steer export`).

Artefact: `x.trained.safetensors` beside `x.safetensors` — per direction a bool mask and float32
scale and shift tensors of the model's [layers, neurons], and JSON metadata (the profile's sha256,
the model's fingerprint, and per direction what it was trained on, how, and its loss curve).
Nothing is ever unpickled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from steer.errors import SteerError
from steer.model.hooks import NeuronEdit
from steer.profiling.beside import beside_path, load_beside, pair_key, save_beside

FORMAT = "steer.trained"
FORMAT_VERSION = 1


def trained_path(profile_path: str | Path) -> Path:
    """Where a profile's trained edits live: `x.safetensors` → `x.trained.safetensors`."""
    return beside_path(profile_path, "trained")


@dataclass(frozen=True)
class TrainedEdits:
    """Per direction the learned `NeuronEdit`, with the model's fingerprint, the profile's sha256
    and per direction its training record (`meta["directions"][key]`)."""

    fingerprint: str
    profile_sha256: str | None
    edits: dict[str, NeuronEdit] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def edit(self, source: str, target: str, *, path: Path | str = "PROFILE") -> NeuronEdit:
        """The direction's edit; a one-line error naming the command that trains it."""
        key = pair_key(source, target)
        if key not in self.edits:
            trained = ", ".join(k.replace("->", "→") for k in self.edits) or "none"
            raise SteerError(
                f"no trained edit for {source} → {target} (trained: {trained}); "
                f"run: steer train {path} --from {source} --to {target} --pairs FILE.tsv"
            )
        return self.edits[key]

    def info(self, source: str, target: str) -> dict[str, Any]:
        """What the direction's edit was trained on and how."""
        return dict(self.meta.get("directions", {}).get(pair_key(source, target), {}))

    def with_edit(self, source: str, target: str, edit: NeuronEdit, info: dict[str, Any]) -> TrainedEdits:
        key = pair_key(source, target)
        meta = {**self.meta, "directions": {**self.meta.get("directions", {}), key: info}}
        return TrainedEdits(self.fingerprint, self.profile_sha256, {**self.edits, key: edit}, meta)

    def save(self, path: str | Path) -> Path:
        """Write atomically (the caller decides whether an existing file may be replaced)."""
        tensors: dict[str, Tensor] = {}
        for key, edit in self.edits.items():
            tensors[f"mask:{key}"] = edit.mask.bool()
            tensors[f"scale:{key}"] = edit.scale.detach().float()
            tensors[f"shift:{key}"] = edit.shift.detach().float()
        return save_beside(path, tensors, (FORMAT, FORMAT_VERSION), self.fingerprint, self.profile_sha256, self.meta)

    @classmethod
    def load(cls, path: str | Path, shape: tuple[int, int] | None = None) -> TrainedEdits:
        """Read and validate (tensors of `shape` when given); never unpickles anything."""
        path = Path(path)
        fix = "move it away and train again with: steer train PROFILE --from A --to B --pairs FILE.tsv"
        meta, tensors = load_beside(path, (FORMAT, FORMAT_VERSION), "steer trained-edit file", fix)
        edits = {}
        for name, mask in tensors.items():
            if name.startswith("mask:"):
                key = name.removeprefix("mask:")
                scale, shift = tensors.get(f"scale:{key}"), tensors.get(f"shift:{key}")
                want = tuple(shape or mask.shape)
                parts = (mask, scale, shift)
                if any(t is None or t.dim() != 2 or tuple(t.shape) != want for t in parts) or mask.dtype != torch.bool:
                    raise SteerError(f"{path}: tensors do not match the model's [layers, neurons]; {fix}")
                assert scale is not None and shift is not None
                if not (torch.isfinite(scale).all() and torch.isfinite(shift).all()):
                    raise SteerError(f"{path}: the edit for {key.replace('->', ' → ')} is not finite; {fix}")
                edits[key] = NeuronEdit(mask, scale.float(), shift.float())
        own = {k: v for k, v in meta.items() if k == "directions"}
        return cls(str(meta["fingerprint"]), meta.get("profile_sha256"), edits, own)
