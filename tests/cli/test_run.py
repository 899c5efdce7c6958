"""`steer run`'s command line: options checked before the model loads."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from conftest import _config, refused

from steer.cli import cli


# 10: a mode named twice in --modes is blamed on --modes, not on the config
def test_a_mode_named_twice_on_the_command_line_names_the_option(
    tmp_path: Path, saved_model: Path, no_model: None
) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt,prompt"])
    refused(result, "--modes prompt,prompt gives mode 'prompt' twice")
    assert not out.exists()
