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


def test_a_trained_or_pushed_recipe_without_its_file_is_refused_before_the_model_loads(
    tmp_path: Path, saved_model: Path, prof: Path, no_model: None
) -> None:
    """`steer run` with mode trained (or a push candidate) checks the files beside the profile first."""
    cases = [
        ('modes = ["prompt", "trained"]', "", "needs `steer train` run on the profile first"),
        ('modes = ["prompt", "trained"]', f'[profile]\npath = "{prof}"', "needs p.trained.safetensors beside"),
        ('modes = ["prompt"]', f'[profile]\npath = "{prof}"', ""),  # a push among the tune candidates
    ]
    push = 'candidates = [{ preset = "prompt", push = 1.0 }]'
    for modes, extra, message in cases:
        folder = tmp_path / str(len(message))
        cfg = _config(folder, saved_model, extra)
        text = cfg.read_text(encoding="utf-8").replace('modes = ["prompt", "deactivate", "deactivate+contrast"]', modes)
        if not message:
            text = "\n".join(push if line.startswith("candidates = ") else line for line in text.splitlines())
        cfg.write_text(text, encoding="utf-8")
        result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(folder / "run"), "-q"])
        refused(result, message or "push and refusal need p.instruct.safetensors beside the profile")
