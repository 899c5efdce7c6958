"""Prompt templates and prompts files (`steer.prompts`): checked before the model loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import files_in, refused, run, transfer_args
from conftest import one_line_error_exit_1 as one_line_error


# 7. bad --prompt / --prompts / --edit-layers are rejected before any model loads
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt", "Rewrite {txt}"], "unknown field {txt}"),
        (["--prompt", "Rewrite {text} {"], "not a valid template"),
        (["--prompt", "Rewrite this"], "must contain '{text}'"),
        (["--edit-layers", "1-x"], "--edit-layers"),
        (["--prompts", "{bad}"], "unknown field {who}"),
    ],
)
def test_bad_templates_fail_before_the_model_loads(
    tmp_path: Path, prof: Path, extra: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steer.model.loading

    bad = tmp_path / "prompts.toml"
    bad.write_text('default = "Rewrite {who}: {text}"\n')

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(steer.model.loading, "load_model", no_loading)
    one_line_error(run(*transfer_args(prof), *[a.replace("{bad}", str(bad)) for a in extra], "hello"), message)


# issue 43, case 14: a prompts TOML with a misspelt table, an unknown key or a key that is no direction
@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[pair]\n"formal->informal" = "Casual: {text}"\n', "unknown top-level table [pair]; the known ones are"),
        ('defualt = "Rewrite {text}"\n', "unknown top-level key 'defualt'; the known ones are default (a template)"),
        ('[pairs]\n"formal-informal" = "Casual: {text}"\n', "[pairs] key 'formal-informal' is not SOURCE->TARGET"),
        ('[openings]\n"formal" = "Sure: "\n', "[openings] key 'formal' is not SOURCE->TARGET or default"),
        ('pairs = "Casual: {text}"\n', "'pairs' must be a table ([pairs]) keyed SOURCE->TARGET"),
        ("[pairs]\n'formal->informal' = 3\n", "[pairs] 'formal->informal' must be a string, got int"),
    ],
)
def test_a_prompts_file_with_unknown_tables_or_keys_is_refused(
    tmp_path: Path, prof: Path, no_model: None, toml: str, message: str
) -> None:
    from steer.prompts import load_openings, load_prompts

    prompts = tmp_path / "prompts.toml"
    prompts.write_text(toml)
    before = files_in(tmp_path)
    out = tmp_path / "o.jsonl"
    refused(run(*transfer_args(prof), "--prompts", str(prompts), "-o", str(out), "hello"), f"{prompts}: {message}")
    assert files_in(tmp_path) == before
    assert "formal->informal" in load_prompts() and "default" in load_openings()  # the packaged file still loads


# D: a misspelt direction in a prompts file's [pairs], with no default to fall back on
def test_a_misspelt_prompt_pair_is_refused_before_loading(tmp_path: Path, prof: Path, no_model: None) -> None:
    prompts = tmp_path / "prompts.toml"
    prompts.write_text('[pairs]\n"formall->informal" = "Rewrite this casually: {text}"\n')
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "--prompts", str(prompts), "hey"),
        "has no [pairs] entry 'formal->informal' and no default, so the generic prompt would be used; its pairs are "
        "formall->informal",
    )
    assert files_in(tmp_path) == before


def test_a_prompts_file_with_a_default_or_the_pair_is_used(tmp_path: Path, prof: Path) -> None:
    for text in (
        '[pairs]\n"informal->formal" = "Formal: {text}"\n"formal->informal" = "Casual: {text}"\n',
        'default = "Rewrite it as {target}: {text}"\n[pairs]\n"informal->formal" = "Formal: {text}"\n',
    ):
        prompts = tmp_path / "prompts.toml"
        prompts.write_text(text)
        result = run(*transfer_args(prof), "--preset", "prompt", "--prompts", str(prompts), "hey")
        assert result.exit_code == 0, result.output
