"""The instruction push and the refusal projection a recipe asks for, built from the profile's
instruction measurements (`steer.profiling.instruction`, written by `steer instruct`).

The push adds λ × the instruction's own shift to the neurons it moves most, where the reply is
written; gated (PSR's per-token idea, on neurons), each neuron gets only the share of the shift the
token's own activation still lacks, so a token the prompt already moved is left alone. The refusal
projection removes the model's refusal direction from the neurons (Arditi et al. 2024, in neuron
space). Both are read lazily: a recipe without them never opens the measurements.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from steer.errors import SteerError
from steer.model.hooks import NeuronPush
from steer.profiling.instruction import InstructionShifts
from steer.settings import TransferSettings

Measurements = Callable[[], InstructionShifts]


def measurements(given: InstructionShifts | Measurements | None) -> Measurements:
    """`given` as a function that reads the measurements once, when a recipe first needs them."""
    held: list[InstructionShifts] = []

    def read() -> InstructionShifts:
        if not held:
            if given is None:
                raise SteerError(
                    "`push` and `refusal` need the profile's instruction measurements; run: steer instruct"
                )
            held.append(given() if callable(given) else given)
        return held[0]

    return read


def build_push(instructions: Measurements, source: str, target: str, settings: TransferSettings) -> NeuronPush | None:
    """λ × the direction's instruction shift on the `push_top_k` neurons it moves most, gated per
    token toward the instruction's mean unless `push_gate` is off (None at λ 0: nothing is read)."""
    if settings.push == 0:
        return None
    from steer.profiling.neurons import parse_top_k, top_k_mask

    shift, neutral = instructions().shift(source, target)
    chosen = top_k_mask(shift.abs(), parse_top_k(settings.push_top_k, shift.numel(), "push_top_k")) & (shift != 0)
    push = torch.where(chosen, settings.push * shift, torch.zeros_like(shift))
    if not settings.push_gate:
        return NeuronPush(chosen, push)
    span = torch.where(chosen, shift, torch.ones_like(shift))
    return NeuronPush(chosen, push, toward=neutral + shift, span=span)


def refusal_direction(instructions: Measurements, settings: TransferSettings) -> Tensor | None:
    """The refusal direction a recipe projects out ([layers, neurons]; None at share 0)."""
    if settings.refusal == 0:
        return None
    refusal = instructions().refusal
    if refusal is None:
        raise SteerError("`refusal` needs the model's refusal direction; run: steer instruct PROFILE --refusal")
    return refusal
