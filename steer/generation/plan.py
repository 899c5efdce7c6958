"""The batch plan: what one multi-recipe decoding call shares (`CallPlan`) and which rows of a batch
belong to which candidate recipe, its edit and its guidance pair (`BatchLayout`) — immutable values,
so the offset arithmetic lives in one place instead of in the steerer, the guidance processor and
the edit hooks.

Rows leave a batch as they finish (`steer.generation.decoding.greedy_decode` drops them): the
decoder narrows the layout to the rows each forward pass holds (`edit_rows(k, held)`) and the edit
hooks of that pass are built from the narrowed rows, while the layout itself keeps describing the
batch as it was planned, which is what outputs are read back by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import torch
from torch import Tensor

from steer.model.hooks import NeuronEdit
from steer.settings import TransferSettings

T = TypeVar("T")

# the fields that only change a candidate's edit; candidates that differ in nothing else share a batch
_EDIT_FIELDS = {"mode", "top_k", "method", "positions", "edit_layers", "amplify_factor", "strength"}
_EDIT_FIELDS |= {"guidance", "alpha", "keep_words"}


def decoding_groups(candidates: Sequence[TransferSettings]) -> list[list[int]]:
    """Indices of the candidates that can share one batch (`Steerer.transfer_candidates`): those that
    agree on everything but the edit — e.g. a few-shot rung has a prompt of its own. Layer contrast
    and sampling get a group each."""
    groups: dict[str, list[int]] = {}
    for k, c in enumerate(candidates):
        shared = {f: v for f, v in c.to_dict().items() if f not in _EDIT_FIELDS}
        alone = c.contrast or c.temperature > 0
        groups.setdefault(repr([shared, k if alone else None]), []).append(k)
    return list(groups.values())


@dataclass(frozen=True)
class CallPlan:
    """What the batches of one `Steerer.transfer_candidates` call share (built by `Steerer._plan`)."""

    candidates: list[TransferSettings]
    edits: list[NeuronEdit]
    guided: list[bool]  # a guided candidate decodes an unedited and an edited copy of each row
    layers: list[int]  # layer contrast's premature layers; [] without contrast
    prompts: list[list[int]]
    truncated: list[bool]
    opening: str
    instruction: str
    rejects: list[Any]  # per text: the echo filter cleaning and stop-at-answer apply
    first_tokens: list[Any]  # per text: the echo guard's banned first tokens ([] when off)
    echo_grams: list[Any]
    keep_tokens: list[list[list[list[int]]]]  # per text, per content word, per spelling: its tokens ([] when off)
    marker_tokens: list[list[list[int]]]  # per text: the spellings of its source-style markers ([] when off)
    share_prefill: bool
    prefix_length: int  # the tokens every prompt starts with, prefilled once per call (0: none shared)
    eos_token_id: Any

    def layout(self, size: int) -> BatchLayout:
        """The rows of a batch of `size` texts under every candidate of this call."""
        return BatchLayout(size, tuple(self.guided))


@dataclass(frozen=True)
class BatchLayout:
    """The rows of one batch of `size` texts decoded under several candidates at once.

    Candidate k's rows are [offset_k, offset_k + size); a guided candidate's edited copy follows at
    [offset_k + size, offset_k + 2·size). Batch row r holds text r % size of the batch.
    """

    size: int
    guided: tuple[bool, ...]

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        starts, total = [], 0
        for g in self.guided:
            starts.append(total)
            total += 2 * self.size if g else self.size
        return tuple(starts)

    @cached_property
    def total(self) -> int:
        return sum(2 * self.size if g else self.size for g in self.guided)

    @property
    def copies(self) -> int:
        """How many copies of the batch's prompts the batch holds."""
        return self.total // self.size

    def edited_start(self, k: int) -> int:
        """The first row candidate k's edit applies to: its edited copy when guided, else its rows."""
        return self.offsets[k] + (self.size if self.guided[k] else 0)

    def edit_rows(self, k: int, held: Tensor | None = None) -> Tensor | None:
        """Candidate k's edited rows as a mask over the batch, or over the rows `held` (full-batch
        indices: the rows a forward pass still holds once finished rows left); None when the batch
        is k's alone."""
        if self.total == self.size:
            return None
        rows, lo = torch.arange(self.total), self.edited_start(k)
        mask = (rows >= lo) & (rows < lo + self.size)
        return mask if held is None else mask[held.cpu()]

    def guidance_pair(self, k: int, alpha: float, guidance: float) -> tuple[int, int, int, float, float]:
        """`GroupGuidance`'s group for guided candidate k: (unedited start, edited start, size, α, γ)."""
        return (self.offsets[k], self.edited_start(k), self.size, alpha, guidance)

    def per_row(self, per_text: Sequence[T]) -> list[T]:
        """A per-text value spread over the batch rows (row r gets text r % size's)."""
        return [per_text[r % self.size] for r in range(self.total)]

    def per_candidate(self, per_candidate: Sequence[T]) -> list[T]:
        """A per-candidate value spread over the batch rows (both copies of a guided candidate get it)."""
        out: list[T] = []
        for k, g in enumerate(self.guided):
            out += [per_candidate[k]] * (2 * self.size if g else self.size)
        return out

    def row(self, k: int, j: int) -> int:
        """The batch row of text j under candidate k (its unedited copy when guided)."""
        return self.offsets[k] + j
