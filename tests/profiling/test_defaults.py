"""A blind read's verdict beside a profile decides `steer transfer`'s default recipe per direction,
only for the profile it was read with; a damaged file is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from steer.cli import cli
from steer.errors import SteerError
from steer.profiling.defaults import defaults_path, read_default, write_read_defaults


def _mode(prof: Path, out: Path, source: str, target: str, *extra: str) -> tuple[str, str]:
    args = ["transfer", "-p", str(prof), "--from", source, "--to", target, "--max-new-tokens", "3", "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "--force", *extra, "hello there"])
    assert result.exit_code == 0, result.output
    return str(json.loads(out.read_text())["mode"]), result.output


def test_the_read_decides_the_default_of_its_direction_only(prof: Path, tmp_path: Path) -> None:
    entry = {"preset": "prompt", "read": "research/reads/x", "n": 20, "usable": {"prompt": 6, "rerank": 3}}
    write_read_defaults(prof, {"formal->informal": entry}, force=False)
    with pytest.raises(SteerError, match="--force"):
        write_read_defaults(prof, {"formal->informal": entry}, force=False)
    assert read_default(prof, "formal", "informal") == ("prompt", entry)
    out = tmp_path / "o.jsonl"
    mode, shown = _mode(prof, out, "formal", "informal")
    assert mode == "prompt" and "read better blind" in shown and "usable prompt 6/20, rerank 3/20" in shown
    assert _mode(prof, out, "formal", "informal", "--preset", "guided")[0] == "shift"  # asked for: kept (guided)
    assert _mode(prof, out, "informal", "formal")[0] == "shift"  # not read: guided, the default without a probe
    # a rebuilt profile is not the profile that was read
    prof.write_bytes(prof.read_bytes() + b" ")
    assert read_default(prof, "formal", "informal") is None


def test_a_damaged_or_foreign_defaults_file_is_one_line(prof: Path, tmp_path: Path) -> None:
    defaults_path(prof).write_text("{not json")
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "hello"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "is damaged" in result.output and "Traceback" not in result.output
    defaults_path(prof).write_text(json.dumps({"format": "other/9", "profile_sha256": "", "directions": {}}))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "has format 'other/9'" in result.output
    with pytest.raises(SteerError, match="a read chooses one of"):
        write_read_defaults(prof, {"formal->informal": {"preset": "guided"}}, force=True)
