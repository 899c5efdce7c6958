"""steer: rewrite text from one style to another by steering a language model's own neurons.

The public names below are imported on first use (PEP 562), so that `import steer.settings` or
`steer report` does not load torch; `steer.generation.steerer` is the module, `steer.rewrite` the one call.
"""

from __future__ import annotations

import importlib
from typing import Any

from steer.version import __version__ as __version__

_PUBLIC = {
    "ProfileSettings": "steer.settings",
    "SteerError": "steer.errors",
    "Corpus": "steer.profiling.corpus",
    "load_corpus": "steer.profiling.corpus",
    "load_styles": "steer.profiling.corpus",
    "ARCHITECTURES": "steer.model.sites",
    "LoadedModel": "steer.model.loading",
    "load_model": "steer.model.loading",
    "NeuronSelection": "steer.profiling.neurons",
    "NeuronSet": "steer.profiling.neurons",
    "ActivationCounts": "steer.profiling.profile",
    "StyleProfile": "steer.profiling.profile",
    "count_activations": "steer.profiling.profile",
    "profile_styles": "steer.profiling.profile",
    "apply": "steer.generation.attach",
    "profile": "steer.generation.held",
    "PRESETS": "steer.settings",
    "TransferSettings": "steer.settings",
    "Steerer": "steer.generation.steerer",
    "rewrite": "steer.rewriting.service",
    "open_rewriter": "steer.rewriting.service",
    "RewriteService": "steer.rewriting.service",
    "RerankOptions": "steer.rewriting.recipe",
}

__all__ = sorted([*_PUBLIC, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'steer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
