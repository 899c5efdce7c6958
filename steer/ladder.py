"""Rerank's settings: its ladder of rungs — the plain prompt, the guided recipe at a strength, the
same shift without guidance, with few-shot examples or with the source's words kept — parsed from
the `--ladder` spelling (`0`, `1`, `u0.5`, `f1`, `3k4`) into the transfer recipes it decodes, the
`--rung-weights` spelling (`3k4=1.3`) into a weight per rung, and the scoring's settings
(`RerankSettings`).

Kept apart from the reranker and torch-free, so a run config's `[rerank]` table is checked when the
config is read and the CLI builds its options, before torch or any model loads.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from steer.errors import SteerError
from steer.settings import TransferSettings, setting

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rung:
    """One candidate of a ladder: λ = 0 is the plain prompt; otherwise the base (guided) recipe at
    strength λ, or, unguided (`uλ`), the same shift without guidance — one decoded row per text
    instead of two, so a cheap and bolder candidate (above λ ≈ 1 it wrecks the text). A few-shot
    rung (`f0`, `f1`, `fu0.5`) is the same recipe with texts of the target style shown before the
    instruction (`TransferSettings.examples`; how many: `RerankSettings.examples`). A `kβ` suffix
    (`3k2`) favours the source's content words by β while decoding (`TransferSettings.keep_words`)."""

    strength: float
    guided: bool = True
    shots: bool = False
    keep: float = 0.0

    @classmethod
    def parse(cls, spec: Rung | float | int | str) -> Rung:
        """`2` or `"2"` → guided λ = 2; `"u0.5"` → unguided λ = 0.5; `0` → the plain prompt;
        `"f0"` → the plain prompt with examples, `"f1"` → guided λ = 1 with examples; `"3k2"` →
        guided λ = 3 with the source's content words favoured by β = 2."""
        if isinstance(spec, Rung):
            return spec
        text = str(spec).strip()
        body, marked, keep_text = text.lower().partition("k")
        shots = body.startswith("f")
        body = body[1:] if shots else body
        guided = not body.startswith("u")
        try:
            strength = float(body if guided else body[1:])
            keep = float(keep_text) if keep_text else 0.0
        except ValueError:
            strength = keep = math.nan
        if not (math.isfinite(strength) and math.isfinite(keep)) or strength < 0 or keep < 0 or (marked and not keep):
            raise SteerError(
                f"`ladder` rung {text!r} is not valid; use λ ≥ 0 for the guided recipe (0 = the plain prompt), "
                "uλ for the shift without guidance, an f in front for few-shot examples and kβ (β > 0) behind to "
                "favour the source's words, e.g. 0,u0.5,1,3,f0,3k2"
            )
        return cls(strength, guided or strength == 0, shots, keep)

    def __str__(self) -> str:
        body = ("f" if self.shots else "") + (f"{self.strength:g}" if self.guided else f"u{self.strength:g}")
        return body + (f"k{self.keep:g}" if self.keep else "")

    def recipe(
        self, base: TransferSettings, examples: int = 0, prompt: TransferSettings | None = None
    ) -> TransferSettings:
        """The rung's transfer recipe: for λ = 0 the plain prompt (`prompt`: a run's own prompt-mode
        recipe, so the rung shares its store key; default: the prompt preset on `base`), else `base`
        at λ (guidance off when unguided); `examples` texts of the target style shown for a few-shot
        rung, none otherwise; the rung's keep-words β (without one, the recipe's)."""
        shown = examples if self.shots else 0
        if self.shots and examples < 1:
            raise SteerError(f"`ladder` rung {self} shows examples, but `examples` is {examples}; set it ≥ 1")
        if self.strength == 0:
            if prompt is None:
                return TransferSettings.resolve(  # no push or refusal projection either: the plain prompt
                    "prompt", base=base, examples=shown, keep_words=self.keep or None, push=0.0, refusal=0.0
                )
            return replace(prompt, examples=shown, keep_words=self.keep or prompt.keep_words)
        guidance = None if self.guided else 0.0
        return TransferSettings.resolve(
            base=base,
            mode=base.mode,
            strength=self.strength,
            guidance=guidance,
            examples=shown,
            keep_words=self.keep or None,
        )

    @property
    def rows(self) -> int:
        """Decoded rows per text: two for a guided rung (unedited and edited), else one."""
        return 2 if self.guided and self.strength > 0 else 1


