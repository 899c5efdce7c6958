"""`steer calibrate` (and `steer profile`'s calibration): what it rewrites and what it keeps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from steer.cli import cli
from steer.profiling.profile import StyleProfile


def test_steer_profile_calibrates_and_steer_calibrate_rewrites_only_with_force(prof: Path) -> None:
    made = StyleProfile.load(prof)
    assert set(made.calibration) == {"formal>informal", "informal>formal"}
    before = prof.read_bytes()
    refused = CliRunner().invoke(cli, ["calibrate", str(prof)])
    assert refused.exit_code == 1 and "pass --force" in refused.output and "Traceback" not in refused.output
    assert prof.read_bytes() == before
    done = CliRunner().invoke(cli, ["calibrate", str(prof), "--force", "-q"])
    assert done.exit_code == 0, done.output
    again = StyleProfile.load(prof)
    assert again.calibration == pytest.approx(made.calibration, rel=1e-6)
    assert torch.equal(again.counts["formal"].sums, made.counts["formal"].sums)


# 8: steer calibrate rewrites the profile's file; the probe beside it (its counts unchanged) and read defaults
# that choose the plain prompt carry over to the new file, while a read that chose a steered recipe is said stale
@pytest.mark.parametrize("preset", ["prompt", "rerank"])
def test_calibrate_keeps_the_probe_and_plain_prompt_read_defaults(prof: Path, preset: str) -> None:
    from dataclasses import replace

    from steer.files import sha256_file
    from steer.profiling.defaults import read_default, write_read_defaults
    from steer.profiling.probe import StyleProbe, probe_path
    from steer.profiling.profile import StyleProfile

    stale = {"formal>informal": 5.0, "informal>formal": 5.0}  # so that calibrating changes the file
    replace(StyleProfile.load(prof), calibration=stale).save(prof, force=True)
    built = CliRunner().invoke(cli, ["probe", str(prof), "--top", "16", "--allow-no-heldout", "-q"])
    assert built.exit_code == 0, built.output
    entry = {"preset": preset, "read": "research/reads/x", "n": 20, "usable": {"prompt": 6, "rerank": 3}}
    write_read_defaults(prof, {"formal->informal": entry}, force=False)
    old = sha256_file(prof)
    done = CliRunner().invoke(cli, ["calibrate", str(prof), "--force", "-q"])
    assert done.exit_code == 0, done.output
    assert sha256_file(prof) != old and "kept the probe beside it" in done.output
    assert StyleProbe.load(probe_path(prof)).profile_sha256 == sha256_file(prof)
    if preset == "prompt":
        assert read_default(prof, "formal", "informal") == ("prompt", entry)
    else:
        assert read_default(prof, "formal", "informal") is None and "no longer apply" in done.output
