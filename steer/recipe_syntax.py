"""How a recipe spells its neuron counts and its push schedule, checked without torch or a model
(`TransferSettings` checks a recipe with them before anything loads)."""

from __future__ import annotations

from steer.errors import SteerError


def check_top_k_syntax(value: str | int | float, name: str) -> None:
    """A neuron count's syntax, without the model: a count, a percentage below 100% or a fraction in (0, 1)."""
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        ok = 0 < number < 1 if text.endswith("%") or "." in text else number >= 1 and number.is_integer()
    except ValueError:
        ok = False
    if not ok:
        raise SteerError(
            f"`{name}` {value!r} is not valid; give a count, a percentage below 100% like '1%' or a fraction in (0, 1)"
        )


def parse_schedule(schedule: str) -> tuple[int | None, float]:
    """`push_schedule` as (first N generated tokens or None for all, decay per token)."""
    first, decay = None, 1.0
    fix = "write all, first:N, decay:R or first:N,decay:R (e.g. first:8,decay:0.8)"
    for part in filter(None, (p.strip() for p in schedule.split(","))):
        name, _, value = part.partition(":")
        try:
            if name == "first" and first is None and int(value) >= 1:
                first = int(value)
                continue
            if name == "decay" and decay == 1.0 and 0 < float(value) <= 1:
                decay = float(value)
                continue
        except ValueError:
            pass
        if part != "all":
            raise SteerError(f"`push_schedule` {schedule!r} is not valid; {fix}")
    return first, decay
