"""A run's plan: the recipe of each direction × mode — a preset or bare mode, `steer tune`'s choice
for `tuned`, and for `rerank` the ladder's rungs as ordinary recipes (so rungs decoded by another mode
or by tuning are found in the run store)."""

from __future__ import annotations

from pathlib import Path

from steer.lab.experiment import Direction, Experiment, mode_settings
from steer.ladder import RerankSettings
from steer.rewriting.records import TuneResult
from steer.settings import TransferSettings


def settings_for(
    exp: Experiment, mode: str, direction: Direction, tuned: TuneResult | None, tuned_file: Path
) -> TransferSettings:
    """The settings of a run mode for one direction (`tuned`: what `steer tune` chose, read from
    `tuned_file`); rerank's row records the guided recipe its rungs steer with."""
    if mode == "rerank":
        return mode_settings("guided", exp.base)
    chosen = tuned.settings_for(direction.name, tuned_file) if tuned is not None and mode == "tuned" else None
    return mode_settings(mode, exp.base, chosen)


def rerank_settings(exp: Experiment) -> RerankSettings:
    """The config's `[rerank]` table (checked when the config was read) on the guided recipe."""
    return RerankSettings(
        exp.rerank["ladder"],
        mode_settings("guided", exp.base),
        exp.rerank["length_weight"],
        exp.rerank["style_exponent"],
        exp.rerank.get("examples", RerankSettings.examples),
        exp.rerank.get("rung_weights"),
        exp.rerank.get("usable_first", RerankSettings.usable_first),
    )


def rung_recipes(exp: Experiment, settings: RerankSettings) -> list[TransferSettings]:
    """The recipe of every rung of the ladder (`steer.ladder.Rung`): λ = 0 the `prompt` mode's own
    recipe (the same store key as the prompt mode's outputs), else the `guided` preset at that
    strength, without guidance for an unguided rung."""
    return settings.candidates(prompt=mode_settings("prompt", exp.base))
