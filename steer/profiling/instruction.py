"""What a rewrite instruction does to the model's neurons, measured and stored beside the profile:
per direction, the mean gated activation where the reply is written under the direction's
instruction minus under a neutral one (the instruction push's vector), and the model's refusal
direction in the same neurons (mean on requests it refuses minus on matched ones it answers).

The push is measured on the same tokens with and without the instruction (instruction vectors,
Stolfo et al. 2025): each training text is given under both prompts and followed by its own
first tokens as the reply, so the positions that predict the reply — the prompt's last and the
reply's — are compared token for token. The refusal direction follows Arditi et al. (2024) at the
last prompt position, in neuron space. Artefact: `x.instruct.safetensors` beside `x.safetensors`
(tensors + JSON metadata with the profile's sha256); nothing is ever unpickled.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from steer.errors import SteerError
from steer.model.hooks import sum_selected
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows
from steer.profiling.beside import beside_path, load_beside, pair_key, save_beside

FORMAT = "steer.instruct"
FORMAT_VERSION = 1
REPLY_TOKENS = 16  # reply positions compared per text, after the prompt's last one


def instruction_path(profile_path: str | Path) -> Path:
    """Where a profile's instruction measurements live: `x.safetensors` → `x.instruct.safetensors`."""
    return beside_path(profile_path, "instruct")


@dataclass(frozen=True)
class InstructionShifts:
    """Per direction `(shift, neutral)` ([layers, neurons]: the instruction's mean shift, and the mean
    under the neutral instruction), the optional `refusal` direction, and what they were measured on."""

    fingerprint: str
    profile_sha256: str | None
    shifts: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)
    refusal: Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def shift(self, source: str, target: str, *, path: Path | str = "the profile") -> tuple[Tensor, Tensor]:
        """The direction's (shift, neutral mean); a one-line error naming the command that measures it."""
        key = pair_key(source, target)
        if key not in self.shifts:
            measured = ", ".join(k.replace("->", "→") for k in self.shifts) or "none"
            raise SteerError(
                f"no instruction push measured for {source} → {target} (measured: {measured}); "
                f"run: steer instruct {path} --from {source} --to {target}"
            )
        return self.shifts[key]

    def with_shift(
        self, source: str, target: str, shift: Tensor, neutral: Tensor, info: dict[str, Any]
    ) -> InstructionShifts:
        meta = {**self.meta, "directions": {**self.meta.get("directions", {}), pair_key(source, target): info}}
        shifts = {**self.shifts, pair_key(source, target): (shift, neutral)}
        return InstructionShifts(self.fingerprint, self.profile_sha256, shifts, self.refusal, meta)

    def with_refusal(self, refusal: Tensor, info: dict[str, Any]) -> InstructionShifts:
        meta = {**self.meta, "refusal": info}
        return InstructionShifts(self.fingerprint, self.profile_sha256, self.shifts, refusal, meta)

    def save(self, path: str | Path) -> Path:
        """Write atomically (the caller decides whether an existing file may be replaced)."""
        tensors = {}
        for key, (shift, neutral) in self.shifts.items():
            tensors[f"shift:{key}"] = shift.float()
            tensors[f"neutral:{key}"] = neutral.float()
        if self.refusal is not None:
            tensors["refusal"] = self.refusal.float()
        return save_beside(path, tensors, (FORMAT, FORMAT_VERSION), self.fingerprint, self.profile_sha256, self.meta)

    @classmethod
    def load(cls, path: str | Path, shape: tuple[int, int] | None = None) -> InstructionShifts:
        """Read and validate (tensors of `shape` when given); never unpickles anything."""
        path = Path(path)
        fix = "measure it again with: steer instruct PROFILE --from A --to B --force"
        meta, tensors = load_beside(path, (FORMAT, FORMAT_VERSION), "steer instruction file", fix)
        shifts = {}
        for name, tensor in tensors.items():
            if name.startswith("shift:"):
                key = name.removeprefix("shift:")
                if f"neutral:{key}" not in tensors:
                    raise SteerError(f"{path}: the shift of {key} has no neutral mean beside it; {fix}")
                shifts[key] = (tensor, tensors[f"neutral:{key}"])
        every = [t for pair in shifts.values() for t in pair] + [t for n, t in tensors.items() if n == "refusal"]
        want = shape or (every[0].shape if every else None)
        if any(t.dim() != 2 or tuple(t.shape) != tuple(want) for t in every):  # type: ignore[arg-type]
            raise SteerError(f"{path}: tensors do not match the model's [layers, neurons]; {fix}")
        own = {k: v for k, v in meta.items() if k in ("directions", "refusal")}
        return cls(str(meta["fingerprint"]), meta.get("profile_sha256"), shifts, tensors.get("refusal"), own)


