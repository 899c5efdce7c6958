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

import difflib
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

from steer.errors import SteerError
from steer.prompts import NEUTRAL, check_opening, check_template
from steer.recipe_syntax import check_top_k_syntax, parse_schedule

# Closed choices are Literal types; the tuples (and the CLI's click choices) are built from them.
# They live here, with no torch import, so a configuration can be read and checked without it;
# hooks, neurons and contrast import theirs from here.
Mode = Literal["prompt", "deactivate", "amplify", "deactivate+amplify", "shift", "trained"]
Position = Literal["all", "generated"]  # where edits apply: every position, or generated tokens only
Method = Literal["paper", "diff", "lape"]  # neuron selection methods (steer.profiling.neurons)
POSITIONS: tuple[str, ...] = get_args(Position)
METHODS: tuple[str, ...] = get_args(Method)
# what other steering tools call a setting (steering-vectors, repeng, the papers) → steer's name
SYNONYMS = {"multiplier": "strength", "coefficient": "strength", "coeff": "strength", "scale": "strength",
            "alpha_shift": "strength", "layers": "edit_layers", "layer": "edit_layers", "k": "top_k",
            "max_tokens": "max_new_tokens"}  # fmt: skip
ContrastDtype = Literal["auto", "float32", "bfloat16"]
MODES: tuple[str, ...] = get_args(Mode)
MAX_EXAMPLES = 16  # few-shot examples per prompt; more would crowd a 135M model's context
CONTRAST_DTYPES: tuple[str, ...] = get_args(ContrastDtype)


# Named recipes. `guided` is the default of `steer transfer` and `steer run`; `paper` is the
# published sNeuron-TST recipe (top-k as a fraction, since the paper's absolute k = 10,000 is a large
# share of a 135M model's neurons). docs/results.md has the measurements behind the choice.
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
    "trained": {"mode": "trained", "positions": "all", "guidance": 0.0},
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


# The largest λ, γ, β or factor a recipe may hold: calibration searches λ up to it, and beyond it
# float32 activations overflow to inf (a silently empty output, not a stronger edit).
MAX_STRENGTH = 1e6


def check_alpha_beta(alpha: float, beta: float) -> None:
    """Validate the relative-top threshold and the contrast strength (`steer.generation.contrast`)."""
    if not 0 < alpha <= 1:
        raise SteerError(f"`alpha` {alpha} is outside (0, 1]; the paper uses 0.1")
    if beta < 0:
        raise SteerError(f"`beta` {beta} is negative; use 0 (no contrast) up to 1 (the paper)")


def setting(
    default: Any, help: str, *, config: str | None = None, flag: str | None = None, shown: str | None = None
) -> Any:
    """A settings field (`TransferSettings`, `ProfileSettings`, rerank's `RerankSettings`) and
    everything said about it in one place: its default, its help (the CLI option's: `steer transfer
    --top-k` is generated from field `top_k`), and where a run config sets it (`"selection"` →
    `[selection] top_k`, `"contrast.layers"` → `[contrast] layers`; None: not in run configs).
    `flag`: the option's own spelling where the field name is not it (`"--usable-first/--score-only"`);
    `shown`: the default as `--help` says it, where the value alone would not. Records store every
    field (`to_dict`)."""
    return field(default=default, metadata={"help": help, "config": config, "flag": flag, "shown": shown})


_KIND_NAMES = {int: "a whole number", float: "a number", str: "a string"}


