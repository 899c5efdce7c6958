"""The recipe a rewrite runs, chosen one way for `steer transfer`, `steer serve` and `steer.rewrite`:
the preset a blind read of the profile chose for the direction (`<profile>.defaults.json`), else
steer-and-rerank when the profile has a style probe, else the default preset — then a `steer tune`
choice, then the fields the caller gave.

`recipe_for` reads only what the opened profile holds (its read defaults, whether a probe exists);
it loads no model, so every option is checked before one loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from steer.errors import SteerError
from steer.ladder import RERANK_OPTIONS, RerankSettings, parse_ladder, parse_rung_weights
from steer.rewriting.opened import OpenedProfile
from steer.settings import DEFAULT_PRESET, TransferSettings

RERANK = "rerank"


@dataclass(frozen=True)
class RerankOptions:
    """How rerank scores its ladder, as `steer transfer --ladder …` spells it; None: not given, so
    `RerankSettings`' default (declared there once)."""

    ladder: str | None = None
    length_weight: float | None = None
    style_exponent: float | None = None
    rung_weights: str | None = None
    usable_first: bool | None = None

    def given(self) -> dict[str, Any]:
        """The fields the caller set, as `RerankSettings` takes them (a ladder and rung weights parsed)."""
        out = {k: getattr(self, k) for k in RERANK_OPTIONS if getattr(self, k) is not None}
        if "ladder" in out:
            out["ladder"] = parse_ladder(out["ladder"])
        if "rung_weights" in out:
            out["rung_weights"] = parse_rung_weights(out["rung_weights"])
        return out


@dataclass(frozen=True)
class Recipe:
    """A chosen recipe: its settings, the rerank ladder around them (None: no rerank), and the
    `note` that says why, when the caller named no preset (None when they did)."""

    settings: TransferSettings
    rerank: RerankSettings | None = None
    preset: str = DEFAULT_PRESET
    note: str | None = field(default=None, compare=False)


def default_preset(opened: OpenedProfile | None, source: str, target: str) -> tuple[str, str | None]:
    """The preset for a caller who named none, and the one-line note that says why."""
    if opened is None or opened.path is None:
        return DEFAULT_PRESET, None
    profile_path = opened.path
    read = opened.read_default(source, target)
    if read is not None:  # a blind read of this profile chose the direction's default
        preset, entry = read
        usable, n = entry.get("usable", {}), entry.get("n", "?")
        return preset, (
            f"the recipe is --preset {preset}, which read better blind for {source} → {target} "
            f"({entry.get('read', 'a read')}: usable prompt {usable.get('prompt', '?')}/{n}, "
            f"rerank {usable.get('rerank', '?')}/{n}); pass --preset to choose another"
        )
    if opened.has_probe():
        return RERANK, None
    return DEFAULT_PRESET, (
        f"{profile_path} has no style probe, so the recipe is --preset {DEFAULT_PRESET}; "
        f"'steer probe {profile_path}' builds one and makes steer-and-rerank the default"
    )


# Fields that only act on the neuron edit: given with a recipe that has none, they would be ignored.
_EDIT_FIELDS = ("top_k", "method", "positions", "edit_layers", "guidance", "strength", "amplify_factor")


def _check_effective(settings: TransferSettings, given: dict[str, Any], *, defaulted: bool = False) -> None:
    """Refuse a field the user set that the chosen recipe ignores (`--preset prompt --guidance 3`,
    `--strength` without `--mode shift`): silently decoding without it would look like its effect.
    `defaulted`: the recipe is the direction's default (a read default), not one the user named."""
    ignored: str | None = None
    if settings.push == 0 and any(k in given for k in ("push_top_k", "push_gate", "push_schedule")):
        ignored = next(k for k in ("push_top_k", "push_gate", "push_schedule") if k in given)
        why = "it shapes the instruction push, and `push` is 0; add `push` (e.g. 1) or drop it"
    elif settings.mode == "prompt":
        # guidance also weakens a push or a refusal projection on the plain prompt
        acting = {"guidance"} if settings.push > 0 or settings.refusal > 0 else set()
        ignored = next((k for k in _EDIT_FIELDS if k in given and k not in acting), None)
        whose = " (this direction's read default)" if defaulted else ""
        why = f"the plain prompt{whose} edits no neurons; drop it, or choose a steering recipe (e.g. `preset` guided)"
    elif "strength" in given and settings.mode != "shift":
        ignored, why = "strength", f"it is λ of `mode` shift, and this recipe is `mode` {settings.mode}; drop it"
    elif "amplify_factor" in given and "amplify" not in settings.mode:
        why = f"it acts in `mode` amplify, and this recipe is `mode` {settings.mode}; drop it"
        ignored = "amplify_factor"
    if ignored is not None:
        raise SteerError(f"`{ignored}` {given[ignored]!r} has no effect here: {why}")