def mean_at_positions(
    lm: LoadedModel, sequences: Sequence[list[int]], starts: Sequence[int], *, batch_size: int = 8, desc: str = ""
) -> Tensor:
    """The mean gated activation [layers, neurons] over, per sequence, the positions from `starts[i]`
    to its end (one unedited forward pass per batch, right-padded; padding is never counted)."""
    from tqdm.auto import tqdm

    if not sequences:
        raise SteerError("no texts to measure the instruction on")
    sites = lm.activation_sites()
    total = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.float64)
    count = 0
    bar = tqdm(total=len(sequences), unit="text", desc=desc, disable=not desc, file=sys.stderr)
    with torch.inference_mode(), bar:
        for lo in range(0, len(sequences), batch_size):
            rows = list(sequences[lo : lo + batch_size])
            ids, mask = pad_rows(rows, lm.tokenizer.pad_token_id, "right")
            selected = torch.zeros_like(mask, dtype=torch.bool)
            for r, (row, start) in enumerate(zip(rows, starts[lo : lo + batch_size], strict=True)):
                selected[r, start : len(row)] = True
            with sum_selected(sites, selected) as sums:
                lm.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device), use_cache=False)
            total += torch.stack([s for s in sums if s is not None])
            count += int(selected.sum())
            bar.update(len(rows))
    return (total / count).float()


def measure_shift(
    lm: LoadedModel,
    instructed: Sequence[list[int]],
    neutral: Sequence[list[int]],
    replies: Sequence[list[int]],
    *,
    batch_size: int = 8,
    progress: bool = False,
) -> tuple[Tensor, Tensor]:
    """(mean shift, mean under the neutral prompt): each text's prompt under the instruction and under
    the neutral instruction, each followed by the same reply tokens; compared at the prompt's last
    position and the reply's positions."""
    if not (len(instructed) == len(neutral) == len(replies)):
        raise SteerError("instructed prompts, neutral prompts and replies differ in number")

    def mean(prompts: Sequence[list[int]], desc: str) -> Tensor:
        rows = [p + r for p, r in zip(prompts, replies, strict=True)]
        return mean_at_positions(
            lm, rows, [len(p) - 1 for p in prompts], batch_size=batch_size, desc=desc if progress else ""
        )

    under_instruction = mean(instructed, "under the instruction")
    under_neutral = mean(neutral, "under the neutral instruction")
    return under_instruction - under_neutral, under_neutral


def measure_refusal(
    lm: LoadedModel, refused: Sequence[list[int]], answered: Sequence[list[int]], *, batch_size: int = 8
) -> Tensor:
    """Mean activation at the last prompt position on requests the model refuses minus on matched
    ones it answers, [layers, neurons]."""
    last = lambda prompts: [len(p) - 1 for p in prompts]  # noqa: E731
    return mean_at_positions(lm, refused, last(refused), batch_size=batch_size) - mean_at_positions(
        lm, answered, last(answered), batch_size=batch_size
    )


def load_refusal_requests() -> tuple[list[str], list[str]]:
    """The packaged (refused, answered) requests, one matched pair per line of `steer/data/refusal.toml`."""
    import tomllib
    from importlib import resources

    data = tomllib.loads(resources.files("steer.data").joinpath("refusal.toml").read_text(encoding="utf-8"))
    pairs = data["pairs"]
    return [p[0] for p in pairs], [p[1] for p in pairs]
