"""One way to build a rewriter: `steer.rewrite` / `open_rewriter` choose the recipe as `steer transfer`
does (read default, else rerank with a probe, else the default preset) and give the same records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from steer.cli import cli
from steer.errors import SteerError
from steer.generation.steerer import Steerer, TransferSettings
from steer.rewriting.opened import OpenedProfile
from steer.rewriting.recipe import recipe_for
from tests.conftest import FORMAL

FIELDS: dict[str, Any] = {"top_k": "10%", "max_new_tokens": 5}
CLI_FIELDS = ["--top-k", "10%", "--max-new-tokens", "5"]


def _cli_records(prof: Path, out: Path, texts: list[str], *extra: str) -> list[dict[str, Any]]:
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", *CLI_FIELDS, *extra]
    result = CliRunner().invoke(cli, [*args, "-q", "-o", str(out), *texts])
    assert result.exit_code == 0, result.output
    return [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]


def _probed(prof: Path) -> Path:
    built = CliRunner().invoke(cli, ["probe", str(prof), "--top", "16", "--allow-no-heldout", "-q"])
    assert built.exit_code == 0, built.output
    return prof


def test_the_python_api_gives_the_records_and_rewrites_of_steer_transfer_under_the_default(
    tmp_path: Path, prof: Path
) -> None:
    from steer import open_rewriter, rewrite

    _probed(prof)
    texts = FORMAL[:3]
    want = _cli_records(prof, tmp_path / "cli.jsonl", texts)
    assert all(r["mode"] == "rerank" for r in want)  # a profile with a probe: steer-and-rerank by default
    service = open_rewriter(prof, "formal", "informal", **FIELDS)
    got = [service.record(r).to_dict() for r in service.results(texts)]
    assert got == want
    assert rewrite(texts, prof, "formal", "informal", lm=service.lm, **FIELDS) == [r["output"] for r in want]
    # a blank text stays blank and the others keep their place
    spaced = rewrite(["", texts[0]], prof, "formal", "informal", lm=service.lm, **FIELDS)
    assert spaced == ["", want[0]["output"]]


def test_a_read_default_chooses_the_recipe_for_python_callers_as_for_the_cli(tmp_path: Path, prof: Path) -> None:
    from steer import open_rewriter
    from steer.profiling.defaults import write_read_defaults

    _probed(prof)
    write_read_defaults(prof, {"formal->informal": {"preset": "prompt", "n": 20, "usable": {}}}, force=False)
    # the read default is the plain prompt: --top-k would do nothing there, so it is refused, not ignored
    refused = CliRunner().invoke(cli, ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal",
                                       *CLI_FIELDS, "-q", FORMAL[0]])  # fmt: skip
    assert refused.exit_code == 1 and "--top-k '10%' has no effect here: the plain prompt" in refused.output
    with pytest.raises(SteerError, match="`top_k` '10%' has no effect here"):
        open_rewriter(prof, "formal", "informal", **FIELDS)
    prompt_fields = {"max_new_tokens": 5}
    out = tmp_path / "cli.jsonl"
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--max-new-tokens", "5", "-q", "-o"]
    assert CliRunner().invoke(cli, [*args, str(out), *FORMAL[:2]]).exit_code == 0
    want = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert all(r["mode"] == "prompt" for r in want)
    service = open_rewriter(prof, "formal", "informal", **prompt_fields)
    assert [service.record(r).to_dict() for r in service.results(FORMAL[:2])] == want
    asked = recipe_for(OpenedProfile.open(prof), "formal", "informal", preset="rerank", **FIELDS)  # a named preset wins
    assert asked.rerank is not None and asked.note is None


def test_an_unknown_style_is_refused_before_any_model_loads(prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import steer.rewriting.service as service

    def no_loading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(OpenedProfile, "load_model", no_loading)
    monkeypatch.setattr(service, "load_model", no_loading)
    with pytest.raises(SteerError, match="style 'pirate' is not in this profile; its styles: formal, informal"):
        service.open_rewriter(prof, "formal", "pirate", **FIELDS)


def test_rewrite_in_one_call_equals_the_steerer(lm_and_profile: tuple[Any, Any]) -> None:
    from steer import rewrite

    lm, profile = lm_and_profile
    texts = FORMAL[:3]
    got = rewrite(texts, profile, "formal", "informal", lm=lm, preset="guided", top_k="10%", max_new_tokens=6)
    settings = TransferSettings.preset("guided", top_k="10%", max_new_tokens=6)
    assert got == [r.output for r in Steerer(lm, profile).transfer(texts, "formal", "informal", settings)]
