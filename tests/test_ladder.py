"""Rung weights of the rerank ladder (`steer.ladder`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import refused

from steer.cli import cli
from steer.errors import SteerError
from steer.ladder import RerankSettings, parse_rung_weights


def test_rung_weights_resolve_check_and_key() -> None:
    assert RerankSettings().rung_weights == {"2k4": 1.3, "4k4": 1.3}  # 1.3 on each keep-words rung
    assert RerankSettings(ladder=(0, 1, 3)).rung_weights == {}  # none in a ladder without one
    assert RerankSettings(ladder=(0, "u1k2")).rung_weights == {"u1k2": 1.3}
    weighted = RerankSettings(ladder=(0, 1, "3k4"), rung_weights={"1.0": 0.5, "3K4": 2})
    assert weighted.rung_weights == {"1": 0.5, "3k4": 2.0}
    assert [weighted.weight(k) for k in range(3)] == [1.0, 0.5, 2.0]
    assert parse_rung_weights(" 3k4=1.3, 1=0.9 ,") == {"3k4": 1.3, "1": 0.9}
    for bad in ("3k4", "3k4=x", "3k4=nan", "=1"):
        with pytest.raises(SteerError, match="RUNG=NUMBER|rung weight"):
            RerankSettings(rung_weights=parse_rung_weights(bad))
    with pytest.raises(SteerError, match="does not have; weigh one of 0, u0.5, 3, 2k4, 4k4"):
        RerankSettings(rung_weights={"2": 1.5})
    for value in (0, -1, float("nan"), float("inf"), "x"):
        with pytest.raises(SteerError, match="must be a finite number > 0"):
            RerankSettings(rung_weights={"4k4": value})
    # hashable and equal like other frozen settings (rung_weights is a dict)
    assert hash(RerankSettings()) == hash(RerankSettings(rung_weights={"4k4": 1.3, "2k4": 1.3}))
    assert RerankSettings() == RerankSettings(rung_weights={"4k4": 1.3, "2k4": 1.3})
    assert len({RerankSettings(), RerankSettings(usable_first=False), RerankSettings()}) == 2
    # every setting that changes the choice changes the run store's key
    keys = {
        json.dumps(s.choice_key())
        for s in (
            RerankSettings(),
            RerankSettings(rung_weights={"4k4": 1.0}),
            RerankSettings(usable_first=False),
            RerankSettings(style_exponent=1.0),
        )
    }
    assert len(keys) == 4
    # so does the set of faithfulness rules that bar a candidate: a stored rerank is chosen again
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("steer.ladder.SELECTION_RULES", ("empty", "meta", "near_loop", "junk", "invented"))
        assert json.dumps(RerankSettings().choice_key()) not in keys
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("steer.ladder.MILD_RULES", ())
        assert json.dumps(RerankSettings().choice_key()) not in keys


# 5: one rung weighed twice under two spellings (3 and 3.0)
def test_a_rung_weighed_twice_under_two_spellings_is_refused(prof: Path, no_model: None) -> None:
    args = ["--preset", "rerank", "--ladder", "0,3", "--rung-weights", "3=2,3.0=4", "Hello."]
    result = CliRunner().invoke(cli, ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-q", *args])
    refused(result, "weigh rung 3 twice ('3.0' is the same rung)")
