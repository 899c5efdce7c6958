"""Run configs (`steer.lab.experiment`): the shipped ones parse; a bad key, value, direction, name or
tune candidate is one line when the config is read, before any model loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL, _config, files_in, one_line_error, refused, run

from steer.cli import cli
from steer.errors import SteerError
from steer.lab.experiment import load_experiment


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


def test_shipped_configs_parse(tmp_path: Path) -> None:
    """Every config in configs/ (and its per-model folders) parses, real corpora replaced by tiny
    files with the same names; a configured profile limit is kept."""
    import re
    import tomllib

    root = Path(__file__).resolve().parents[2] / "configs"
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
    cases = [('"nope"', "`preset` 'nope' is not valid"), ("{ colour = 1 }", "`colour` is not a transfer setting")]
    for candidate, message in cases:
        cfg = _config(tmp_path / candidate[:3].strip('"{ '), saved_model)
        cfg.write_text(re.sub(r"candidates = .*", f"candidates = [{candidate}]", cfg.read_text()))
        with pytest.raises(SteerError, match=message):
            load_experiment(cfg)


def test_tuning_texts_follow_the_evaluated_ones(tmp_path: Path, saved_model: Path) -> None:
    cfg = _config(tmp_path, saved_model)
    held_out = load_experiment(cfg, limit=1).directions[0]
    assert held_out.texts == tuple(FORMAL[:1]) and held_out.tune_texts == tuple(FORMAL[1:3])
    assert held_out.tune_references == (tuple(INFORMAL[1:2]) + (None,),) and not held_out.tune_overlaps
    too_few = load_experiment(cfg).directions[0]  # 3 dev texts, all evaluated: tuning has to reuse them
    assert too_few.tune_texts == tuple(FORMAL[:2]) and too_few.tune_overlaps


# 6. unknown keys in a run config, at the top level and in every table
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("limt = 3\n", "unknown top-level key 'limt'"),
        ("[transfer]\nmax_new_token = 3\n", "unknown [transfer] key 'max_new_token'"),
        ("[selection]\ntopk = '1%'\n", "unknown [selection] key 'topk'"),
        ("[styles.a]\ntrain = 'a.txt'\ndevv = 'a.txt'\n", "unknown [styles.a] key 'devv'"),
        ("[styles.a]\ntrain = { path = 'a.txt', stopp = 1 }\ndev = 'a.txt'\n", "unknown key 'stopp'"),
    ],
)
def test_unknown_config_keys_are_errors(
    tmp_path: Path, extra: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the corpora are named relative to the config's folder
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.txt").write_text("y\n")
    styles = "" if "styles.a" in extra else "[styles.a]\ntrain = 'a.txt'\ndev = 'a.txt'\n"
    config = tmp_path / "c.toml"
    config.write_text(
        ("limit = 1\n" if "limt" not in extra else "")
        + (extra if extra.startswith("limt") else "")
        + f"data_dir = '{tmp_path}'\n"
        + styles
        + "[styles.b]\ntrain = 'b.txt'\ndev = 'b.txt'\n"
        + ("" if extra.startswith("limt") else extra)
    )
    one_line_error(run("run", str(config), "-o", str(tmp_path / "out")), message)


# issue 43, cases 8 and 20: a config of random bytes, a limit that is not a whole number ≥ 1, modes not a list
@pytest.mark.parametrize(
    ("head", "message"),
    [
        ("limit = 'ten'\n", "limit 'ten' is not valid"),
        ("limit = -4\n", "limit -4 is not valid"),
        ("modes = []\nlimit = 1\n", "modes [] is not valid"),
        ("modes = 'prompt'\nlimit = 1\n", "modes 'prompt' is not valid"),
        (b"\xff\xfe\x00garbage", "is not a UTF-8 text file"),
    ],
)
def test_bad_config_values_are_one_line(tmp_path: Path, head: str | bytes, message: str) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.txt").write_text("y\n")
    config = tmp_path / "c.toml"
    if isinstance(head, bytes):
        config.write_bytes(head)
    else:
        styles = "".join(f"[styles.{s}]\ntrain = '{tmp_path}/{s}.txt'\ndev = '{tmp_path}/{s}.txt'\n" for s in "ab")
        config.write_text(head + styles)
    one_line_error(run("run", str(config), "-o", str(tmp_path / "out")), message)
    assert not (tmp_path / "out").exists()


# case 20, the rest: a direction from a style to itself, and a NaN where a whole number goes
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[[directions]]\nfrom = 'a'\nto = 'a'\n", "direction a→a goes from a style to itself; give two different"),
        (
            "[transfer]\nmax_new_tokens = nan\n",
            "[transfer] max_new_tokens = nan is not valid (max_new_tokens must be a whole",
        ),
        ("[transfer]\nmax_new_tokens = 3.7\n", "[transfer] max_new_tokens = 3.7 is not valid"),
        ("[transfer]\nbatch_size = 0\n", "[transfer] batch_size = 0: batch_size must be at least 1"),
        # the fourth pass (E): values of the wrong type — a mode or metric that is not a name, a flag for a count
        ("modes = [1]\n", "modes [1] is not valid; give a non-empty list"),
        ('modes = ["prompt", 2]\n', "modes ['prompt', 2] is not valid"),
        ('metrics = "j"\n', "metrics 'j' is not valid; give a list of names"),
        ("metrics = [true]\n", "metrics [True] is not valid"),
        (
            "[transfer]\nmax_new_tokens = true\n",
            "max_new_tokens = true is not valid (max_new_tokens must be a whole number, got true)",
        ),
        ("[transfer]\nbatch_size = false\n", "batch_size = false is not valid (batch_size must be a whole number"),
        ('[profile]\nlimit = "ten"\n', "[profile] limit = 'ten' is not valid; give a whole number"),
        ("[profile]\nbatch_size = 0\n", "[profile] batch_size = 0 is not valid; give a whole number"),
        # a ninth-pass note: blocks were checked for syntax only when the edit was built (after profiling)
        (
            "[contrast]\nlayers = '29-0'\n",
            "c.toml: [contrast] layers '29-0' is not valid: the range '29-0' runs "
            "backwards; write it LOW-HIGH ('0-29')",
        ),
        (
            "[tune]\ncandidates = [{preset = 'guided', edit_layers = 'last:0'}]\n",
            "tune candidate {'preset': 'guided', 'edit_layers': 'last:0'}: edit_layers 'last:0' is not valid: last:N "
            "needs N ≥ 1, got 0",
        ),
        (
            "[tune]\ncandidates = [{preset = 'guided', edit_layers = true}]\n",
            "tune candidate {'preset': 'guided', 'edit_layers': True}: edit_layers True is not valid; use '24,26,28'",
        ),
    ],
)
def test_a_config_direction_or_value_is_refused_when_read(
    tmp_path: Path, extra: str, message: str, monkeypatch: pytest.MonkeyPatch, no_model: None
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.txt").write_text("y\n")
    config = tmp_path / "c.toml"
    head, tail = ("", extra) if extra.startswith("[") else (extra, "")  # a top-level key goes above the tables
    styles = "[styles.a]\ntrain = 'a.txt'\ndev = 'a.txt'\n[styles.b]\ntrain = 'b.txt'\ndev = 'b.txt'\n"
    config.write_text(head + "limit = 1\n" + styles + tail)
    before = files_in(tmp_path)
    result = run("run", str(config), "-o", str(tmp_path / "out"))
    refused(result, f"{config}: {message}" if "direction" in extra else message)
    assert files_in(tmp_path) == before


def test_a_config_name_that_is_a_path_is_refused(tmp_path: Path, saved_model: Path, no_model: None) -> None:
    cfg = _config(tmp_path, saved_model)
    cfg.write_text(cfg.read_text().replace('name = "tiny"', 'name = "../x"'))
    result = CliRunner().invoke(cli, ["run", str(cfg), "-q"])
    refused(result, "name '../x' is not a plain name")
    assert not (tmp_path / "x").exists()


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


# 2, 3, 7: [tune] values that are not numbers, count backwards or name no candidate, checked when the config is read
@pytest.mark.parametrize(
    ("tune", "message"),
    [
        ('limit = "ten"', "[tune] limit 'ten' is not valid; give a whole number ≥ 1"),
        ("limit = -3", "[tune] limit -3 is not valid"),
        ("limit = 0", "[tune] limit 0 is not valid"),
        ("start = 1.5", "[tune] start 1.5 is not valid; give a whole number ≥ 0"),
        ('similarity_floor = "abc"', "[tune] similarity_floor 'abc' is not valid; give a positive number"),
        ("ppl_ceiling = -1.0", "[tune] ppl_ceiling -1.0 is not valid"),
        ("candidates = [5]", "[tune] candidate 5 is neither a preset name nor a table"),
        ('candidates = "guided"', "[tune] candidates 'guided' is not valid; give a non-empty list"),
        ("candidates = []", "[tune] candidates [] is not valid"),
        ('candidates = ["guided", "guided"]', "[tune] candidate 'guided' is listed twice"),
    ],
)
def test_tune_values_are_checked_when_the_config_is_read(
    tmp_path: Path, saved_model: Path, no_model: None, tune: str, message: str
) -> None:
    cfg = _config(tmp_path, saved_model)  # its [tune] table is the last one: the changed key replaces its own line
    key = tune.split(" =")[0]
    lines = [line for line in cfg.read_text().splitlines() if not line.startswith(f"{key} =")]
    cfg.write_text("\n".join([*lines, tune]) + "\n")
    out = tmp_path / "run"
    refused(CliRunner().invoke(cli, ["tune", str(cfg), "-o", str(out)]), message)
    assert not out.exists()
