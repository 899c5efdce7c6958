"""What the sixth fresh-clone hostile pass (issue 43) and the fifth's leftovers found — each at the
level a user meets it: one line, the exit code, and every file there before unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_distributed import _whole_run
from test_experiment import _config
from test_fourth_pass import _with_append_hook
from test_hostile import METRICS, _write_run, files_in, refused
from test_hostile import no_model as no_model  # a fixture

from steer.cli import cli


# B3: the partial file removed, then the run interrupted before its next batch (Ctrl-C): the batches it
# finished are put back as it stops, so --resume still gives the uninterrupted file
def test_a_partial_file_removed_then_interrupted_keeps_every_finished_batch(
    tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    args, whole = _whole_run(tmp_path, saved_model, corpus_files)
    cut = tmp_path / "cut.jsonl"
    partial = cut.with_name("cut.jsonl.partial")

    def remove_then_stop() -> str:
        partial.unlink()
        return "stop"

    _with_append_hook(monkeypatch, {2: remove_then_stop})  # two batches of two written, then both lost
    assert CliRunner().invoke(cli, [*args, "-o", str(cut)]).exit_code == 130
    kept = [json.loads(line) for line in partial.read_text().splitlines()]
    assert "partial_of" in kept[0] and len(kept) == 1 + 2 * 2  # the header and the two finished batches
    monkeypatch.undo()
    resumed = CliRunner().invoke(cli, [*args, "-o", str(cut), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert cut.read_bytes() == whole.read_bytes()


def _transfer(prof: Path, *args: str) -> list[str]:
    return ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--max-new-tokens", "4", "-q", *args]


# 1: -o onto the input named with a :FIELD / :COLUMN selector is the input, with --force too
@pytest.mark.parametrize(("name", "body", "selector"), [("in.jsonl", '{"text": "Hello."}\n', "text"),
                                                       ("in.tsv", "text\nHello.\n", "text")])  # fmt: skip
def test_output_onto_the_input_named_with_a_selector_is_refused(
    tmp_path: Path, prof: Path, no_model: None, name: str, body: str, selector: str
) -> None:
    source = tmp_path / name
    source.write_text(body)
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, _transfer(prof, "-i", f"{source}:{selector}", "-o", str(source), "--force"))
    refused(result, "is the input (-i)")
    assert files_in(tmp_path) == before


# 2, 3, 20: steer report replaces only a trade-off chart it drew, checks it before writing anything, leaves the
# trade-off out (with a line saying why) when the tuning trials lack its metrics, and refuses a run with no rows
def test_report_never_replaces_a_users_chart_and_needs_the_tradeoff_metrics(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path / "run", METRICS)
    out = tmp_path / "doc.md"
    chart = tmp_path / "doc-tradeoff.png"
    chart.write_text("a user's picture\n")
    before = files_in(tmp_path)
    refused(CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out), "--force"]), "was not written by")
    assert files_in(tmp_path) == before
    chart.unlink()
    assert CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out)]).exit_code == 0
    assert chart.is_file() and "![trade-off" in out.read_text()
    again = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out), "--force"])
    assert again.exit_code == 0, again.output  # its own chart and document are replaced

    short = _write_run(tmp_path / "short", {"n": 2, "length": 1.0, "repetition": 0.0})
    result = CliRunner().invoke(cli, ["report", str(short), "-o", str(tmp_path / "short.md")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "short.md").read_text()
    assert "Not shown: the tuning trials were not scored with j, accuracy, similarity, ppl" in text
    assert not (tmp_path / "short-tradeoff.png").exists()

    results = run_dir / "results.json"
    data = json.loads(results.read_text())
    results.write_text(json.dumps({**data, "rows": []}))
    refused(CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(tmp_path / "e.md")]), "has no rows")


# 4: tuning with objective J and no metric j (or guards and no accuracy) is refused before the model loads
def test_tuning_without_the_metric_it_ranks_by_is_refused(tmp_path: Path, saved_model: Path, no_model: None) -> None:
    cfg = _config(tmp_path, saved_model)  # metrics: accuracy, bleu, self-bleu, copy, ppl — no j
    out = tmp_path / "run"
    refused(CliRunner().invoke(cli, ["tune", str(cfg), "-o", str(out)]), "tuning's objective 'j' needs metric 'j'")
    refused(CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out), "--tune"]), "add 'j' to metrics")
    assert not out.exists()


# 5, 7, 12, 13, 14: a config's text slice that selects nothing or counts backwards, a repeated mode, a model
# that is not a string: one line naming the file and the key when the config is read
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('train = "{data_dir}/train.formal.txt"', 'train = { path = "{data_dir}/train.formal.txt", start = 500 }'),
         "[styles.formal] train: {'path'"),
        (('train = "{data_dir}/train.formal.txt"', 'train = { path = "{data_dir}/train.formal.txt", stop = -1 }'),
         "[styles.formal] train: stop = -1 is not valid; give a line number ≥ 0"),
        (('dev = "{data_dir}/dev.formal.txt"', 'dev = { path = "{data_dir}/dev.formal.txt", start = 50 }'),
         "dev of formal→informal: {'path'"),
        (('dev = "{data_dir}/dev.formal.txt"', "dev = 5"), "dev of formal→informal: expected a path"),
        (('modes = ["prompt", "deactivate", "deactivate+contrast"]', 'modes = ["prompt", "prompt"]'),
         "gives mode 'prompt' twice"),
        (("model = ", "model = [0] #"), "model = [0] is not valid; give one model as a string"),
    ],
)  # fmt: skip
def test_config_slices_modes_and_model_are_checked_when_read(
    tmp_path: Path, saved_model: Path, no_model: None, change: tuple[str, str], message: str
) -> None:
    cfg = _config(tmp_path, saved_model)
    text = cfg.read_text()
    assert change[0] in text
    cfg.write_text(text.replace(change[0], change[1], 1))
    out = tmp_path / "run"
    refused(CliRunner().invoke(cli, ["run", str(cfg), "-o", str(out)]), message)
    assert not out.exists()


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


# 18: -o naming a folder (a trailing slash) or nothing is a usage error, and nothing is created
@pytest.mark.parametrize("output", ["newdir/", ""])
def test_an_output_that_names_a_folder_or_nothing_is_a_usage_error(
    tmp_path: Path, prof: Path, no_model: None, output: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, _transfer(prof, "-o", output, "Hello."))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ("names a folder" if output else "is empty") in result.output
    assert files_in(tmp_path) == before and not (tmp_path / "newdir").exists()


# 15, 16, 19: steer eval on a device, an LLM judge rate asked as a metric, a newer record or a non-string style
@pytest.mark.parametrize(
    ("record", "args", "message"),
    [
        (None, ["/dev/null"], "/dev/null is not a regular file"),
        (
            {"output": "hi"},
            ["--metrics", "llm-style"],
            "'llm-style' is one of the LLM judge's rates, not a metric name; add --judge llm",
        ),
        ({"output": "hi", "record_version": 99}, [], "this steer reads up to 1: upgrade steer"),
        ({"output": "hi", "target_style": 5}, [], "field 'target_style' is int, not a string"),
    ],
)
def test_eval_refuses_what_it_cannot_read_in_one_line(
    tmp_path: Path, no_model: None, record: dict | None, args: list[str], message: str
) -> None:
    path = tmp_path / "r.jsonl"
    if record is not None:
        path.write_text(json.dumps(record) + "\n")
        args = [str(path), *args]
    refused(
        CliRunner().invoke(cli, ["eval", *args, "--metrics", "length"] if "--metrics" not in args else ["eval", *args]),
        message,
    )


# 9: --resume onto an output that exists (an interrupted --force run) says how to finish it
def test_resume_onto_an_existing_output_says_how_to_finish(tmp_path: Path, prof: Path, no_model: None) -> None:
    out = tmp_path / "o.jsonl"
    out.write_text("an earlier output\n")
    before = files_in(tmp_path)
    result = CliRunner().invoke(cli, _transfer(prof, "-o", str(out), "--resume", "Hello."))
    refused(result, "exists and no interrupted run of it is waiting to resume; pass --force (without --resume)")
    assert files_in(tmp_path) == before
    rewrite = json.dumps({"index": 0, "record": {}})  # a header alone holds nothing to resume (ninth pass, D1)
    (tmp_path / "o.jsonl.partial").write_text(json.dumps({"partial_of": "o.jsonl", "key": "k"}) + "\n" + rewrite + "\n")
    before = files_in(tmp_path)  # an interrupted --force run: its rewrites wait in the partial file
    result = CliRunner().invoke(cli, _transfer(prof, "-o", str(out), "--resume", "Hello."))
    refused(result, "--resume never replaces a file: to finish an interrupted --force run, move")
    assert files_in(tmp_path) == before


# 17: steer serve on an address it cannot listen on: one line before anything loads
def test_serve_on_an_address_it_cannot_listen_on_is_one_line(tmp_path: Path, prof: Path, no_model: None) -> None:
    result = CliRunner().invoke(cli, ["serve", "-p", str(prof), "--host", "999.1.1.1", "--port", "8766", "-q"])
    refused(result, "cannot listen on --host 999.1.1.1 --port 8766")


# 8: steer calibrate rewrites the profile's file; the probe beside it (its counts unchanged) and read defaults
# that choose the plain prompt carry over to the new file, while a read that chose a steered recipe is said stale
@pytest.mark.parametrize("preset", ["prompt", "rerank"])
def test_calibrate_keeps_the_probe_and_plain_prompt_read_defaults(prof: Path, preset: str) -> None:
    from dataclasses import replace

    from steer.files import sha256_file
    from steer.profiling.defaults import read_default, write_read_defaults
    from steer.profiling.probe import StyleProbe, probe_path
    from steer.profiling.profile import StyleProfile

    stale = {"formal>informal": 5.0, "informal>formal": 5.0}  # so that calibrating changes the file
    replace(StyleProfile.load(prof), calibration=stale).save(prof, force=True)
    built = CliRunner().invoke(cli, ["probe", str(prof), "--top", "16", "--allow-no-heldout", "-q"])
    assert built.exit_code == 0, built.output
    entry = {"preset": preset, "read": "docs/reads/x", "n": 20, "usable": {"prompt": 6, "rerank": 3}}
    write_read_defaults(prof, {"formal->informal": entry}, force=False)
    old = sha256_file(prof)
    done = CliRunner().invoke(cli, ["calibrate", str(prof), "--force", "-q"])
    assert done.exit_code == 0, done.output
    assert sha256_file(prof) != old and "kept the probe beside it" in done.output
    assert StyleProbe.load(probe_path(prof)).profile_sha256 == sha256_file(prof)
    if preset == "prompt":
        assert read_default(prof, "formal", "informal") == ("prompt", entry)
    else:
        assert read_default(prof, "formal", "informal") is None and "no longer apply" in done.output


# 10: records whose sources are all one token have nothing to calibrate fluency on: fluency and J are left out
# (steer eval notes them), the rest is scored — no error
def test_fluency_is_left_out_when_no_source_has_two_tokens(llama_lm: Any) -> None:
    from steer.evaluation.metrics import Scorers, evaluate

    one_token = [llama_lm.tokenizer.decode([llama_lm.tokenizer.convert_tokens_to_ids("a")])]
    assert len(llama_lm.tokenizer(one_token[0], add_special_tokens=False)["input_ids"]) == 1
    result = evaluate(["a b c"], sources=one_token, metrics=["ppl", "j"], scorers=Scorers(fluency_lm=llama_lm),
                      per_sentence=True)  # fmt: skip
    assert "ppl" in result and "j" not in result and "fluency" not in result["sentences"]
