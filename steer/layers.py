"""Layer specs ('24,26', '20-28', 'last:4'): their syntax checked without a model, so a bad spec
is refused before anything loads; the range against a model's blocks is `generation.contrast`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from steer.errors import SteerError

LAYER_FORMS = "'24,26,28', '24-28' (LOW-HIGH) or 'last:4' (the N final blocks, N ≥ 1)"


MAX_BLOCKS = 4096  # no model has as many blocks; a larger number is a mistake, refused before a range is built


def layer_spec(spec: str | Sequence[int], option: str = "`contrast_layers`") -> tuple[int | None, list[int]]:
    """The syntax of a layer spec, without the model: (N of `"last:N"`, None otherwise; the layers
    of `"24,26"`, `"20-28"` or a list). A spec that cannot be right on any model (a word, a
    negative number, a range that runs backwards, `last:0`) is a one-line error naming it and the
    valid forms, so it is refused before any model loads, not reported as out of range later."""
    if isinstance(spec, str) and spec.strip().startswith("last:"):
        try:
            count = int(spec.strip()[5:])
        except ValueError:
            raise SteerError(
                f"{option} {spec!r} is not valid: last:N needs a whole number N; use {LAYER_FORMS}"
            ) from None
        if count < 1:
            raise SteerError(f"{option} {spec!r} is not valid: last:N needs N ≥ 1, got {count}; use {LAYER_FORMS}")
        return count, []
    if not isinstance(spec, str):
        return None, [int(x) for x in spec]
    layers: list[int] = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise SteerError(f"{option} {spec!r} is not valid; use {LAYER_FORMS}") from None
        if first < 0 or last < 0:
            raise SteerError(f"{option} {spec!r} is not valid: blocks count from 0; use {LAYER_FORMS}")
        if last < first:
            raise SteerError(
                f"{option} {spec!r} is not valid: the range {part.strip()!r} runs backwards; "
                f"write it LOW-HIGH ('{last}-{first}'), or use {LAYER_FORMS}"
            )
        if last >= MAX_BLOCKS:  # checked before the range is built: "0-10000000000" would fill memory
            raise SteerError(f"{option} {spec!r} names block {last}; models here have fewer than {MAX_BLOCKS} blocks")
        layers += list(range(first, last + 1))
    return None, layers


def check_layer_syntax(fields: dict[str, Any], options: dict[str, str] | None = None) -> None:
    """`layer_spec`'s syntax check of the blocks a recipe names (`edit_layers`, `contrast_layers`;
    None or "" is not given), before any model loads; `options` names each field as the user wrote
    it (`--edit-layers`, `[contrast] layers`; default the field's name). A value of another type (a
    TOML number) is one line too, not a traceback."""
    for name in ("edit_layers", "contrast_layers"):
        spec, option = fields.get(name), (options or {}).get(name, f"`{name}`")
        if spec is None or spec == "":
            continue
        if isinstance(spec, int) and not isinstance(spec, bool):
            spec = str(spec)  # `edit_layers = 20` means the block 20
        if not isinstance(spec, str) and not (
            isinstance(spec, list | tuple) and all(isinstance(x, int) and not isinstance(x, bool) for x in spec)
        ):
            raise SteerError(f"{option} {spec!r} is not valid; use {LAYER_FORMS}")
        layer_spec(spec, option)
