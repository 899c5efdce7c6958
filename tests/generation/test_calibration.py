"""Steering strength calibrated per model (`steer.generation.calibration`): one unit of λ pushes the
first reply token by the same KL on any model, is recorded in the profile, and does not depend on the
scale of the profile's activations."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import FORMAL, INFORMAL, make_lm, toy_profile

from steer.errors import SteerError
from steer.generation.calibration import REFERENCE_LAMBDA, DirectionKL, calibrate
from steer.generation.steerer import Steerer, TransferSettings
from steer.profiling.profile import ActivationCounts, StyleProfile

TEXTS = {"formal": FORMAL, "informal": INFORMAL}


def _scaled(profile: StyleProfile, factor: float) -> StyleProfile:
    """The same profile with every activation sum (so every mean and Δ) multiplied by `factor`."""
    counts = {
        s: ActivationCounts(s, c.fired, c.sums * factor, c.num_tokens, c.num_texts) for s, c in profile.counts.items()
    }
    return replace(profile, counts=counts)


def test_no_shift_is_no_push_and_a_bigger_shift_pushes_further() -> None:
    lm = make_lm("llama")
    kl = DirectionKL(Steerer(lm, toy_profile(lm)), FORMAL, "formal", "informal")
    assert kl(0.0) == 0.0
    pushes = [kl(strength) for strength in (0.5, 2.0, 8.0)]
    assert 0 < pushes[0] < pushes[1] < pushes[2]


def test_a_profile_whose_activations_are_scaled_gets_the_same_edits() -> None:
    """Δ scales by c, so the calibrated λ per unit scales by 1/c and every calibrated edit is the same."""
    lm = make_lm("llama")
    profile = toy_profile(lm)
    plain = replace(profile, calibration=calibrate(lm, profile, TEXTS))
    scaled = _scaled(profile, 8.0)
    scaled = replace(scaled, calibration=calibrate(lm, scaled, TEXTS))
    assert set(plain.calibration) == {"formal>informal", "informal>formal"}
    for key, value in plain.calibration.items():
        assert scaled.calibration[key] * 8.0 == pytest.approx(value, rel=2e-3)
    recipe = TransferSettings.preset("guided", strength=2.0)
    for source, target in (("formal", "informal"), ("informal", "formal")):
        a = Steerer(lm, plain).build_edit(source, target, recipe)
        b = Steerer(lm, scaled).build_edit(source, target, recipe)
        assert torch.equal(a.mask, b.mask)
        torch.testing.assert_close(a.shift, b.shift, rtol=2e-3, atol=0)


def test_calibrated_units_reach_the_reference_push() -> None:
    """Each direction's recorded value × REFERENCE_LAMBDA is the λ whose push is the target KL."""
    lm = make_lm("llama")
    profile = toy_profile(lm)
    units = calibrate(lm, profile, TEXTS, kl=0.05)
    raw = Steerer(lm, profile)
    for key, value in units.items():
        source, target = key.split(">")
        chosen = TEXTS[source]
        assert DirectionKL(raw, chosen, source, target)(value * REFERENCE_LAMBDA) == pytest.approx(0.05, rel=1e-2)


def test_the_shift_is_lambda_in_the_profiles_unit(tmp_path: Path) -> None:
    lm = make_lm("llama")
    profile = toy_profile(lm)
    assert profile.unit() == 1.0  # uncalibrated: λ as given
    calibrated = replace(profile, calibration={"formal>informal": 0.5, "informal>formal": 2.0 / 9})
    assert calibrated.unit() == pytest.approx(math.sqrt(0.5 * 2 / 9))
    recipe = TransferSettings.preset("guided", strength=3.0)
    a = Steerer(lm, profile).build_edit("formal", "informal", recipe)
    b = Steerer(lm, calibrated).build_edit("formal", "informal", recipe)
    torch.testing.assert_close(b.shift, a.shift * calibrated.unit())
    path = calibrated.save(tmp_path / "c.safetensors")
    assert StyleProfile.load(path).calibration == calibrated.calibration


def test_a_corrupt_calibration_is_one_line(tmp_path: Path) -> None:
    lm = make_lm("llama")
    for bad in ({"formal>informal": -1.0}, {"formal>informal": float("inf")}, {"formal>informal": "x"}):
        path = replace(toy_profile(lm), calibration=bad).save(tmp_path / "bad.safetensors", force=True)
        with pytest.raises(SteerError, match="calibration metadata is corrupt"):
            StyleProfile.load(path)


@pytest.mark.parametrize("effect", ["saturates", "too_strong"])
def test_a_kl_that_cannot_be_reached_records_what_was_reached_with_a_warning(
    effect: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind a norm after the MLP (Gemma 2) the shift's effect levels off below the target KL: the
    λ where it levelled off is recorded and the warning names --no-calibrate, in a few steps."""
    import steer.generation.calibration as calibration

    calls: list[float] = []

    class Fake:
        def __init__(self, *_: object) -> None:
            pass

        def __call__(self, strength: float) -> float:
            calls.append(strength)
            if effect == "saturates":
                return 0.13 * (1 - math.exp(-strength))  # levels off at 0.13 < 0.5
            return 1.0  # every λ passes the KL

    monkeypatch.setattr(calibration, "DirectionKL", Fake)
    found = calibration.calibrate_direction(None, ["x"], "formal", "informal")  # type: ignore[arg-type]
    assert found > 0 and math.isfinite(found)
    assert "--no-calibrate" in caplog.text and "formal → informal" in caplog.text
    if effect == "saturates":
        assert "levels off" in caplog.text and len(calls) < 12  # stopped at the plateau, not at λ = 1e6
    else:
        assert found < 1e-5


def test_steer_profile_keeps_its_counts_when_calibration_fails(
    monkeypatch: pytest.MonkeyPatch, saved_model: Path, corpus_files: tuple[Path, Path], tmp_path: Path
) -> None:
    from click.testing import CliRunner
    from conftest import profile_args

    import steer.generation.calibration as calibration
    from steer.cli import cli

    def fails(*_: object, **__: object) -> dict[str, float]:
        raise SteerError("no 'formal' texts to calibrate on")

    monkeypatch.setattr(calibration, "calibrate", fails)
    out = tmp_path / "kept.safetensors"
    args = [a for a in profile_args(saved_model, corpus_files) if a != "--no-calibrate"]
    result = CliRunner().invoke(cli, [*args, "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert "calibration failed" in result.output and "--no-calibrate" in result.output
    kept = StyleProfile.load(out)
    assert kept.calibration == {} and kept.counts["formal"].num_texts == len(FORMAL)


def test_opt_profiles_with_calibration_on_its_flattened_activations(tmp_path: Path) -> None:
    """OPT runs its MLP on [batch * seq, neurons]: the edit finds the batch's shape from the block,
    so `positions` generated (calibration, guided) works."""
    from conftest import make_lm

    lm = make_lm("opt")
    assert lm.flat
    units = calibrate(lm, toy_profile(lm), TEXTS, per_direction=2)
    assert set(units) == {"formal>informal", "informal>formal"} and all(v > 0 for v in units.values())
