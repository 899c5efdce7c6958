"""A run's artefacts (`steer.lab.artefacts`): a configured profile and its probe reused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import _config

from steer.cli import cli


def test_a_configured_profile_limit_reuses_the_profile_and_its_probe(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[profile] path` + `limit`: a profile `steer profile --limit N` made from the first N train
    texts (and the probe `steer probe` put beside it) are reused by `steer run` — nothing is
    profiled or fitted again — while the judges train on every train text."""
    import steer.profiling.probe
    import steer.profiling.profile

    cfg = _config(tmp_path, saved_model)
    data = tmp_path / "data"
    prof = tmp_path / "p.safetensors"
    made = CliRunner().invoke(cli, [
        "profile", "--model", str(saved_model), "--style", f"formal={data / 'train.formal.txt'}",
        "--style", f"informal={data / 'train.informal.txt'}", "--limit", "12", "-o", str(prof), "-q",
    ])  # fmt: skip
    assert made.exit_code == 0, made.output
    probed = CliRunner().invoke(cli, ["probe", str(prof), "-q"])
    assert probed.exit_code == 0, probed.output
    cfg.write_text(cfg.read_text() + f'[profile]\npath = "{prof}"\nlimit = 12\n')

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("profiled or fitted again although the configured profile and probe match")

    monkeypatch.setattr(steer.profiling.profile, "profile_styles", never)
    monkeypatch.setattr(steer.profiling.probe, "build_probe", never)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt,rerank", "-q"])
    assert result.exit_code == 0, result.output
    assert not (out / "profile.safetensors").exists() and not (out / "probe.safetensors").exists()
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["prompt", "rerank"] * 2
