"""One rung of a rerank ladder — the plain prompt, the guided recipe at a strength, the same shift
without guidance, with few-shot examples or with the source's words kept — parsed from its
`--ladder` spelling (`0`, `1`, `u0.5`, `f1`, `3k4`) into the transfer recipe it decodes; and the
`--rung-weights` spelling (`3k4=1.3`) into a weight per rung.

Kept apart from the settings and torch-free, so a run config's `[rerank] ladder` is checked when
the config is read, before any model loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from steer.errors import SteerError
from steer.settings import TransferSettings


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
