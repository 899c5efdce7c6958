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
