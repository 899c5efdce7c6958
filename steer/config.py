"""Shared settings types and the one exception users see (`SteerError`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


class SteerError(ValueError):
    """A mistake the user can fix: the CLI prints it as one line and exits with code 1.

    Messages name parameters in backticks (`top_k`), as a Python caller knows them; the CLI shows
    each as the option of the command that was run (--top-k)."""


@dataclass(frozen=True)
class ProfileSettings:
    """How a profile was computed; stored in the profile so it can be reproduced."""

    batch_size: int = 16
    max_length: int = 512
    dtype: str = "float32"
    padding_side: str = "right"
    dedupe: bool = False
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise SteerError(f"`batch_size` must be at least 1, got {self.batch_size}")
        if self.max_length < 1:
            raise SteerError(f"`max_length` must be at least 1, got {self.max_length}")
        if self.padding_side not in ("left", "right"):
            raise SteerError(f"padding side must be 'left' or 'right', got {self.padding_side!r}")
        if self.limit is not None and self.limit < 1:
            raise SteerError(f"`limit` must be at least 1, got {self.limit}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON view for artefact metadata."""
        return asdict(self)
