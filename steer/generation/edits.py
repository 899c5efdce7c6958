"""The neuron edit a recipe's mode asks for, built from the profile (deactivate, amplify, shift) or
read from its trained edits (`trained`, written by `steer train`), kept to `edit_layers`."""

from __future__ import annotations

from collections.abc import Callable

from steer.errors import SteerError
from steer.generation.contrast import parse_layers
from steer.model.hooks import NeuronEdit
from steer.profiling.profile import StyleProfile
from steer.profiling.trained import TrainedEdits
from steer.settings import TransferSettings

Trained = TrainedEdits | Callable[[], TrainedEdits] | None


def build_edit(
    profile: StyleProfile | None,
    shape: tuple[int, int],
    source: str,
    target: str,
    settings: TransferSettings,
    trained: Trained = None,
) -> NeuronEdit:
    """The neuron edit a mode asks for on a model of `shape` [layers, neurons] (empty for `prompt`)."""
    edit = NeuronEdit.empty(*shape)
    if not settings.edits:
        return edit
    if profile is None:
        raise SteerError(f"`mode` {settings.mode} needs a `profile`")
    if settings.mode == "trained":
        if trained is None:
            raise SteerError("`mode` trained needs the profile's trained edits; run: steer train PROFILE --pairs FILE")
        return restrict((trained() if callable(trained) else trained).edit(source, target), settings, shape[0])
    if settings.mode == "shift":
        from steer.profiling.neurons import parse_top_k, top_k_mask

        delta = (profile.counts[target].mean - profile.counts[source].mean).float()
        chosen = top_k_mask(delta.abs(), parse_top_k(settings.top_k, profile.total_neurons))
        strength = settings.strength * profile.unit()  # λ in the profile's calibrated units
        return restrict(edit.with_shift(chosen, strength * delta), settings, shape[0])
    selection = profile.neurons(source, target, top_k=settings.top_k, method=settings.method)
    if "deactivate" in settings.mode:
        edit = edit.with_scale(selection.source.mask, 0.0)
    if "amplify" in settings.mode:
        edit = edit.with_scale(selection.target.mask, settings.amplify_factor)
    return restrict(edit, settings, shape[0])


def restrict(edit: NeuronEdit, settings: TransferSettings, num_layers: int) -> NeuronEdit:
    """`edit` kept to the recipe's `edit_layers` (all of it when none are given)."""
    if settings.edit_layers is None:
        return edit
    return edit.only_layers(parse_layers(settings.edit_layers, num_layers, option="`edit_layers`", last_allowed=True))
