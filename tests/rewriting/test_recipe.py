"""The recipe (`steer.rewriting.recipe`): the default policy, and options that would do nothing refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import _transfer, files_in, refused

from steer.cli import cli
from steer.errors import SteerError
from steer.rewriting.opened import OpenedProfile
from steer.rewriting.recipe import RerankOptions, recipe_for


def test_recipe_policy_without_a_probe_and_for_a_profile_in_memory(prof: Path) -> None:
    plain = recipe_for(OpenedProfile.open(prof), "formal", "informal")
    assert plain.rerank is None and plain.preset == "guided" and "has no style probe" in (plain.note or "")
    assert recipe_for(None, "formal", "informal").preset == "guided"
    assert recipe_for(OpenedProfile.open(prof), "formal", "informal", mode="deactivate").settings.mode == "deactivate"
    for kwargs, message in (
        ({"preset": "rerank"}, "needs the profile's style probe; build it with: steer probe"),
        ({"preset": "rerank", "mode": "shift"}, "drop --mode"),
        ({"preset": "guided", "keep_candidates": True}, "--keep-candidates keeps rerank candidates"),
        ({"preset": "guided", "rerank": RerankOptions(rung_weights="3=2")}, "--rung-weights weighs rerank"),
    ):
        with pytest.raises(SteerError, match=message):
            recipe_for(OpenedProfile.open(prof), "formal", "informal", **kwargs)
    with pytest.raises(SteerError, match="pass the profile as a path"):
        recipe_for(None, "formal", "informal", preset="rerank")


@pytest.mark.parametrize(
    ("option", "named"),
    [
        (["--ladder", "0,2"], "--ladder 0,2"),
        (["--style-exponent", "1"], "--style-exponent 1"),
        (["--length-weight", "0.3"], "--length-weight 0.3"),
        (["--score-only"], "--score-only"),
    ],
)
def test_rerank_options_where_the_read_default_is_the_plain_prompt_are_refused(
    tmp_path: Path, prof: Path, no_model: None, option: list[str], named: str
) -> None:
    from steer.profiling.defaults import write_read_defaults

    entry = {"preset": "prompt", "read": "research/reads/x", "n": 20, "usable": {"prompt": 6, "rerank": 3}}
    write_read_defaults(prof, {"formal->informal": entry}, force=False)
    out = tmp_path / "o.jsonl"
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(out), *option, "hello"]
    before = files_in(tmp_path)
    refused(
        CliRunner().invoke(cli, args),
        f"{named} ranks rerank candidates, but the recipe is --preset prompt (this direction's read default); "
        "add --preset rerank or drop it",
    )
    refused(
        CliRunner().invoke(cli, [*args, "--preset", "guided"]),
        f"{named} ranks rerank candidates, but the recipe is --preset guided; add",
    )
    assert files_in(tmp_path) == before


# 6, 21, 11: a --top-k of every neuron (an empty edit), amplify by 0, a rung weighed twice, empty specs: refused
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "paper", "--top-k", "{total}"], "--top-k '{total}' is not valid; give a count from 1 to"),
        (["--mode", "amplify", "--amplify-factor", "0"], "--amplify-factor must be > 0"),
        (["--preset", "rerank", "--ladder", "0,3", "--rung-weights", "3=2,3=4"], "weigh rung 3 twice"),
        (["--preset", "rerank", "--ladder", "0,,3"], "has an empty rung"),
        (["--preset", "rerank", "--rung-weights", ""], "name no rung"),
        (["--mode", "shift", "--edit-layers", ""], "--edit-layers is empty"),
    ],
)
def test_recipes_that_would_do_nothing_or_say_a_thing_twice_are_refused(
    tmp_path: Path, prof: Path, no_model: None, args: list[str], message: str
) -> None:
    from steer.profiling.profile import StyleProfile

    loaded = StyleProfile.load(prof)
    total = str(loaded.num_layers * loaded.num_neurons)
    result = CliRunner().invoke(cli, _transfer(prof, *[a.format(total=total) for a in args], "Hello."))
    refused(result, message.format(total=total))
