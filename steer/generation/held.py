"""Profiling a model the user already holds, in one call (`steer.profile(model, tokenizer, texts)`):
the activation counts of each style's texts and the strength calibration, as `steer profile` makes
them from files — for users who load their model themselves (any family steer finds the neurons of).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from steer.errors import SteerError
from steer.generation.attach import model_name, wrap_for_hooks
from steer.generation.calibration import calibrate as measure
from steer.model.loading import LoadedModel, wrap_model
from steer.profiling.corpus import Corpus, corpus_hash, parse_style
from steer.profiling.profile import StyleProfile, profile_styles
from steer.settings import ProfileSettings

logger = logging.getLogger(__name__)


def profile(
    model: Any,
    tokenizer: Any,
    texts_by_style: Mapping[str, Sequence[str]],
    *,
    settings: ProfileSettings | None = None,
    calibrate: bool = True,
    activation_path: str | None = None,
    progress: bool = False,
) -> StyleProfile:
    """The profile of a model the user already holds (`steer profile` for a model object): activation
    counts of each style's texts (`{"formal": [...], "informal": [...]}`), and, with `calibrate`, what
    one unit of steering strength is on this model. `model` is a plain `transformers` causal LM or a
    `LoadedModel`; save the result with `.save(path)` and use it with `apply` or `steer transfer`."""
    shape = "`texts_by_style` maps each style name to a list of texts, e.g. {'formal': [...], 'informal': [...]}"
    if not isinstance(texts_by_style, Mapping):
        raise SteerError(f"{shape}; got a {type(texts_by_style).__name__}")
    if len(texts_by_style) < 2:
        raise SteerError(f"{len(texts_by_style)} style(s) given; profile two or more: {shape}")
    for name, texts in texts_by_style.items():
        if not isinstance(name, str):
            raise SteerError(f"style name {name!r} is not a string; {shape}")
        parse_style(f"{name}=python")  # the names `steer profile --style` takes (no '>' or spaces)
        if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
            raise SteerError(f"style {name!r} holds a {type(texts).__name__}, not a list of texts; {shape}")
        odd = next((t for t in texts if not isinstance(t, str)), None)
        if odd is not None:
            raise SteerError(f"style {name!r} holds {odd!r}, which is not a text (str)")
    if isinstance(model, LoadedModel):
        lm = wrap_for_hooks(model, activation_path, tokenizer=tokenizer)
    elif tokenizer is None:
        raise SteerError("`tokenizer` is None; pass the model's tokenizer (or steer.load_model()'s LoadedModel)")
    else:
        lm = wrap_model(model, tokenizer, model_name(model), activation_path=activation_path)
    corpora = []
    for name, texts in texts_by_style.items():
        kept = tuple(t for t in texts if t.strip())
        if not kept:
            raise SteerError(f"style {name!r} has no texts; give each style one or more non-blank texts")
        corpora.append(Corpus(name, kept, "python", corpus_hash(kept)))
    result = profile_styles(lm, corpora, settings or ProfileSettings(), progress=progress)
    if not calibrate:
        return result
    try:
        units = measure(lm, result, {c.name: c.texts for c in corpora}, progress=progress)
    except SteerError as err:  # the counts are kept, uncalibrated, as `steer profile` keeps them
        logger.warning("calibration failed (%s); the profile is returned uncalibrated (λ as given)", err)
        return result
    return replace(result, calibration=units)