def parse_rung_weights(spec: str) -> dict[str, float]:
    """`"3k4=1.3,1=0.9"` → {"3k4": 1.3, "1": 0.9} (checked against a ladder by `RerankSettings`)."""
    weights: dict[str, float] = {}
    items = [x.strip() for x in spec.split(",")]
    while items and not items[-1]:  # a trailing comma
        items.pop()
    if not items:
        raise SteerError(f"rung weights {spec!r} name no rung; write e.g. 3k4=1.3 (or leave them out)")
    for item in items:
        if not item:
            raise SteerError(f"rung weights {spec!r} have an empty entry; write e.g. 3k4=1.3,1=0.9")
        rung, sep, value = item.partition("=")
        if rung.strip() in weights:
            raise SteerError(f"rung weights {spec!r} weigh rung {rung.strip()} twice; give each rung one weight")
        try:
            weights[rung.strip()] = float(value) if sep else math.nan
        except ValueError:
            weights[rung.strip()] = math.nan
        if not sep or not rung.strip() or not math.isfinite(weights[rung.strip()]):
            raise SteerError(f"rung weight {item!r} is not RUNG=NUMBER; write e.g. 3k4=1.3")
    return weights


MAX_TESTED_STRENGTH = 8.0  # rungs above this get a warning: the bench never went past λ = 4
# plain prompt; shift at λ = 0.5 without guidance; guided λ = 3; guided λ = 2 and 4 keeping words by β = 4
# (`steer.generation.keeping`): chosen on tuning texts with the selection side only (bench/rerank_pool.py;
# docs/decisions.md), leaving out unguided λ ≥ 1, whose outputs are often broken text that J does not catch
DEFAULT_LADDER = tuple(Rung.parse(x) for x in ("0", "u0.5", "3", "2k4", "4k4"))
# unless `rung_weights` is given, a keep-words rung's (kβ) score × this (chosen on tuning texts)
KEEP_WEIGHT = 1.3
# the faithfulness rules whose flag bars a candidate from beating a clean one (part of the run store's key);
# the mild ones bar it only from beating a candidate with no flag or mild flags only (`flag_level`)
SELECTION_RULES = ("empty", "meta", "near_loop", "junk", "invented", "dropped")
MILD_RULES = ("dropped",)
# The rerank fields a caller sets (`steer transfer --ladder …`); the rest keep `RerankSettings`' defaults.
RERANK_OPTIONS = ("ladder", "length_weight", "style_exponent", "rung_weights", "usable_first")