def coerce(name: str, value: Any) -> Any:
    """A value read from TOML or JSON as its field's type (a TOML `strength = 2` is the float 2.0,
    so the recipe and its cache key are the same as for `2.0`)."""
    kind = _FIELD_TYPES[name]
    if isinstance(value, bool) and kind in (int, float, str):  # TOML `true` is no count, strength or name
        raise SteerError(f"`{name}` must be {_KIND_NAMES[kind]}, got {str(value).lower()}")
    if value is None or isinstance(value, bool) or kind not in (int, float, str):
        return value
    if kind is int and isinstance(value, float) and not value.is_integer():  # 3.7, nan, inf: no silent int()
        raise SteerError(f"`{name}` must be a whole number, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise SteerError(f"`{name}` must be {_KIND_NAMES[kind]}, got {value!r}") from None


def config_fields(settings_class: Any = None) -> dict[str, tuple[str, str]]:
    """Field name → (table, key) where a run config sets it, for every field that says so."""
    out = {}
    for f in fields(settings_class or TransferSettings):
        where = f.metadata.get("config")
        if where is not None:
            table, _, key = where.partition(".")
            out[f.name] = (table, key or f.name)
    return out


@dataclass(frozen=True)
class TransferSettings:
    """Everything that decides a transfer's output; recorded with every JSONL record.

    The defaults are the default preset's (`TransferSettings() == TransferSettings.preset("guided")`);
    `TransferSettings.bare(...)` starts from a mode's bare settings instead (`BARE`)."""

    mode: Mode = setting(
        _DEFAULT["mode"],
        "prompt: instruction only, no edits. deactivate: zero the source-only neurons (the paper). amplify: "
        "multiply the target-only neurons by --amplify-factor. deactivate+amplify: both. shift: add --strength × "
        "(target − source mean activation) to the top-k most different neurons. trained: the edit `steer train` "
        "learned for the direction (beside the profile).",
    )
    top_k: str = setting(_DEFAULT["top_k"], "Neurons per style: a count, '1%' or 0.01.", config="selection")
    method: Method = setting("paper", "Neuron selection (see 'steer inspect').", config="selection")
    positions: Position = setting(
        _DEFAULT["positions"],
        "Edit every position (the paper) or only those that predict new tokens.",
        config="selection",
    )
    edit_layers: str | None = setting(None, "Keep only the edits in these blocks: '20-29', '24,26' or 'last:10'.")
    amplify_factor: float = setting(2.0, "Factor for --mode amplify.", config="selection")
    strength: float = setting(_DEFAULT["strength"], "λ for --mode shift.", config="selection")
    contrast: bool = setting(False, "Contrastive layer decoding (the paper's DoLa variant).")
    contrast_layers: tuple[int, ...] | str | None = setting(
        None, "Candidate layers for contrast, e.g. '24-28' (None: the 4 before the last).", config="contrast.layers"
    )
    alpha: float = setting(
        _DEFAULT["alpha"], "Relative-top filter in (0, 1] (contrast, guidance).", config="contrast.alpha"
    )
    beta: float = setting(1.0, "Contrast strength (1 is the paper).", config="contrast.beta")
    contrast_dtype: ContrastDtype = setting(
        "auto",
        "Precision of the early-exit LM-head product (auto: bfloat16 where the hardware has fast bf16).",
        config="contrast.dtype",
    )
    guidance: float = setting(
        _DEFAULT["guidance"],
        "γ: decode each text unedited and edited in one batch and follow log p + γ·(log p_edited − log p) inside "
        "the unedited model's plausible tokens (--alpha); 0 turns it off.",
    )
    no_repeat_ngram: int = setting(
        0,
        "Forbid the reply from repeating its own n-grams of this size (source phrases stay allowed); 0 is off.",
        config="transfer",
    )
    loop_guard: bool = setting(
        True, "Forbid the reply from starting a third consecutive copy of what it just said twice."
    )
    echo_guard: bool = setting(
        True,
        "Forbid the reply from starting with the instruction's first word or copying 3 tokens of it "
        "(words the source uses stay allowed).",
    )
    max_new_tokens: int = setting(64, "Most tokens a reply may have.", config="transfer")
    max_input_tokens: int = setting(512, "Longer inputs are cut (warned).", config="transfer")
    batch_size: int = setting(8, "Texts decoded together.", config="transfer")
    temperature: float = setting(0.0, "0 is greedy decoding.", config="transfer")
    top_p: float = setting(1.0, "Nucleus sampling threshold (with --temperature > 0).", config="transfer")
    seed: int = setting(0, "Seed of sampling (per text, so outputs do not depend on the batch).", config="transfer")
    clean: bool = setting(True, "Keep the first answer line and strip quotes and 'Here is the rewritten…:' prefixes.")
    prompt: str | None = setting(None, "Instruction template with {text}, {source}, {target}.", config="transfer")
    opening: str | None = setting(
        None,
        "Text the reply is primed with (the start of the model's turn; may use {source}, {target}); '' for none. "
        "None: the packaged opening of the direction.",
        config="transfer",
    )
    min_new_tokens: int = setting(0, "Force that many tokens before EOS (benchmarks use it for equal work).")
    examples: int = setting(
        0,
        "Show that many texts of the target style before the instruction: the ones nearest the source by the "
        "selection encoder, from the profile's training texts (steer.generation.examples); 0 is off.",
        config="transfer",
    )

    keep_words: float = setting(
        0.0,
        "β: add β to the logits of the source's content words the reply has not said yet, so strong steering "
        "keeps the content (steer.generation.keeping); 0 is off.",
        config="transfer",
    )
    instruction_contrast: float = setting(
        0.0,
        "γ: decode each text also under a neutral instruction (--neutral) in one batch and follow "
        "log p + γ·(log p − log p_neutral) inside the instructed model's plausible tokens (--alpha); 0 is off.",
        config="transfer",
    )
    neutral: str = setting(
        "paraphrase",
        f"The instruction --instruction-contrast pushes away from: {', '.join(NEUTRAL)}.",
        config="transfer",
    )
    push: float = setting(
        0.0,
        "λ: add λ × the instruction's own shift of each neuron (measured by 'steer instruct') where the reply is "
        "written, on the --push-top-k neurons it moves most; 1 is one instruction's shift; 0 is off.",
        config="transfer",
    )
    push_top_k: str = setting("1%", "Neurons the instruction push adds to: a count, '1%' or 0.01.", config="transfer")
    push_gate: bool = setting(
        True, "Push each neuron only by the share of the instruction's shift the token's own activation lacks."
    )
    push_schedule: str = setting(
        "all", "Generated tokens the push reaches: all, first:N, decay:R (×R per token) or first:N,decay:R."
    )
    refusal: float = setting(
        0.0,
        "Share (0 to 1) of the model's refusal direction ('steer instruct --refusal') removed from the neurons "
        "at every position; 0 is off.",
        config="transfer",
    )

    def __post_init__(self) -> None:

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
        if self.min_new_tokens < 0:
            raise SteerError(f"`min_new_tokens` must be ≥ 0 (0 is off), got {self.min_new_tokens}")
        if self.min_new_tokens > self.max_new_tokens:
            raise SteerError(
                f"`min_new_tokens` {self.min_new_tokens} is more than `max_new_tokens` {self.max_new_tokens}; "
                "lower the first or raise the second"
            )
        if self.temperature < 0:
            raise SteerError(f"`temperature` must be ≥ 0 (0 is greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SteerError(f"`top_p` must be in (0, 1], got {self.top_p}")
        if self.amplify_factor <= 0:  # 0 would zero the target's neurons: deactivation, not amplification
            raise SteerError(
                f"`amplify_factor` must be > 0, got {self.amplify_factor:g}; to switch neurons off, use `mode` "
                "deactivate"
            )
        if self.edit_layers is not None and not self.edit_layers.strip():  # "" is no block, not every block
            raise SteerError("`edit_layers` is empty; give blocks like '20-29', '24,26' or 'last:10', or leave it out")
        check_alpha_beta(self.alpha, self.beta)
        if self.contrast_dtype not in CONTRAST_DTYPES:
            raise SteerError(
                f"`contrast_dtype` {self.contrast_dtype!r} is not valid; choose one of {', '.join(CONTRAST_DTYPES)}"
            )
        if not 0 <= self.examples <= MAX_EXAMPLES:
            raise SteerError(f"`examples` must be between 0 (off) and {MAX_EXAMPLES}, got {self.examples}")
        if self.no_repeat_ngram < 0:
            raise SteerError(f"`no_repeat_ngram` must be ≥ 0 (0 is off), got {self.no_repeat_ngram}")
        if self.keep_words < 0:
            raise SteerError(f"`keep_words` must be ≥ 0 (0 is off), got {self.keep_words}")
        if self.guidance < 0:
            raise SteerError(f"`guidance` must be ≥ 0 (0 is off), got {self.guidance}")
        if not 0 <= self.strength <= MAX_STRENGTH:
            raise SteerError(
                f"`strength` must be between 0 and {MAX_STRENGTH:g}, got {self.strength:g}; to steer the other "
                "way, swap the source and target styles ('steer calibrate' finds a λ that moves the output)"
            )
        for name in ("guidance", "amplify_factor", "keep_words"):
            if getattr(self, name) > MAX_STRENGTH:
                raise SteerError(f"`{name}` must be at most {MAX_STRENGTH:g}, got {getattr(self, name):g}")
        if not 0 <= self.instruction_contrast <= MAX_STRENGTH:
            gamma = self.instruction_contrast
            raise SteerError(f"`instruction_contrast` must be between 0 (off) and {MAX_STRENGTH:g}, got {gamma:g}")
        if not 0 <= self.push <= MAX_STRENGTH:
            raise SteerError(f"`push` must be between 0 (off) and {MAX_STRENGTH:g}, got {self.push:g}")
        if not 0 <= self.refusal <= 1:
            raise SteerError(f"`refusal` must be between 0 (off) and 1 (the whole direction), got {self.refusal:g}")
        parse_schedule(self.push_schedule)
        check_top_k_syntax(self.push_top_k, "push_top_k")
        if self.neutral not in NEUTRAL:
            raise SteerError(f"`neutral` {self.neutral!r} is not valid; choose one of {', '.join(NEUTRAL)}")
        if self.instruction_contrast > 0 and (self.contrast or self.guides):
            raise SteerError(
                "`instruction_contrast` cannot be combined with layer `contrast` or `guidance`; set those off "
                "(a `mode` edit on the instructed rows is allowed)"
            )
        if self.guides and self.contrast:
            raise SteerError(
                "`contrast` cannot be combined with `guidance` (the guided preset uses it); "
                "add `guidance` 0 or pick `preset` paper"
            )
        if self.guides and self.temperature > 0:
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
        unknown = sorted(set(merged) - {f.name for f in fields(cls)})
        if unknown:
            name = unknown[0]
            names = [f.name for f in fields(cls)]
            close = SYNONYMS.get(name) or next(iter(difflib.get_close_matches(name, names, n=1)), None)
            hint = f"did you mean `{close}`?" if close else f"the settings are {', '.join(names)}"
            raise SteerError(f"`{name}` is not a transfer setting; {hint}")
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

    @property
    def guides(self) -> bool:
        """Whether guidance acts: γ > 0 and something to guide (a neuron edit, a push or a refusal projection)."""
        return self.guidance > 0 and (self.mode != "prompt" or self.push > 0 or self.refusal > 0)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if isinstance(out["contrast_layers"], tuple):
            out["contrast_layers"] = list(out["contrast_layers"])
        return out


@dataclass(frozen=True)
class ProfileSettings:
    """How a profile was computed; stored in the profile so it can be reproduced. Each field is
    declared once (`setting`): `steer profile`'s options and a run config's `[profile]` keys come from it."""

    batch_size: int = setting(16, "Texts per forward pass while counting.", config="profile")
    max_length: int = setting(512, "Tokens per text; longer texts are cut.", config="profile")
    dtype: str = setting("float32", "The weights' dtype the counts were made with.")
    padding_side: str = setting("right", "Which side a batch is padded on (counts mask padding either way).")
    dedupe: bool = setting(False, "Drop repeated texts within a style.")
    limit: int | None = setting(None, "Use at most this many texts per style (the first ones).", config="profile")

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise SteerError(f"`batch_size` must be at least 1, got {self.batch_size}")
        if self.max_length < 1:
            raise SteerError(f"`max_length` must be at least 1, got {self.max_length}")
        if self.padding_side not in ("left", "right"):
            raise SteerError(f"padding side must be 'left' or 'right', got {self.padding_side!r}")
        if self.limit is not None and self.limit < 1:
            raise SteerError(f"`limit` must be at least 1, got {self.limit}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON view for artefact metadata."""
        return asdict(self)


def field_types(settings_class: Any = None) -> dict[str, Any]:
    """Each field's type, resolved (int, float, str, bool, a `Literal`, a union): what `coerce`
    converts to and what the CLI builds each recipe option's type from."""
    import typing

    return typing.get_type_hints(settings_class or TransferSettings)


_FIELD_TYPES = field_types()


def recipe_fields(preset: str, fields_: dict[str, Any]) -> dict[str, Any]:
    """A named preset's fields with `fields_` on top: the recipe `resolve` starts from, and what a
    tune candidate written as `{preset = …, …}` records."""
    if preset not in PRESETS:
        raise SteerError(f"`preset` {preset!r} is not valid; choose one of {', '.join(PRESETS)}")
    return {**PRESETS[preset], **fields_}
