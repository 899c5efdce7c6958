"""`steer run` / `steer tune` end to end on a tiny random model and a tiny config."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL

from steer.cli import cli
from steer.config import SteerError, probe_fit
from steer.profiling.probe import StyleProbe
from steer.runs.experiment import load_experiment
from steer.runs.rundir import RunDir


def _config(tmp_path: Path, model: Path, extra: str = "") -> Path:
    data = tmp_path / "data"
    data.mkdir(parents=True)
    (data / "train.formal.txt").write_text("\n".join(FORMAL * 4) + "\n")
    (data / "train.informal.txt").write_text("\n".join(INFORMAL * 4) + "\n")
    (data / "dev.formal.txt").write_text("\n".join(FORMAL[:3]) + "\n")
    (data / "dev.informal.txt").write_text("\n".join(INFORMAL[:3]) + "\n")
    (data / "refs.txt").write_text("\n".join(INFORMAL[:2] + [""]) + "\n")
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(f'''
name = "tiny"
model = "{model}"
data_dir = "{data}"
modes = ["prompt", "deactivate", "deactivate+contrast"]
metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]
[styles.formal]
train = "{{data_dir}}/train.formal.txt"
dev = "{{data_dir}}/dev.formal.txt"
[styles.informal]
train = "{{data_dir}}/train.informal.txt"
dev = "{{data_dir}}/dev.informal.txt"
[[directions]]
from = "formal"
to = "informal"
refs = ["{{data_dir}}/refs.txt"]
[[directions]]
from = "informal"
to = "formal"
[selection]
top_k = "10%"
method = "diff"
[contrast]
layers = "0-1"
beta = 0.5
[transfer]
max_new_tokens = 4
batch_size = 2
[tune]
candidates = ["guided", {{ mode = "deactivate", top_k = "5%" }}, {{ preset = "guided", strength = 3.0, alpha = 0.5 }}]
limit = 2
{extra}
''')
    return cfg


def test_run_writes_every_report_file_and_resumes(tmp_path: Path, saved_model: Path) -> None:
    cfg, out = _config(tmp_path, saved_model), tmp_path / "report"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    for name in ["results.json", "results.md", "samples.md", "chart.png", "profile.safetensors"]:
        assert (out / name).is_file(), name
    results = json.loads((out / "results.json").read_text())
    assert {"experiment", "model_id", "fingerprint", "classifier_heldout_accuracy", "rows", "tuned"} <= set(results)
    assert [(r["direction"], r["mode"]) for r in results["rows"]] == [
        (d, m) for d in ["formal-informal", "informal-formal"] for m in ["prompt", "deactivate", "deactivate+contrast"]
    ]
    first = results["rows"][0]["metrics"]
    assert {"n", "bleu", "self_bleu", "copy_rate", "accuracy", "ppl"} <= set(first) and first["n"] == 3
    assert "bleu" not in results["rows"][3]["metrics"]  # no references for informal → formal
    assert "| deactivate+contrast | deactivate diff 10% + contrast β=0.5 |" in (out / "results.md").read_text()
    outputs = sorted((out / "outputs").glob("*.jsonl"))
    assert len(outputs) == 6
    stamps = {p: p.stat().st_mtime_ns for p in outputs + [out / "profile.safetensors"]}
    again = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert "texts" not in again.stderr and "profiling" not in again.stderr  # nothing recomputed
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


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


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('modes = ["prompt", "magic"]', "unknown mode 'magic'"),
        ("[tune.x]\nbeta = [0.5]", "unknown \\[tune\\] key 'x'"),
        ('modes = ["prompt", "amplify+contrast", "paper+contrast"]', "unknown mode 'paper\\+contrast'"),
    ],
)
def test_bad_configs(tmp_path: Path, saved_model: Path, extra: str, message: str) -> None:
    cfg = _config(tmp_path, saved_model)
    text = cfg.read_text().replace('modes = ["prompt", "deactivate", "deactivate+contrast"]', extra)
    cfg.write_text(text)
    with pytest.raises(SteerError, match=message):
        load_experiment(cfg)
    with pytest.raises(SteerError, match="does not exist"):
        load_experiment(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("name = [")
    with pytest.raises(SteerError, match="not valid TOML"):
        load_experiment(tmp_path / "bad.toml")


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


def test_shipped_configs_parse(tmp_path: Path) -> None:
    """Every config in configs/ (and its per-model folders) parses, real corpora replaced by tiny
    files with the same names; a configured profile limit is kept."""
    import re
    import tomllib

    root = Path(__file__).resolve().parent.parent / "configs"
    for path in sorted(root.rglob("*.toml")):
        if path.name == "prompts.toml":
            continue
        data = tmp_path / path.relative_to(root).with_suffix("").as_posix().replace("/", "-")
        data.mkdir()
        for name in set(re.findall(r"\{data_dir\}/([\w.]+)", path.read_text())):
            columns = ["toxic", "neutral1", "neutral2", "neutral3", "archaic", "modern", "shakespearean"]
            body = (
                "\t".join(columns) + "\n" + "\t".join(["x"] * len(columns)) + "\n"
                if name.endswith(".tsv")
                else ("a line\n" * 2000)
            )
            (data / name).write_text(body)
        exp = load_experiment(path, data_dir=str(data))
        assert len(exp.directions) >= 1 and len(exp.train) == 2, path.name
        assert tomllib.loads(path.read_text())["name"] == exp.name
        assert exp.profile_settings.limit == tomllib.loads(path.read_text()).get("profile", {}).get("limit")


def test_bad_tune_candidates_are_named_when_the_config_is_read(tmp_path: Path, saved_model: Path) -> None:
    cases = [('"nope"', "`preset` 'nope' is not valid"), ("{ colour = 1 }", "unknown transfer setting")]
    for candidate, message in cases:
        cfg = _config(tmp_path / candidate[:3].strip('"{ '), saved_model)
        cfg.write_text(re.sub(r"candidates = .*", f"candidates = [{candidate}]", cfg.read_text()))
        with pytest.raises(SteerError, match=message):
            load_experiment(cfg)


def test_outputs_are_reused_across_labels_only_for_identical_settings(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from steer.generation.steerer import Steerer
    from steer.model.loading import load_model
    from steer.runs.runner import Runner

    exp = load_experiment(_config(tmp_path, saved_model))
    runner = Runner(exp, tmp_path / "out", load_model(str(saved_model), progress=False), progress=False)
    direction, settings = exp.directions[0], replace(exp.base, mode="deactivate")
    first = runner.rewrites.transfer(direction, settings, "a")
    calls: list[int] = []
    original = Steerer.transfer_candidates
    monkeypatch.setattr(
        Steerer, "transfer_candidates", lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    )
    assert runner.rewrites.transfer(direction, settings, "b") == first and calls == []
    assert (tmp_path / "out" / "outputs" / f"{direction.name}.b.jsonl").is_file()
    runner.rewrites.transfer(direction, replace(settings, top_k="5%"), "c")
    assert calls == [1]


def test_a_run_decodes_through_the_rewrite_service_with_all_its_training_texts(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`steer run` builds no rewriter of its own: its recipes decode through `RewriteService`, whose job
    names the run's training texts (all of them, beyond `[profile] limit`) for few-shot examples and
    keep-words — the same rewrites a service made by hand for that job gives (Ray workers get the job)."""
    from dataclasses import replace

    from steer.model.loading import load_model
    from steer.runs.runner import Runner
    from steer.runs.service import RewriteJob, RewriteService

    exp = load_experiment(_config(tmp_path, saved_model, "[profile]\nlimit = 3"))
    lm = load_model(str(saved_model), progress=False)
    runner = Runner(exp, tmp_path / "out", lm, progress=False)
    direction = exp.directions[0]
    recipe = replace(exp.base, mode="prompt", examples=2, keep_words=2.0)
    calls: list[int] = []
    original = RewriteService.candidates
    monkeypatch.setattr(RewriteService, "candidates", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    outputs = runner.rewrites.transfer(direction, recipe, "shots")
    assert calls == [1]
    corpora = runner.rewrites.service(direction).job.corpora
    assert corpora is not None and dict(corpora) == {s: tuple(t) for s, t in exp.train.items()}
    assert all(len(t) > 3 for _, t in corpora)  # beyond what was profiled
    job = RewriteJob(str(runner.artefacts.profile_file()), direction.source, direction.target, recipe, corpora=corpora)
    by_hand = RewriteService(job, loaded=(runner.artefacts.profile(), lm)).results(list(direction.texts))
    assert outputs == [r.output for r in by_hand]
    assert job.key()[-1] != replace(job, corpora=(("formal", ("x",)), ("informal", ("y",)))).key()[-1]


def test_tuning_texts_follow_the_evaluated_ones(tmp_path: Path, saved_model: Path) -> None:
    cfg = _config(tmp_path, saved_model)
    held_out = load_experiment(cfg, limit=1).directions[0]
    assert held_out.texts == tuple(FORMAL[:1]) and held_out.tune_texts == tuple(FORMAL[1:3])
    assert held_out.tune_references == (tuple(INFORMAL[1:2]) + (None,),) and not held_out.tune_overlaps
    too_few = load_experiment(cfg).directions[0]  # 3 dev texts, all evaluated: tuning has to reuse them
    assert too_few.tune_texts == tuple(FORMAL[:2]) and too_few.tune_overlaps


def test_tune_objective_prefers_kept_meaning_then_accuracy_then_similarity() -> None:
    from steer.runs.tuning import _objective

    prompt = {"accuracy": 0.3, "similarity": 0.6, "ppl": 40.0}
    lost = {"accuracy": 0.9, "similarity": 0.4, "ppl": 30.0}  # similarity 0.67× prompting's: not kept
    garbled = {"accuracy": 0.9, "similarity": 0.6, "ppl": 60.0}  # PPL 1.5×
    better = {"accuracy": 0.5, "similarity": 0.5, "ppl": 44.0}
    closer = {"accuracy": 0.5, "similarity": 0.55, "ppl": 44.0}
    ranked = sorted([lost, garbled, prompt, better, closer], key=lambda m: _objective(m, prompt, 0.8, 1.2))
    assert ranked[-1] is closer and ranked[-2] is better and ranked[-3] is prompt


def test_run_with_rerank_and_j(tmp_path: Path, saved_model: Path) -> None:
    """Mode `rerank` builds the probe, decodes the ladder, reports J and the chosen strengths."""
    cfg = _config(tmp_path, saved_model)
    text = cfg.read_text()
    text = text.replace('modes = ["prompt", "deactivate", "deactivate+contrast"]', 'modes = ["prompt", "rerank"]')
    text = text.replace('metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]', 'judge = "tfidf"')
    cfg.write_text(text + '[rerank]\nladder = [0, "u1", 2]\n')
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    rerank = [r for r in results["rows"] if r["mode"] == "rerank"]
    assert len(rerank) == 2 and (out / "probe.safetensors").is_file()
    for row in rerank:
        assert sum(row["rerank"]["chosen_strengths"].values()) == row["metrics"]["n"] == 3
        assert set(row["rerank"]["chosen_strengths"]) <= {"0", "u1", "2"}
        assert row["rerank"]["ladder"] == ["0", "u1", "2"]
        assert {"j", "repetition", "length", "empty", "accuracy"} <= set(row["metrics"])
    assert results["judge"] == "tfidf"
    # the λ = 0 rung is the prompt mode's outputs, reused; only u1 and 2 were decoded for rerank
    decoded = sorted(p.name for p in (out / "outputs").glob("*.rerank-strength=*.jsonl"))
    directions = ("formal-informal", "informal-formal")
    assert decoded == [f"{d}.rerank-strength={r}.jsonl" for d in directions for r in (2, "u1")]
    unguided = json.loads((out / "outputs" / "formal-informal.rerank-strength=u1.jsonl").read_text().splitlines()[0])
    assert unguided["settings"]["guidance"] == 0.0 and unguided["settings"]["strength"] == 1.0
    stamps = {p: p.stat().st_mtime_ns for p in (out / "outputs").glob("*strength*.jsonl")}
    again = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert again.exit_code == 0, again.output
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing decoded again
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]
    # a probe fitted with other settings (an older default) is fitted again; the rungs are only re-ranked
    probe_file = out / "probe.safetensors"
    assert StyleProbe.load(probe_file).fit == probe_fit()
    run_dir = RunDir.claim(out)
    replace(StyleProbe.load(probe_file), fit={"top": 512, "limit": 1000, "c": 1.0}).save(probe_file, force=True)
    run_dir.wrote(probe_file)  # as the older steer run that fitted it would have recorded it
    refit = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert refit.exit_code == 0, refit.output
    assert StyleProbe.load(probe_file).fit == probe_fit()
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]  # the same fit, refitted
    table = (out / "results.md").read_text()
    assert "Rerank chose" in table and "| J |" in table.replace("| mode | settings | J |", "| J |")
    assert "Rerank chose" in table and "(usable first; style probe held-out accuracy" in table
    assert [r["rerank"]["rung_weights"] for r in rerank] == [{}, {}]  # no 3k4 rung, no default weight
    assert all(r["rerank"]["usable_first"] for r in rerank)
    # another choice rule re-ranks the stored candidates: nothing is decoded again
    weighted = cfg.read_text().replace('ladder = [0, "u1", 2]', 'ladder = [0, "u1", 2]\nrung_weights = {"2" = 3.0}')
    cfg.write_text(weighted.replace("rung_weights", "usable_first = false\nrung_weights"))
    third = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert third.exit_code == 0, third.output
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["mode"] == "rerank"]
    assert [(r["rerank"]["rung_weights"], r["rerank"]["usable_first"]) for r in rows] == [({"2": 3.0}, False)] * 2
    assert "(2 × 3; style probe" in (out / "results.md").read_text()
    for line in (out / "outputs" / "formal-informal.rerank.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["rerank"]["candidates"][2]["weight"] == 3.0
    for table_line, message in (
        ('rung_weights = {"9" = 1.0}', "names rung '9'"),
        ('rung_weights = {"2" = "x"}', "finite number > 0"),
        ("rung_weights = 3", "must be a table"),
        ('usable_first = "yes"', "true or false"),
    ):
        cfg.write_text(weighted.replace('rung_weights = {"2" = 3.0}', table_line))
        with pytest.raises(SteerError, match=message):
            load_experiment(cfg)
    bad = weighted.replace('ladder = [0, "u1", 2]', "ladder = [-1]").replace('rung_weights = {"2" = 3.0}', "")
    cfg.write_text(bad)
    with pytest.raises(SteerError, match="`ladder`"):
        load_experiment(cfg)


def test_an_interrupted_run_resumes_per_batch_and_writes_what_a_whole_run_writes(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped after its first decoded batch keeps that batch in the label files' partial
    files; run again it decodes only the texts it had not, and the outputs are byte for byte those
    of a run never interrupted (rerank rungs decoded together included); no partial file remains."""
    from steer.generation.steerer import Steerer

    cfg = _config(tmp_path, saved_model, "[rerank]\nladder = [0, 1, 2]\n")
    cfg.write_text(cfg.read_text().replace('"deactivate", "deactivate+contrast"]', '"rerank"]'))
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert CliRunner().invoke(cli, ["run", str(cfg), "-o", str(whole), "-q"]).exit_code == 0
    decode_batch, decoded = Steerer._decode_batch, []

    def counting(self: Any, plan: Any, texts: Any, rows: list[int], *shared: Any) -> Any:
        if fail_after is not None and len(decoded) == fail_after:
            raise RuntimeError("killed mid-run")
        decoded.append(len(rows))
        return decode_batch(self, plan, texts, rows, *shared)

    monkeypatch.setattr(Steerer, "_decode_batch", counting)
    fail_after: int | None = 1
    stopped = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(cut), "-q"])
    assert stopped.exit_code != 0 and "killed mid-run" in str(stopped.exception)
    assert decoded == [2] and [p.name for p in (cut / "outputs").iterdir()] == ["formal-informal.prompt.jsonl.partial"]
    fail_after, decoded = None, []
    assert CliRunner().invoke(cli, ["run", str(cfg), "-o", str(cut), "-q"]).exit_code == 0
    # prompt: 1 of formal→informal's 3 texts left, then all 3 of informal→formal; rerank's rungs 1 and 2 together
    assert sum(decoded) == 1 + 3 + 3 + 3
    names = sorted(p.name for p in (whole / "outputs").iterdir())
    assert names == sorted(p.name for p in (cut / "outputs").iterdir()) and not any(".partial" in n for n in names)
    for name in names:
        assert (cut / "outputs" / name).read_bytes() == (whole / "outputs" / name).read_bytes(), name
    assert (cut / "results.md").read_text() == (whole / "results.md").read_text()


def test_the_run_store_key_is_one_function_with_a_format_version(monkeypatch: Any) -> None:
    """Every settings field is in the key (a field added later too), and the format version: a
    change that makes stored rewrites stale raises STORE_FORMAT instead of listing exceptions."""
    from dataclasses import fields, replace

    from steer.runs import store
    from steer.runs.experiment import Direction
    from steer.settings import TransferSettings

    direction = Direction("formal", "informal", ("a text",), ())
    base = TransferSettings.preset("guided")
    key = store._settings_key(base, direction)
    assert key.startswith(f"s{store.STORE_FORMAT}-")
    changed = {"keep_words": 2.0, "guidance": 2.5, "no_repeat_ngram": 3, "examples": 2, "strength": 3.0}
    assert {f.name for f in fields(TransferSettings)} >= set(changed)
    for name, value in changed.items():
        assert store._settings_key(replace(base, **{name: value}), direction) != key, name
    monkeypatch.setattr(store, "STORE_FORMAT", store.STORE_FORMAT + 1)
    assert store._settings_key(base, direction) != key


def test_a_run_directory_an_older_steer_stored_is_refused_in_one_line(tmp_path: Path, saved_model: Path) -> None:
    cfg = _config(tmp_path, saved_model)
    out = tmp_path / "run"
    assert CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt", "-q"]).exit_code == 0
    stored = out / "outputs" / "formal-informal.prompt.jsonl"
    lines = [json.loads(line) for line in stored.read_text().splitlines()]
    run_dir = RunDir.claim(out)
    stored.write_text("".join(json.dumps({**r, "key": r["key"].split("-", 1)[1]}) + "\n" for r in lines))
    run_dir.wrote(stored)  # as the older steer that stored it would have recorded it
    before = {p.name: p.read_bytes() for p in (out / "outputs").iterdir()}
    again = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt", "-q"])
    assert again.exit_code == 1, again.output
    assert "holds rewrites an older steer stored (another store format than" in again.output
    assert again.output.count("\n") == 1 and "Traceback" not in again.output, again.output
    assert {p.name: p.read_bytes() for p in (out / "outputs").iterdir()} == before


def test_an_edited_packaged_prompt_changes_the_key_of_its_direction_only(monkeypatch: Any) -> None:
    """Outputs stored with a packaged template's old wording are not reused once it is edited;
    directions whose template is unchanged keep their keys."""
    from steer import prompts
    from steer.runs import store
    from steer.runs.experiment import Direction
    from steer.settings import TransferSettings

    settings = TransferSettings.preset("guided")
    edited = Direction("modern", "shakespearean", ("a text",), ())
    kept = Direction("formal", "informal", ("a text",), ())
    before = store._settings_key(settings, edited), store._settings_key(settings, kept)
    packaged = prompts.load_prompts()
    changed = {**packaged, "modern->shakespearean": "Rewrite this line as Shakespeare would.\n\n{text}"}
    monkeypatch.setattr(prompts, "load_prompts", lambda path=None: changed)
    assert store._settings_key(settings, edited) != before[0]
    assert store._settings_key(settings, kept) == before[1]


def test_run_with_an_llm_judge_reports_its_rates_and_refuses_the_decoding_model(
    tmp_path: Path, saved_model: Path
) -> None:
    from conftest import JUDGE_WORDS, make_model, make_tokenizer

    judge_dir = tmp_path / "judge-model"
    make_model("llama", 5).save_pretrained(judge_dir)  # another llama: other weights, a tokenizer knowing the styles
    make_tokenizer(JUDGE_WORDS).save_pretrained(judge_dir)
    cfg = _config(tmp_path, saved_model)
    text = cfg.read_text().replace('modes = ["prompt", "deactivate", "deactivate+contrast"]', 'modes = ["prompt"]')
    cfg.write_text(text.replace('name = "tiny"', f'name = "tiny"\nllm_judge = "{judge_dir}"'))
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "results.json").read_text())["rows"]
    for row in rows:
        assert {"llm_style", "llm_meaning", "llm_fluency", "llm_usable"} <= set(row["metrics"])
        assert row["metrics"]["llm_judge"] == f"llm:{judge_dir}"
    assert "LLM-usable%" in (out / "results.md").read_text()  # the run's table shows the judge's columns
    cfg.write_text(text.replace('name = "tiny"', f'name = "tiny"\nllm_judge = "{saved_model}"'))
    with pytest.raises(SteerError, match="allow_same_model"):
        load_experiment(cfg)
    cfg.write_text(text.replace('name = "tiny"', 'name = "tiny"\nallow_same_model = true'))
    with pytest.raises(SteerError, match="there is no llm_judge"):
        load_experiment(cfg)


def test_a_configured_profile_limit_reuses_the_profile_and_its_probe(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[profile] path` + `limit`: a profile `steer profile --limit N` made from the first N train
    texts (and the probe `steer probe` put beside it) are reused by `steer run` — nothing is
    profiled or fitted again — while the judges train on every train text."""
    import steer.profiling.probe
    import steer.profiling.profile

    cfg = _config(tmp_path, saved_model)
    data = tmp_path / "data"
    prof = tmp_path / "p.safetensors"
    made = CliRunner().invoke(cli, [
        "profile", "--model", str(saved_model), "--style", f"formal={data / 'train.formal.txt'}",
        "--style", f"informal={data / 'train.informal.txt'}", "--limit", "12", "-o", str(prof), "-q",
    ])  # fmt: skip
    assert made.exit_code == 0, made.output
    probed = CliRunner().invoke(cli, ["probe", str(prof), "-q"])
    assert probed.exit_code == 0, probed.output
    cfg.write_text(cfg.read_text() + f'[profile]\npath = "{prof}"\nlimit = 12\n')

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("profiled or fitted again although the configured profile and probe match")

    monkeypatch.setattr(steer.profiling.profile, "profile_styles", never)
    monkeypatch.setattr(steer.profiling.probe, "build_probe", never)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--modes", "prompt,rerank", "-q"])
    assert result.exit_code == 0, result.output
    assert not (out / "profile.safetensors").exists() and not (out / "probe.safetensors").exists()
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["prompt", "rerank"] * 2