def _check_no_rerank_options(options: RerankOptions, preset: str | None, *, defaulted: bool) -> None:
    """Refuse rerank's scoring options on a recipe that does not rerank (`--ladder 0,2` where the
    direction's read default is the plain prompt): decoding without them would look like their effect."""
    spelt = {
        "ladder": f"--ladder {options.ladder}",
        "length_weight": f"--length-weight {options.length_weight or 0:g}",
        "style_exponent": f"--style-exponent {options.style_exponent or 0:g}",
        "usable_first": "--usable-first" if options.usable_first else "--score-only",
    }
    named = next((spelt[k] for k in spelt if getattr(options, k) is not None), None)
    if named is not None:
        whose = " (this direction's read default)" if defaulted else ""
        recipe = f"--preset {preset}" if preset is not None else "a --mode recipe"
        raise SteerError(
            f"{named} ranks rerank candidates, but the recipe is {recipe}{whose}; add --preset rerank or drop it"
        )


def recipe_for(
    opened: OpenedProfile | None,
    source: str,
    target: str,
    *,
    preset: str | None = None,
    tuned: dict[str, Any] | None = None,
    rerank: RerankOptions | None = None,
    keep_candidates: bool = False,
    **fields: Any,
) -> Recipe:
    """The recipe for `source` → `target` on this opened profile (None, or one held only in memory:
    no probe or read defaults). `preset` None with no `mode`, `tuned` or
    `strength`-free choice: `default_preset`. `tuned` is a `steer tune` choice's fields; `fields`
    are `TransferSettings` fields (None: the preset's)."""
    fields = {k: v for k, v in fields.items() if v is not None}
    mode, strength = fields.get("mode"), fields.get("strength")
    note = None
    if preset is None and mode is None and tuned is None:
        preset, note = default_preset(opened, source, target)
    reranking = preset == RERANK
    options = rerank or RerankOptions()
    if keep_candidates and not reranking:
        raise SteerError("--keep-candidates keeps rerank candidates; add --preset rerank")
    if options.rung_weights is not None and not reranking:
        raise SteerError("--rung-weights weighs rerank candidates; add --preset rerank")
    if not reranking:
        _check_no_rerank_options(options, preset, defaulted=note is not None)
    if reranking and mode is not None:
        raise SteerError("--preset rerank varies the guided recipe's λ; drop --mode")
    if reranking and strength is not None:
        raise SteerError(
            f"--strength {strength:g} has no effect under rerank, which tries each --ladder rung; "
            "use --ladder (e.g. 0,u0.5,1,3) or --preset guided"
        )
    settings = TransferSettings.resolve("guided" if reranking else preset, tuned, **fields)
    _check_effective(settings, fields, defaulted=note is not None)
    chosen = preset if preset is not None else (mode if tuned is None else "tuned")
    if not reranking:
        return Recipe(settings, None, str(chosen), note)
    ladder = RerankSettings(base=settings, **options.given())  # the ladder first
    if opened is None or opened.path is None:
        raise SteerError("--preset rerank needs the profile's style probe: pass the profile as a path, not an object")
    if not opened.has_probe():
        raise SteerError(f"--preset rerank needs the profile's style probe; build it with: steer probe {opened.path}")
    return Recipe(settings, ladder, RERANK, note)