@dataclass(frozen=True)
class RerankSettings:
    """The candidate ladder (rungs of the guided recipe; λ = 0 the plain prompt) and the scoring."""

    # Each field but `base` is declared once here: `steer transfer`'s rerank options and a run config's
    # `[rerank]` keys are generated from these declarations (`steer.settings.setting`).
    ladder: tuple[Rung, ...] = setting(
        DEFAULT_LADDER,
        "rerank: the rungs to try: 0 = the plain prompt, λ = the guided recipe at strength λ (two decoded rows "
        "per text), uλ = the same shift without guidance (one row; bolder, wrecks text above λ ≈ 1); a kβ suffix "
        "(3k4) favours the source's content words by β while decoding, an f prefix shows few-shot examples.",
        config="rerank",
    )
    base: TransferSettings = TransferSettings.preset("guided")
    # off: on the tuning texts a length term lowered J
    length_weight: float = setting(
        0.0, "rerank: penalise candidates whose length strays from the source's (0 = off).", config="rerank"
    )
    # chosen on tuning texts by J with the selection judge (bench/rerank_pool.py)
    style_exponent: float = setting(
        0.5,
        "rerank: temper the style probe's probability (P^e, 0 < e ≤ 1) so similarity counts more.",
        config="rerank",
    )
    examples: int = setting(
        4, "Texts of the target style a few-shot rung (f0, f1, …) shows before the instruction.", config="rerank"
    )
    # rung → weight on its score; None: KEEP_WEIGHT on every keep-words rung (kβ) of the ladder
    rung_weights: dict[str, float] | None = setting(
        None,
        "rerank: multiply rungs' scores, e.g. 4k4=1.5,3=0.9 (rungs of --ladder; the ones not named weigh 1).",
        config="rerank",
        shown=f"{KEEP_WEIGHT:g} on every rung with a kβ suffix",
    )
    # a candidate the selection side reads as usable beats one it does not
    usable_first: bool = setting(
        True,
        "rerank: a candidate the probe reads as target style with MiniLM similarity ≥ 0.5 wins over one "
        "that is not, before the score decides (--score-only: the score alone, flagged candidates still last).",
        config="rerank",
        flag="--usable-first/--score-only",
    )

    def __post_init__(self) -> None:
        if not self.ladder:
            raise SteerError("`ladder` is empty; give one or more rungs, e.g. 0,u0.5,1,3")
        object.__setattr__(self, "ladder", tuple(Rung.parse(x) for x in self.ladder))
        seen = [str(r) for r in self.ladder]
        repeated = sorted({r for r in seen if seen.count(r) > 1})
        if repeated:
            raise SteerError(f"`ladder` repeats rung {repeated[0]}; give each rung once, e.g. 0,u0.5,1,3")
        strong = [str(r) for r in self.ladder if r.strength > MAX_TESTED_STRENGTH]
        if strong:
            logger.warning(
                "`ladder` rung %s is far beyond the strengths steer was measured with (λ ≤ %g): expect broken text",
                strong[0],
                MAX_TESTED_STRENGTH,
            )
        for name in ("length_weight", "style_exponent"):
            if not math.isfinite(getattr(self, name)):
                raise SteerError(f"`{name}` must be a finite number, got {getattr(self, name)}")
        if self.length_weight < 0:
            raise SteerError(f"`length_weight` must be ≥ 0, got {self.length_weight}")
        if not 0 < self.style_exponent <= 1:
            raise SteerError(f"`style_exponent` must be in (0, 1], got {self.style_exponent}")
        object.__setattr__(self, "rung_weights", self._weights())

    def __hash__(self) -> int:
        """Hashable like the other frozen settings, although `rung_weights` is a dict."""
        weights = tuple(sorted((self.rung_weights or {}).items()))
        return hash((self.ladder, self.base, self.length_weight, self.style_exponent, self.examples, weights,
                     self.usable_first))  # fmt: skip

    def _weights(self) -> dict[str, float]:
        """The rung weights as `{rung: weight}` (rungs spelt as the ladder spells them), checked:
        each names a rung of the ladder and is a finite number > 0."""
        names = [str(r) for r in self.ladder]
        if self.rung_weights is None:
            return {str(r): KEEP_WEIGHT for r in self.ladder if r.keep}
        weights: dict[str, float] = {}
        for key, value in dict(self.rung_weights).items():
            try:
                rung = str(Rung.parse(key))
            except SteerError:
                rung = str(key)
            if rung not in names:
                raise SteerError(
                    f"`rung_weights` names rung {key!r}, which the ladder {self.label} does not have; "
                    f"weigh one of {', '.join(names)}"
                )
            try:
                weight = float(value)
            except (TypeError, ValueError):
                weight = math.nan
            if not math.isfinite(weight) or weight <= 0:
                raise SteerError(f"`rung_weights` {rung}={value!r} must be a finite number > 0, e.g. {rung}=1.3")
            if rung in weights:  # `3` and `3.0` are one rung
                raise SteerError(
                    f"`rung_weights` weigh rung {rung} twice ({key!r} is the same rung); give it one weight"
                )
            weights[rung] = weight
        return weights

    def weight(self, k: int) -> float:
        """The weight on rung k's score (1 unless `rung_weights` names it)."""
        return (self.rung_weights or {}).get(str(self.ladder[k]), 1.0)

    def choice_key(self) -> list[Any]:
        """Everything that decides the choice among decoded candidates — these settings and the
        rules that bar a candidate (a run store's key: other weights or rules, another choice)."""
        choice = [self.length_weight, self.style_exponent, sorted((self.rung_weights or {}).items()), self.usable_first]
        return [*choice, list(SELECTION_RULES), list(MILD_RULES)]

    def candidates(self, prompt: TransferSettings | None = None) -> list[TransferSettings]:
        """One recipe per rung (`Rung.recipe`; `prompt`: the plain-prompt recipe of rung 0, e.g. a
        run's own prompt mode, so the rung shares its outputs)."""
        return [rung.recipe(self.base, self.examples, prompt=prompt) for rung in self.ladder]

    @property
    def label(self) -> str:
        """`"0,u0.5,3,2k4,4k4"`: the ladder as `--ladder` spells it."""
        return ",".join(str(r) for r in self.ladder)


def parse_ladder(spec: str) -> tuple[Rung, ...]:
    """`"0,u0.5,1,3k4"` → (plain prompt, unguided λ 0.5, guided λ 1, guided λ 3 keeping the source's words by β 4)."""
    items = spec.split(",")
    while items and not items[-1].strip():  # a trailing comma
        items.pop()
    if not all(x.strip() for x in items):
        raise SteerError(f"`ladder` {spec!r} has an empty rung; write e.g. 0,u0.5,3")
    return RerankSettings(ladder=tuple(Rung.parse(x) for x in items if x.strip())).ladder
