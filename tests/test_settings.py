"""Each transfer setting is written once (`steer.settings.setting`: default, help, config key) and
reaches the CLI, run configs and records from there — shown for every existing field and for a
field added to a settings class in the test; presets, and values refused before any model loads."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from conftest import files_in, refused, run, transfer_args
from conftest import one_line_error_exit_1 as one_line_error

from steer.cli import cli
from steer.cli.app import recipe_options
from steer.errors import SteerError
from steer.settings import TransferSettings, config_fields, setting


def options_of(command: click.Command) -> dict[str, click.Option]:
    return {p.name: p for p in command.params if isinstance(p, click.Option) and p.name}


def test_every_setting_is_a_transfer_option_with_no_default_of_its_own() -> None:
    options = options_of(cli.commands["transfer"])
    for f in fields(TransferSettings):
        assert f.name in options, f"steer transfer has no option for `{f.name}`"
        option = options[f.name]
        assert option.default is None  # the preset, recorded recipe or field default decides
        assert option.help is not None and option.help.startswith(f.metadata["help"])
        assert "--" + f.name.replace("_", "-") in option.opts
    export = options_of(cli.commands["export"])
    assert {"mode", "top_k", "method", "strength"} <= set(export) and "guidance" not in export


def test_a_field_added_once_reaches_the_cli_the_config_keys_and_the_records() -> None:
    @dataclass(frozen=True)
    class Extended(TransferSettings):
        bananas: int = setting(3, "How many bananas.", config="transfer")

    @click.command()
    @recipe_options(settings_class=Extended)
    def command(**given: object) -> None:
        click.echo(json.dumps(given))

    options = options_of(command)
    assert options["bananas"].type is click.INT and options["bananas"].help == "How many bananas. [default: 3]"
    got = json.loads(CliRunner().invoke(command, ["--bananas", "5", "--no-clean"]).output)
    assert got["bananas"] == 5 and got["clean"] is False and got["top_k"] is None
    assert config_fields(Extended)["bananas"] == ("transfer", "bananas")
    assert Extended(bananas=5).to_dict()["bananas"] == 5  # records store `to_dict()`


def test_run_configs_accept_every_field_with_a_config_key(tmp_path: Path) -> None:
    from steer.lab.experiment import load_experiment

    for name in ("formal", "informal"):
        (tmp_path / f"{name}.txt").write_text("a text\nanother text\n")
    values = {"top_k": "2%", "method": "diff", "positions": "generated", "amplify_factor": 3,
              "strength": 2, "contrast_layers": "1-2", "alpha": 0.2, "beta": 0.5, "contrast_dtype": "float32",
              "no_repeat_ngram": 3, "max_new_tokens": 12, "max_input_tokens": 100, "batch_size": 4,
              "temperature": 0.0, "top_p": 0.9, "seed": 7, "prompt": "Rewrite: {text}", "opening": "",
              "examples": 2, "keep_words": 1.5, "instruction_contrast": 1.5, "neutral": "repeat",
              "push": 1.5, "push_top_k": "2%", "refusal": 0.5}  # fmt: skip
    assert set(values) == set(config_fields())
    tables: dict[str, list[str]] = {}
    for name, (table, key) in config_fields().items():
        tables.setdefault(table, []).append(f"{key} = {json.dumps(values[name])}")
    text = "\n".join(
        [
            "[styles.formal]", f'train = "{tmp_path}/formal.txt"', f'dev = "{tmp_path}/formal.txt"',
            "[styles.informal]", f'train = "{tmp_path}/informal.txt"', f'dev = "{tmp_path}/informal.txt"',
            *(line for table, lines in tables.items() for line in (f"[{table}]", *lines)),
        ]
    )  # fmt: skip
    config = tmp_path / "c.toml"
    config.write_text(text)
    base = load_experiment(config).base
    for name, value in values.items():
        assert getattr(base, name) == value, name
    assert isinstance(base.strength, float) and isinstance(base.amplify_factor, float)  # TOML 2 → 2.0


def test_transfer_help_lists_every_option_once_under_a_heading_by_purpose() -> None:
    from steer.cli.transfer import TRANSFER_SECTIONS

    options = options_of(cli.commands["transfer"])
    named = [name for _, names in TRANSFER_SECTIONS for name in names]
    assert sorted(named) == sorted(set(named))  # no option in two sections
    assert set(named) == set(options) - {"help"}  # every option in one; no stale name
    text = CliRunner().invoke(cli, ["transfer", "--help"]).output
    headings = [title for title, _ in TRANSFER_SECTIONS]
    positions = [text.index(f"{title}:") for title in [*headings, "Other options"]]
    assert positions == sorted(positions)
    assert text[positions[-1] :].split()[2:4] == ["-h,", "--help"]  # nothing but --help left unsorted
    for title, names in TRANSFER_SECTIONS:  # each option's flag is printed inside its own section
        start = text.index(f"{title}:")
        end = min((p for p in positions if p > start), default=len(text))
        for name in names:
            assert options[name].opts[0] in text[start:end], (title, name)


def test_rerank_and_profile_fields_are_declared_once_for_the_cli_and_run_configs(tmp_path: Path) -> None:
    """`RerankSettings` and `ProfileSettings` are single-sourced like `TransferSettings`: each CLI
    option is generated from its field (help, no default of its own), each run-config key comes
    from the field's declaration, and a config value reaches the settings while an unset one is
    the field's default."""
    from steer.lab.experiment import CONFIG_KEYS, load_experiment
    from steer.ladder import RERANK_OPTIONS, RerankSettings
    from steer.settings import ProfileSettings

    commands = {"transfer": (RerankSettings, RERANK_OPTIONS), "profile": (ProfileSettings, None)}
    for command, (cls, names) in commands.items():
        options = options_of(cli.commands[command])
        declared = [f for f in fields(cls) if f.metadata.get("help") and (names is None or f.name in names)]
        for f in declared:
            if names is None and f.name in ("dtype", "padding_side"):
                continue  # the model's own --dtype; padding is no user choice
            assert f.name in options and options[f.name].default is None, (command, f.name)
            assert (options[f.name].help or "").startswith(f.metadata["help"])
    assert "--score-only" in options_of(cli.commands["transfer"])["usable_first"].secondary_opts
    assert {key for _, key in config_fields(ProfileSettings).values()} | {"path"} == CONFIG_KEYS["profile"]
    for name in ("formal", "informal"):
        (tmp_path / f"{name}.txt").write_text("a text\nanother text\n")
    styles = [f'[styles.{s}]\ntrain = "{tmp_path}/{s}.txt"\ndev = "{tmp_path}/{s}.txt"' for s in ("formal", "informal")]
    config = tmp_path / "c.toml"
    config.write_text("\n".join([*styles, "[profile]", "max_length = 64", "[rerank]", "style_exponent = 0.25"]))
    exp = load_experiment(config)
    assert exp.profile_settings == ProfileSettings(max_length=64)  # batch_size: the field's default
    assert exp.rerank["style_exponent"] == 0.25 and exp.rerank["length_weight"] == RerankSettings.length_weight
    config.write_text("\n".join([*styles, "[rerank]", "colour = 1"]))
    valid = ", ".join(key for _, key in config_fields(RerankSettings).values())
    with pytest.raises(SteerError, match=f"unknown \\[rerank\\] key 'colour'; valid keys: {valid}"):
        load_experiment(config)


