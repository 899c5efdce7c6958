"""The package's shape: configuration, records and reports import without torch; `steer.generation.steerer` is
the module (the one call is `steer.rewrite`); the import-linter contract holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_settings_config_and_report_import_without_torch() -> None:
    code = (
        "import sys\n"
        "import steer, steer.settings, steer.prompts, steer.lab.tables, steer.rewriting.records\n"
        "from steer import __version__, TransferSettings\n"
        "TransferSettings(examples=2)\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:3]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_the_transfer_module_is_not_shadowed_and_public_names_resolve() -> None:
    import steer
    import steer.generation.attach
    import steer.generation.steerer as module
    import steer.rewriting.service

    assert steer.generation.steerer is module
    assert steer.rewrite is steer.rewriting.service.rewrite and steer.apply is steer.generation.attach.apply
    assert steer.open_rewriter is steer.rewriting.service.open_rewriter
    assert steer.Steerer is module.Steerer
    assert set(steer.__all__) <= set(dir(steer))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        steer.nothing  # noqa: B018


def test_the_layering_contract_holds() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(lint).exists():
        pytest.fail("lint-imports is missing: install the dev extra (pip install -e '.[dev]'), as `make install` does")
    done = subprocess.run([lint], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "0 broken" in done.stdout
