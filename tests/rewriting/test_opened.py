"""One opened profile per rewrite: `steer transfer` reads the profile and its probe once and hashes
the profile once, from its first check to the last record (`steer.rewriting.opened.OpenedProfile`)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from steer.cli import cli
from steer.files import sha256_file
from steer.profiling.probe import StyleProbe
from steer.profiling.profile import StyleProfile
from steer.rewriting.opened import OpenedProfile
from tests.conftest import FORMAL


def _count_opens(monkeypatch: pytest.MonkeyPatch, prof: Path) -> Counter[str]:
    """Counts of reads of the profile, of its probe and of hashes of the profile, wherever they happen."""
    opens: Counter[str] = Counter()
    load_profile, load_probe = StyleProfile.load.__func__, StyleProbe.load.__func__  # type: ignore[attr-defined]

    def profile_load(cls: Any, path: Any) -> Any:
        opens["profile"] += Path(path).resolve() == prof.resolve()
        return load_profile(cls, path)

    def probe_load(cls: Any, path: Any) -> Any:
        opens["probe"] += 1
        return load_probe(cls, path)

    def hashed(path: Any) -> str:
        opens["sha256"] += Path(path).resolve() == prof.resolve()
        return sha256_file(path)

    monkeypatch.setattr(StyleProfile, "load", classmethod(profile_load))
    monkeypatch.setattr(StyleProbe, "load", classmethod(probe_load))
    for name, module in list(sys.modules.items()):  # every module that imported the hash by name
        if name.startswith("steer") and getattr(module, "sha256_file", None) is sha256_file:
            monkeypatch.setattr(module, "sha256_file", hashed)
    return opens


@pytest.mark.parametrize("preset", ["rerank", "guided"])
def test_steer_transfer_opens_and_hashes_the_profile_and_probe_once(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch, preset: str
) -> None:
    built = CliRunner().invoke(cli, ["probe", str(prof), "--top", "16", "--allow-no-heldout", "-q"])
    assert built.exit_code == 0, built.output
    import steer.rewriting.service  # noqa: F401  (imported before counting, so its names are patched too)

    opens = _count_opens(monkeypatch, prof)
    out = tmp_path / "out.jsonl"
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--preset", preset]
    result = CliRunner().invoke(
        cli, [*args, "--top-k", "10%", "--max-new-tokens", "4", "-q", "-o", str(out), *FORMAL[:2]]
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2 and all(r["profile_sha256"] == sha256_file(prof) for r in records)
    assert opens["profile"] == 1 and opens["sha256"] == 1
    assert opens["probe"] == (1 if preset == "rerank" else 0)


def test_an_opened_profile_reads_nothing_until_asked(tmp_path: Path) -> None:
    """A check that needs no profile (an option's syntax) comes first: opening a missing file is not an error."""
    opened = OpenedProfile.open(tmp_path / "missing.safetensors")
    assert not opened.has_probe() and opened.read_default("a", "b") is None
    with pytest.raises(Exception, match="does not exist"):
        opened.profile  # noqa: B018
