"""Steering a model the user already holds: `with apply(model, profile, source, target, ...)`
installs a recipe's neuron edits on a plain `transformers` model — for the user's own
`model.generate()` or pipeline — and removes exactly those hooks on exit, also on an exception.

The common shape of the field (steering-vectors' `with vec.apply(model)`, repeng's
`set_control`). Only the edit itself can live in a forward hook; the parts of a recipe that need
steer's own decoder — guidance (each text decoded twice in one batch), contrastive layer decoding
and rerank — are refused with a pointer to `Steerer.transfer` / `steer transfer`. The loop guard
and stop-at-answer are plain `transformers` processors: see `steer.generation.processors`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.generation.steerer import Steerer
from steer.model.hooks import NeuronEdit, edit_neurons
from steer.model.loading import LoadedModel, wrap_model
from steer.profiling.profile import StyleProfile, check_direction
from steer.profiling.trained import TrainedEdits, trained_path
from steer.settings import TransferSettings


def recipe_for_hooks(preset: str | None = None, **fields: Any) -> TransferSettings:
    """The recipe `apply` installs: a preset with `fields` on top, or a bare mode (`mode` given, or
    the paper's deactivation when nothing is); refused when it needs steer's own decoder."""
    if preset is None and "mode" not in fields:
        settings = TransferSettings.bare(**fields)
    else:
        settings = TransferSettings.resolve(preset, **fields)
    if settings.guidance > 0:
        raise SteerError(
            "`guidance` decodes every text twice in one batch, which needs steer's own decoder; use "
            "Steerer.transfer (or `steer transfer`), or set `guidance` 0 to apply the bare edit"
        )
    if settings.push > 0 or settings.refusal > 0 or settings.instruction_contrast > 0:
        raise SteerError(
            "`push`, `refusal` and `instruction_contrast` follow the decoding step by step (or decode a second "
            "prompt), which needs steer's own decoder; use Steerer.transfer (or `steer transfer`), or set them 0"
        )
    if settings.contrast:
        raise SteerError(
            "`contrast` (layer-contrastive decoding) needs steer's own decoder; use Steerer.transfer or "
            "`steer transfer`"
        )
    if not settings.edits:
        raise SteerError("`mode` prompt has no edit to apply; choose deactivate, amplify, deactivate+amplify or shift")
    return settings


def wrap_for_hooks(
    model: Any, activation_path: str | None = None, hint: str | None = None, tokenizer: Any = None
) -> LoadedModel:
    """What steer needs to know of a user's model to edit it: a `LoadedModel` (`steer.load_model`'s)
    as it is, else the plain model described (`tokenizer`: None where `generate` is the user's).
    `activation_path` is the user's override, `hint` a profile's recorded path (used where it fits)."""
    if isinstance(model, LoadedModel):
        wanted = activation_path or hint
        if wanted is None or wanted == model.arch.activation:
            return model
        return wrap_model(  # the same model and fingerprint, its activation where the profile's counts are
            model.model, tokenizer or model.tokenizer, model.model_id, activation_path=activation_path,
            known_fingerprint=model.fingerprint, activation_hint=hint,
        )  # fmt: skip
    if not hasattr(model, "config") or not callable(getattr(model, "named_modules", None)):
        raise SteerError(
            f"`model` is a {type(model).__name__}, not a model; pass a transformers causal LM or steer.load_model()'s"
        )
    return wrap_model(model, tokenizer, model_name(model), activation_path=activation_path, activation_hint=hint)


def model_name(model: Any) -> str:
    """What a user's model is called in messages: where it was loaded from, else its class."""
    return str(getattr(getattr(model, "config", None), "_name_or_path", "") or "") or f"your {type(model).__name__}"


@contextmanager
def apply(
    model: Any,
    profile: StyleProfile | str | Path,
    source: str,
    target: str,
    *,
    preset: str | None = None,
    trained: TrainedEdits | str | Path | None = None,
    activation_path: str | None = None,
    **fields: Any,
) -> Iterator[NeuronEdit]:
    """Within the block, `model` runs with the recipe's neuron edits for `source` → `target`.

    `preset` and `fields` are `TransferSettings`' (e.g. `mode="shift", strength=1.5,
    positions="generated"`, or `mode="deactivate", top_k="1%"`); without either, the paper's
    deactivation of the source-only neurons at every position. The profile must have been made on
    this model (its fingerprint is checked). `mode="trained"` applies the edit `steer train` learned:
    from `trained` (a `.trained.safetensors` path or `TrainedEdits`), else the file beside the profile.
    Yields the `NeuronEdit` (how many neurons, which layers). `model` is a plain `transformers`
    model or `steer.load_model`'s `LoadedModel`; `activation_path` (with `{layer}`) names the MLP
    activation module where steer's guess from the module tree is wrong (default: the one the
    profile recorded).

        with steer.apply(model, "formality.safetensors", "formal", "informal", mode="shift", strength=1.5):
            ids = model.generate(**tokenizer(prompt, return_tensors="pt"), max_new_tokens=40)
    """
    prof = profile if isinstance(profile, StyleProfile) else StyleProfile.load(profile)
    check_direction(source, target)
    prof.check_style(source)
    prof.check_style(target)
    settings = recipe_for_hooks(preset, **fields)
    lm = wrap_for_hooks(model, activation_path, hint=prof.settings.get("activation"))
    prof.check_model(lm.model_type, lm.num_layers, lm.num_neurons, lm.fingerprint, lm.model_id)

    def learned() -> TrainedEdits:  # `mode="trained"`: the file beside the profile unless `trained` is given
        if trained is None and isinstance(profile, StyleProfile):
            raise SteerError("`mode` trained with a profile object needs `trained` (the .trained.safetensors path)")
        found = (
            trained
            if isinstance(trained, TrainedEdits)
            else TrainedEdits.load(trained or trained_path(profile), (lm.num_layers, lm.num_neurons))  # type: ignore[arg-type]
        )
        if found.fingerprint != lm.fingerprint:
            raise SteerError(f"the trained edits were trained on another model than {lm.model_id}")
        want = (lm.num_layers, lm.num_neurons)
        odd = [k for k, e in found.edits.items() if tuple(e.mask.shape) != want or tuple(e.scale.shape) != want]
        if odd:
            raise SteerError(
                f"the trained edit for {odd[0].replace('->', ' → ')} has another shape than this model's "
                f"[layers, neurons] {list(want)}; train it again on this model (steer train)"
            )
        return found

    edit = Steerer(lm, prof, trained=learned).build_edit(source, target, settings)
    with edit_neurons(lm.activation_sites(), edit, settings.positions, blocks=lm.shape_blocks()):
        yield edit