def test_rerank_options_given_are_the_ones_a_caller_set(tmp_path: Path) -> None:
    """None is "not given": the defaults stay `RerankSettings`'; a ladder equal to the default but given
    on a recipe that does not rerank is refused like any other rerank option."""
    from steer.ladder import RerankSettings
    from steer.rewriting.recipe import RerankOptions, recipe_for

    assert RerankOptions().given() == {}
    given = RerankOptions(ladder="0,u0.5", rung_weights="u0.5=2", usable_first=False).given()
    built = RerankSettings(**given)
    assert [str(r) for r in built.ladder] == ["0", "u0.5"] and built.rung_weights == {"u0.5": 2.0}
    assert not built.usable_first and built.style_exponent == RerankSettings.style_exponent
    default = ",".join(str(r) for r in RerankSettings.ladder)
    with pytest.raises(SteerError, match=f"--ladder {default} ranks rerank candidates, but the recipe is --preset"):
        recipe_for(None, "formal", "informal", preset="guided", rerank=RerankOptions(ladder=default))


def test_presets_fill_settings_and_explicit_fields_win() -> None:
    paper = TransferSettings.preset("paper")
    assert (paper.mode, paper.method, paper.top_k, paper.contrast, paper.beta) == (
        "deactivate",
        "paper",
        "1%",
        True,
        1.0,
    )
    guided = TransferSettings.preset("guided", strength=0.5)
    assert guided.guidance > 0 and guided.mode == "shift" and guided.strength == 0.5
    assert TransferSettings.preset("prompt").edits is False
    # the dataclass defaults are the default preset; a bare mode has no guidance and edits everywhere
    assert TransferSettings() == TransferSettings.preset("guided") == TransferSettings.resolve()
    bare = TransferSettings.resolve(mode="deactivate", contrast=True)
    assert (bare.guidance, bare.positions, bare.top_k, bare.contrast) == (0.0, "all", "1%", True)
    assert TransferSettings.bare(mode="shift") == TransferSettings.resolve(mode="shift")
    with pytest.raises(SteerError, match="`preset` 'nope' is not valid; choose one of prompt, paper, guided"):
        TransferSettings.preset("nope")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"guidance": -1.0}, "`guidance` must be"),
        ({"guidance": 1.0, "contrast": True}, "cannot be combined"),
        ({"guidance": 1.0, "temperature": 0.7}, "greedily"),
    ],
)
def test_bad_guidance_settings(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SteerError, match=message):
        TransferSettings.bare(**options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--min-new-tokens", "-1"], "--min-new-tokens must be ≥ 0 (0 is off), got -1"),
        (["--min-new-tokens", "50", "--max-new-tokens", "4"], "--min-new-tokens 50 is more than --max-new-tokens 4"),
    ],
)
def test_min_new_tokens_is_checked_before_the_model_loads(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch, options: list[str], message: str
) -> None:
    """Issue 43, cases 6 and 18: one line, exit 1, no model loaded, no file written."""
    from steer.model import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    out = tmp_path / "o.jsonl"
    one_line_error(run(*transfer_args(prof), *options, "-o", str(out), "hello"), message)
    assert not out.exists()


# issue 43, cases 6 and 18: --min-new-tokens below 0, or above --max-new-tokens
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--min-new-tokens", "-1"], "--min-new-tokens must be ≥ 0 (0 is off), got -1"),
        (["--min-new-tokens", "50", "--max-new-tokens", "4"], "--min-new-tokens 50 is more than --max-new-tokens 4"),
    ],
)
def test_min_new_tokens_below_zero_or_above_the_maximum_is_refused(
    tmp_path: Path, prof: Path, no_model: None, options: list[str], message: str
) -> None:
    out = tmp_path / "o.jsonl"
    out.write_text("an earlier output\n")
    before = files_in(tmp_path)
    refused(run(*transfer_args(prof), *options, "-o", str(out), "--force", "hello"), message)
    assert files_in(tmp_path) == before
