"""`steer serve`'s options and address, checked before anything loads."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from conftest import refused

from steer.cli import cli


def test_serve_checks_its_options_before_loading(prof: Path, tmp_path: Path) -> None:
    for args, message in (
        (["--port", "0"], "--port 0 is not a port"),
        (["--host", "not a host!"], "--host 'not a host!' is not an address"),
    ):
        result = CliRunner().invoke(cli, ["serve", "-p", str(prof), *args])
        assert result.exit_code == 1 and message in result.output, result.output
    missing = CliRunner().invoke(cli, ["serve", "-p", str(tmp_path / "none.safetensors")])
    assert missing.exit_code != 0 and "does not exist" in missing.output and "Traceback" not in missing.output


# 17: steer serve on an address it cannot listen on: one line before anything loads
def test_serve_on_an_address_it_cannot_listen_on_is_one_line(tmp_path: Path, prof: Path, no_model: None) -> None:
    result = CliRunner().invoke(cli, ["serve", "-p", str(prof), "--host", "999.1.1.1", "--port", "8766", "-q"])
    refused(result, "cannot listen on --host 999.1.1.1 --port 8766")
