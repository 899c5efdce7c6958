"""Transfer settings: the modes, the named recipes (presets) and the one resolver that merges a
recipe with a caller's defaults and overrides (`TransferSettings.resolve`).

Modes:
- `prompt`: the instruction alone (the baseline), no edits.
- `deactivate`: zero the source-only neurons' gated activations (the paper).
- `amplify`: multiply the target-only neurons' activations by `amplify_factor`.
- `deactivate+amplify`: both.
- `shift`: add `strength` × (target − source mean activation) to the `top_k` neurons whose means
  differ most — an activation-steering vector on the MLP neurons (beyond the paper).
`contrast=True` adds contrastive layer decoding (the paper's DoLa variant) to any mode.
`guidance=γ > 0` instead decodes each prompt twice in one batch, unedited and edited, and
follows `log p_base + γ·(log p_edited − log p_base)` inside the base model's plausible tokens.
`guided` (shift at generated positions inside guidance) is the default preset because it measured
best on the embedded model (docs/results.md); `paper` is the published recipe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

from steer.config import SteerError
from steer.contrast import check_alpha_beta
from steer.hooks import POSITIONS, Position
from steer.neurons import METHODS, Method
from steer.prompts import check_opening, check_template

# Closed choices are Literal types; the tuples (and the CLI's click choices) are built from them.
Mode = Literal["prompt", "deactivate", "amplify", "deactivate+amplify", "shift"]
ContrastDtype = Literal["auto", "float32", "bfloat16"]
MODES: tuple[str, ...] = get_args(Mode)
CONTRAST_DTYPES: tuple[str, ...] = get_args(ContrastDtype)


# Named recipes. `guided` is the default of `steer transfer` and `steer run`; `paper` is the
# published sNeuron-TST recipe (top-k as a fraction, since the paper's absolute k = 10,000 is 22%
# of a 135M model's neurons). docs/results.md has the measurements behind the choice.
PRESETS: dict[str, dict[str, Any]] = {
    "prompt": {"mode": "prompt"},
    "paper": {
        "mode": "deactivate",
        "method": "paper",
        "top_k": "1%",
        "positions": "all",
        "contrast": True,
        "alpha": 0.1,
        "beta": 1.0,
    },
    "guided": {
        "mode": "shift",
        "top_k": "5%",
        "strength": 2.0,
        "guidance": 1.0,
        "alpha": 0.1,
        "positions": "generated",
    },
}
DEFAULT_PRESET = "guided"
_DEFAULT = PRESETS[DEFAULT_PRESET]

# A mode's bare settings: edits at every position, no guidance — what an explicit `mode` without a
# preset starts from, and what recorded recipes (tuned.json choices, tune candidates, run configs)
# are completed with. Every other field has the same default either way.
BARE: dict[str, Any] = {
    "mode": "deactivate",
    "top_k": "1%",
    "positions": "all",
    "strength": 1.0,
    "guidance": 0.0,
    "alpha": 0.1,
}


@dataclass(frozen=True)
class TransferSettings:
    """Everything that decides a transfer's output; recorded with every JSONL record.

    The defaults are the default preset's (`TransferSettings() == TransferSettings.preset("guided")`);
    `TransferSettings.bare(...)` starts from a mode's bare settings instead (`BARE`)."""

    mode: Mode = _DEFAULT["mode"]
    top_k: str = _DEFAULT["top_k"]
    method: Method = "paper"
    positions: Position = _DEFAULT["positions"]
    edit_layers: str | None = None  # keep only the edits in these blocks ("20-29", "last:10"); None = all
    amplify_factor: float = 2.0
    strength: float = _DEFAULT["strength"]
    contrast: bool = False
    contrast_layers: tuple[int, ...] | str | None = None
    alpha: float = _DEFAULT["alpha"]
    beta: float = 1.0
    contrast_dtype: ContrastDtype = "auto"
    guidance: float = _DEFAULT["guidance"]
    no_repeat_ngram: int = 0  # > 0: the reply may not repeat its own n-grams (source n-grams stay allowed)
    loop_guard: bool = True  # the reply may not start a third consecutive copy of what it just said twice
    echo_guard: bool = True  # the reply may not start with, or copy 3 tokens of, the instruction (not in the source)
    max_new_tokens: int = 64
    max_input_tokens: int = 512
    batch_size: int = 8
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    clean: bool = True
    prompt: str | None = None
    opening: str | None = None  # the reply's primed start; None = the packaged one for the direction, "" = none
    min_new_tokens: int = 0  # > 0 forces that many tokens before EOS (benchmarks use it for equal work)

    def __post_init__(self) -> None:
        import math

        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise SteerError(f"`{f.name}` must be a finite number, got {value}")
        if self.mode not in MODES:
            raise SteerError(f"`mode` {self.mode!r} is not valid; choose one of {', '.join(MODES)}")
        if self.method not in METHODS:
            raise SteerError(f"`method` {self.method!r} is not valid; choose one of {', '.join(METHODS)}")
        if self.positions not in POSITIONS:
            raise SteerError(f"`positions` {self.positions!r} is not valid; choose one of {', '.join(POSITIONS)}")
        for name in ("max_new_tokens", "max_input_tokens", "batch_size"):
            if getattr(self, name) < 1:
                raise SteerError(f"`{name}` must be at least 1, got {getattr(self, name)}")
        if self.temperature < 0:
            raise SteerError(f"`temperature` must be ≥ 0 (0 is greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SteerError(f"`top_p` must be in (0, 1], got {self.top_p}")
        if self.amplify_factor < 0:
            raise SteerError(f"`amplify_factor` must be ≥ 0, got {self.amplify_factor}")
        check_alpha_beta(self.alpha, self.beta)
        if self.contrast_dtype not in CONTRAST_DTYPES:
            raise SteerError(
                f"`contrast_dtype` {self.contrast_dtype!r} is not valid; choose one of {', '.join(CONTRAST_DTYPES)}"
            )
        if self.no_repeat_ngram < 0:
            raise SteerError(f"`no_repeat_ngram` must be ≥ 0 (0 is off), got {self.no_repeat_ngram}")
        if self.guidance < 0:
            raise SteerError(f"`guidance` must be ≥ 0 (0 is off), got {self.guidance}")
        if self.guidance > 0 and self.contrast and self.mode != "prompt":
            raise SteerError(
                "`contrast` cannot be combined with `guidance` (the guided preset uses it); "
                "add `guidance` 0 or pick `preset` paper"
            )
        if self.guidance > 0 and self.temperature > 0 and self.mode != "prompt":
            raise SteerError(
                "`temperature` samples, but guidance (used by the guided preset and rerank) decodes greedily; "
                "drop `temperature`, or use `preset` prompt, or set `guidance` 0"
            )
        if self.prompt is not None:
            check_template(self.prompt, "`prompt`")
        if self.opening is not None:
            check_opening(self.opening, "`opening`")

    @classmethod
    def resolve(
        cls,
        preset: str | None = None,
        recipe: dict[str, Any] | None = None,
        *,
        base: TransferSettings | None = None,
        **overrides: Any,
    ) -> TransferSettings:
        """The one place a recipe is merged. Fields come, later winning, from `base` (a caller's
        defaults, e.g. a run config's [selection]/[transfer] values; else `BARE`),
        then the recipe's start — `recipe` (recorded fields: a `steer tune` choice or a tune
        candidate), else the named preset, else nothing when `mode` is given (that mode's bare
        settings), else the default preset — then every override that is not None. So
        `mode="deactivate", contrast=True` is the paper's recipe spelled out, not the guided
        preset plus contrast."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if recipe is not None:
            merged = {**recipe, **given}
        elif preset is not None or "mode" not in given:
            merged = recipe_fields(preset or DEFAULT_PRESET, given)
        else:
            merged = given
        defaults = {f.name: getattr(base, f.name) for f in fields(base)} if base is not None else dict(BARE)
        try:
            return cls(**{**defaults, **merged})
        except TypeError as exc:
            raise SteerError(f"unknown transfer setting ({exc})") from None

    @classmethod
    def bare(cls, **fields_: Any) -> TransferSettings:
        """`BARE` settings with these fields (None leaves a field at its bare value): a mode on
        its own, without the default preset's guidance and positions."""
        return cls.resolve(recipe={}, **fields_)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransferSettings:
        """A named recipe (`PRESETS`) with some fields overridden (`resolve` with a preset)."""
        return cls.resolve(name, **overrides)

    @property
    def edits(self) -> bool:
        return self.mode != "prompt"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if isinstance(out["contrast_layers"], tuple):
            out["contrast_layers"] = list(out["contrast_layers"])
        return out


def recipe_fields(preset: str, fields_: dict[str, Any]) -> dict[str, Any]:
    """A named preset's fields with `fields_` on top: the recipe `resolve` starts from, and what a
    tune candidate written as `{preset = …, …}` records."""
    if preset not in PRESETS:
        raise SteerError(f"`preset` {preset!r} is not valid; choose one of {', '.join(PRESETS)}")
    return {**PRESETS[preset], **fields_}


def describe(settings: TransferSettings | dict[str, Any]) -> str:
    """A short human label for a recipe, e.g. `shift 5% λ=2 guidance γ=1` or `deactivate paper 1% + contrast β=1`."""
    f = (
        settings.to_dict()
        if isinstance(settings, TransferSettings)
        else {**TransferSettings.bare().to_dict(), **settings}
    )
    if f["mode"] == "prompt":
        return "prompt only"
    if f["mode"] == "shift":
        parts = [f"shift {f['top_k']} λ={f['strength']:g}"]
    else:
        parts = [f"{f['mode']} {f['method']} {f['top_k']}"]
        if "amplify" in f["mode"]:
            parts.append(f"×{f['amplify_factor']:g}")
    if f["positions"] != "all":
        parts.append(f"at {f['positions']} positions")
    if f.get("edit_layers"):
        parts.append(f"layers {f['edit_layers']}")
    if f.get("guidance"):
        parts.append(f"+ guidance γ={f['guidance']:g} α={f['alpha']:g}")
    if f["contrast"]:
        parts.append(f"+ contrast β={f['beta']:g}")
    return " ".join(parts)
