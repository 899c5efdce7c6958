"""Tuning (`steer.lab.tuning`): its objective, tuned settings used by run and transfer, what it needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import _config, refused

from steer.cli import cli

# The tuning configs rank by the guards objective (accuracy within limits): their metrics have accuracy, not j.
GUARDS = 'objective = "guards"'


def test_tune_then_run_uses_presets_and_tuned_settings(tmp_path: Path, saved_model: Path) -> None:
    cfg, out = _config(tmp_path, saved_model, GUARDS), tmp_path / "report"
    cfg.write_text(cfg.read_text().replace('"deactivate", "deactivate+contrast"]', '"paper", "guided", "tuned"]'))
    early = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert early.exit_code == 1 and "mode 'tuned' needs tune results" in early.output
    result = CliRunner().invoke(cli, ["tune", str(cfg), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    tuned = json.loads((out / "tuned.json").read_text())
    assert set(tuned["chosen"]) == {"formal-informal", "informal-formal"}
    assert len(tuned["trials"]) == 2 * (1 + 3)  # prompt + three candidates per direction
    trial_settings = [t["settings"] for t in tuned["trials"]]
    assert {
        "mode": "shift",
        "top_k": "5%",
        "strength": 3.0,
        "guidance": 1.0,
        "alpha": 0.5,
        "positions": "generated",
    } in (trial_settings)
    run = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert run.exit_code == 0, run.output
    rows = {(r["direction"], r["mode"]): r["settings"] for r in json.loads((out / "results.json").read_text())["rows"]}
    for name, chosen in tuned["chosen"].items():
        assert chosen["settings"] in trial_settings
        assert all(rows[(name, "tuned")][k] == v for k, v in chosen["settings"].items())
    paper, guided = rows[("formal-informal", "paper")], rows[("formal-informal", "guided")]
    assert (paper["mode"], paper["method"], paper["contrast"], paper["beta"]) == ("deactivate", "paper", True, 1.0)
    assert (guided["mode"], guided["guidance"], guided["contrast"]) == ("shift", 1.0, False)
    assert guided["max_new_tokens"] == 4  # the config's generic fields still apply under a preset


def test_transfer_uses_tuned_settings_file(tmp_path: Path, saved_model: Path) -> None:
    cfg, out = _config(tmp_path, saved_model, GUARDS), tmp_path / "report"
    assert CliRunner().invoke(cli, ["tune", str(cfg), "-o", str(out), "-q"]).exit_code == 0
    head = ["transfer", "-p", str(out / "profile.safetensors"), "--from", "formal", "--to", "informal"]
    base = [*head, "-q", "--max-new-tokens", "2", "--settings", str(out / "tuned.json"), "-o"]
    result = CliRunner().invoke(cli, [*base, str(tmp_path / "a.jsonl"), "please reply"])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "a.jsonl").read_text())
    chosen = json.loads((out / "tuned.json").read_text())["chosen"]["formal-informal"]["settings"]
    assert all(record["settings"][k] == v for k, v in chosen.items())
    # an option given overrides the tuned file (one every recipe uses: the tuned one may be the plain prompt)
    explicit = CliRunner().invoke(cli, [*base, str(tmp_path / "b.jsonl"), "--no-repeat-ngram", "3", "please reply"])
    assert explicit.exit_code == 0, explicit.output
    assert json.loads((tmp_path / "b.jsonl").read_text())["settings"]["no_repeat_ngram"] == 3
    missing = CliRunner().invoke(cli, [*head, "--settings", str(tmp_path / "nope.json"), "x"])
    assert missing.exit_code == 1 and "does not exist" in missing.output


def test_tune_objective_prefers_kept_meaning_then_accuracy_then_similarity() -> None:
    from steer.lab.tuning import _objective

    prompt = {"accuracy": 0.3, "similarity": 0.6, "ppl": 40.0}
    lost = {"accuracy": 0.9, "similarity": 0.4, "ppl": 30.0}  # similarity 0.67× prompting's: not kept
    garbled = {"accuracy": 0.9, "similarity": 0.6, "ppl": 60.0}  # PPL 1.5×
    better = {"accuracy": 0.5, "similarity": 0.5, "ppl": 44.0}
    closer = {"accuracy": 0.5, "similarity": 0.55, "ppl": 44.0}
    ranked = sorted([lost, garbled, prompt, better, closer], key=lambda m: _objective(m, prompt, 0.8, 1.2))
    assert ranked[-1] is closer and ranked[-2] is better and ranked[-3] is prompt


# 4: tuning with objective J and no metric j (or guards and no accuracy) is refused before the model loads
def test_tuning_without_the_metric_it_ranks_by_is_refused(tmp_path: Path, saved_model: Path, no_model: None) -> None:
    cfg = _config(tmp_path, saved_model)  # metrics: accuracy, bleu, self-bleu, copy, ppl — no j
    out = tmp_path / "run"
    refused(CliRunner().invoke(cli, ["tune", str(cfg), "-o", str(out)]), "tuning's objective 'j' needs metric 'j'")
    refused(CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--tune"]), "add 'j' to metrics")
    assert not out.exists()


# 4: the guards objective without the metrics it guards with: said in a warning before the model loads
@pytest.mark.parametrize(("metrics", "missing"), [('["accuracy", "ppl"]', "similarity"),
                                                  ('["accuracy", "similarity"]', "ppl")])  # fmt: skip
def test_guards_without_the_metrics_they_guard_with_are_warned_about(
    tmp_path: Path, saved_model: Path, metrics: str, missing: str, caplog: pytest.LogCaptureFixture
) -> None:
    from steer.lab.experiment import load_experiment
    from steer.lab.tuning import check_tunable

    cfg = _config(tmp_path, saved_model, extra='objective = "guards"')  # inside its [tune] table
    every = 'metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]'
    cfg.write_text(cfg.read_text().replace(every, f"metrics = {metrics}"))
    with caplog.at_level("WARNING", logger="steer.lab.tuning"):
        check_tunable(load_experiment(cfg))
    assert f"'guards' will not check {missing}" in caplog.text and f"add '{missing}' to metrics" in caplog.text
