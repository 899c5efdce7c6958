"""The one padding helper: token-id rows → a padded id tensor and its attention mask."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """Pad rows to the longest on the `side` ("left" for generation, "right" for scoring);
    returns (ids, mask) as long tensors, mask 1 on real tokens."""
    if side not in ("left", "right"):
        raise ValueError(f"padding side must be 'left' or 'right', got {side!r}")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[r, cols] = torch.tensor(list(row), dtype=torch.long)
        mask[r, cols] = 1
    return ids, mask
