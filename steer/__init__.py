"""steer: rewrite text from one style to another by steering a language model's own neurons.

The public names below are imported on first use (PEP 562), so that `import steer.settings` or
`steer report` does not load torch; `steer.transfer` is the module, `steer.rewrite` the one call.
"""

from __future__ import annotations

import importlib
from typing import Any

from steer.version import __version__ as __version__

_PUBLIC = {
    "ProfileSettings": "steer.config",
    "SteerError": "steer.config",
    "Corpus": "steer.corpus",
    "load_corpus": "steer.corpus",
    "load_styles": "steer.corpus",
    "ARCHITECTURES": "steer.models",
    "LoadedModel": "steer.models",
    "load_model": "steer.models",
    "NeuronSelection": "steer.neurons",
    "NeuronSet": "steer.neurons",
    "ActivationCounts": "steer.profile",
    "StyleProfile": "steer.profile",
    "count_activations": "steer.profile",
    "profile_styles": "steer.profile",
    "apply": "steer.steering",
    "PRESETS": "steer.settings",
    "TransferSettings": "steer.settings",
    "Steerer": "steer.transfer",
    "rewrite": "steer.steering",
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
