"""The model names and weight formats steer offers, kept free of torch so the CLI builds its options
(and answers `--help`) before anything heavy loads."""

from __future__ import annotations

EMBEDDED_ALIAS = "smollm2-135m"  # the one embedded model installed with steer itself (the tests' real model)
# what `steer profile` and `load_model()` use when no model is named: the smallest embedded model that
# rewrites usably (the `qwen-1.5b` extra; `make demo` installs it)
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
# lighter linear layers for CPU decoding (`steer.model.weights`): float16 weights; int8 weights and activations
LIGHT_FORMATS = ("fp16-linear", "int8-linear")
DTYPES = ("auto", "float32", "bfloat16", "float16", *LIGHT_FORMATS)
