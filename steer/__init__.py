"""steer: rewrite text from one style to another by steering a language model's own neurons."""

from __future__ import annotations

__version__ = "0.1.0"

from steer.config import ProfileSettings, SteerError  # noqa: E402
from steer.corpus import Corpus, load_corpus, load_styles  # noqa: E402
from steer.models import ARCHITECTURES, LoadedModel, load_model  # noqa: E402
from steer.neurons import NeuronSelection, NeuronSet  # noqa: E402
from steer.profile import ActivationCounts, StyleProfile, count_activations, profile_styles  # noqa: E402  # noqa: E402
from steer.steering import apply  # noqa: E402
from steer.transfer import PRESETS, Steerer, TransferSettings, transfer  # noqa: E402

__all__ = [
    "ARCHITECTURES",
    "ActivationCounts",
    "Corpus",
    "LoadedModel",
    "NeuronSelection",
    "NeuronSet",
    "PRESETS",
    "ProfileSettings",
    "Steerer",
    "SteerError",
    "StyleProfile",
    "TransferSettings",
    "__version__",
    "apply",
    "count_activations",
    "load_corpus",
    "load_model",
    "load_styles",
    "profile_styles",
    "transfer",
]
