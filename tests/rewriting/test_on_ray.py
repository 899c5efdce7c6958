"""`--engine ray` on a local Ray instance (num_cpus=2) with the tiny model: the same JSONL bytes as
one process (greedy and sampled, blank lines kept), a worker killed mid-run retried with nothing
lost or written twice, and `--resume` after an interrupted run sending only what was not done."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL

from steer.cli import cli
from steer.errors import SteerError
from steer.rewriting.on_ray import decode_items_on_ray
from steer.rewriting.partial import PartialRecords
from steer.rewriting.records import TransferRecord
from steer.rewriting.service import RewriteJob, RewriteService
from steer.settings import TransferSettings


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local Ray instance for the module (starting one costs seconds); the engine joins it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"  # a blank line stays a blank record
    path.write_text("\n".join([*FORMAL[:3], "", *FORMAL[3:], *INFORMAL[:4]]) + "\n", encoding="utf-8")
    return path


def transfer(prof: Path, inputs: Path, out: Path, *extra: str) -> Any:
    top_k = [] if "prompt" in extra else ["--top-k", "10%"]  # the plain prompt takes no neuron options
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-i", str(inputs),
            "--max-new-tokens", "4", "--batch-size", "2", *top_k, "-q", "-o", str(out), *extra]  # fmt: skip
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize(
    "recipe", [["--preset", "guided"], ["--preset", "prompt", "--temperature", "0.9", "--seed", "5"]]
)
def test_ray_engine_writes_the_bytes_one_process_writes(
    local_ray: None, prof: Path, inputs: Path, tmp_path: Path, recipe: list[str]
) -> None:
    one, two = tmp_path / "one.jsonl", tmp_path / "ray.jsonl"
    assert transfer(prof, inputs, one, *recipe).exit_code == 0
    result = transfer(prof, inputs, two, *recipe, "--engine", "ray", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert two.read_bytes() == one.read_bytes()
    assert len(two.read_text().splitlines()) == len(inputs.read_text().splitlines())
    assert not list(tmp_path.glob("ray.jsonl.partial*"))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".txt"])
def test_a_streamed_input_is_read_by_the_workers_and_gives_the_one_process_output(
    local_ray: None, prof: Path, tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .jsonl, .parquet or .txt -i FILE under --engine ray: this process never reads the texts
    (only one pass over the bytes for block offsets and the hash); the workers read their blocks;
    the output (records, or one rewrite per line for a .txt -o) is what one process writes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import steer.cli.transfer_steps as steps

    texts = [*FORMAL[:3], "", *INFORMAL[:3]]
    source = tmp_path / f"in{suffix}"
    if suffix == ".jsonl":
        source.write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(texts)) + "\n\n")
    elif suffix == ".parquet":
        pq.write_table(pa.table({"text": [*texts[:3], None, *texts[4:]]}), source, row_group_size=2)
    else:
        source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = "o.txt" if suffix == ".txt" else "o.jsonl"
    one, two = tmp_path / f"one-{out}", tmp_path / f"ray-{out}"
    assert transfer(prof, source, one, "--preset", "prompt").exit_code == 0
    monkeypatch.setattr(steps, "read_items", lambda *a: pytest.fail("the driver read the texts"))
    result = transfer(prof, source, two, "--preset", "prompt", "--engine", "ray", "--block-size", "3", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert two.read_bytes() == one.read_bytes()
    assert len(two.read_text().splitlines()) == len(texts)  # the blank (or missing) one stays a blank record
    assert not list(tmp_path.glob("ray-o.*.partial*"))


def test_a_worker_killed_mid_run_is_retried_and_nothing_is_lost_or_doubled(
    local_ray: None, prof: Path, tmp_path: Path
) -> None:
    job = RewriteJob(str(prof), "formal", "informal", TransferSettings.preset("guided", top_k="10%", max_new_tokens=4))
    items = FORMAL + INFORMAL
    got: list[tuple[int, TransferRecord]] = []
    marker = tmp_path / "died"
    blank = decode_items_on_ray(
        job, items, list(range(len(items))), got.extend, need_blank=True, workers=2, block_size=3,
        fault={"index": 4, "marker": str(marker)},
    )  # fmt: skip
    assert marker.exists()  # the worker holding text 4 did die
    assert sorted(i for i, _ in got) == list(range(len(items)))  # each text once
    service = RewriteService(job)
    expected = [service.record(r).to_json() for r in service.results(items)]
    assert [r.to_json() for _, r in sorted(got, key=lambda p: p[0])] == expected
    assert blank is not None and blank.to_json() == service.blank_record().to_json()


def test_a_worker_killed_while_reading_its_own_block_is_retried(local_ray: None, prof: Path, tmp_path: Path) -> None:
    """Streamed input: the worker that reads block 3–5 dies once; the block is read and decoded
    again, every line comes back once, and the records are one process's."""
    from steer.profiling.corpus import BlockedInput
    from steer.rewriting.on_ray import decode_blocks_on_ray

    job = RewriteJob(str(prof), "formal", "informal", TransferSettings.preset("prompt", max_new_tokens=4))
    source = tmp_path / "in.txt"
    texts = [*FORMAL[:4], "", *INFORMAL[:3]]
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    blocked = BlockedInput.scan(str(source), 3)
    got: list[tuple[int, TransferRecord]] = []
    marker = tmp_path / "died"
    decode_blocks_on_ray(
        job, blocked, blocked.blocks, got.extend, workers=2, fault={"index": 4, "marker": str(marker)}
    )  # fmt: skip
    assert marker.exists() and sorted(i for i, _ in got) == list(range(len(texts)))
    service = RewriteService(job)
    decoded = iter(service.results([t for t in texts if t]))
    expected = [service.record(next(decoded)).to_json() if t else service.blank_record().to_json() for t in texts]
    assert [r.to_json() for _, r in sorted(got, key=lambda p: p[0])] == expected


def test_a_block_that_keeps_failing_fails_the_run_with_a_pointer_to_resume(
    local_ray: None, prof: Path, tmp_path: Path
) -> None:
    job = RewriteJob(str(prof), "formal", "informal", TransferSettings.preset("prompt", max_new_tokens=3))
    got: list[tuple[int, TransferRecord]] = []
    with pytest.raises(SteerError, match="--resume"):
        decode_items_on_ray(
            job, FORMAL, list(range(len(FORMAL))), got.extend, block_size=2, max_retries=1,
            fault={"index": 0, "marker": str(tmp_path / "m"), "always": True},
        )  # fmt: skip
    assert 0 not in {i for i, _ in got}


def test_an_interrupted_ray_run_resumes_with_only_the_missing_texts(
    local_ray: None, prof: Path, inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each finished block is a shard (`cut.jsonl.partial.b<first line>`) listed with its sha256 in
    `cut.jsonl.partial.index`; a crash keeps them, `--resume` sends only the other blocks, the
    output is the one-process bytes and the shards and index go."""
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    assert transfer(prof, inputs, whole, "--preset", "guided").exit_code == 0
    original, calls = PartialRecords.write_block, []

    def crash_after_two_blocks(self: PartialRecords, items: Any) -> None:
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(items))
        original(self, items)

    monkeypatch.setattr(PartialRecords, "write_block", crash_after_two_blocks)
    ray_args = ["--preset", "guided", "--engine", "ray", "--block-size", "3"]
    killed = transfer(prof, inputs, cut, *ray_args)
    assert killed.exit_code == 130 and not cut.exists()
    monkeypatch.setattr(PartialRecords, "write_block", original)
    index = PartialRecords.index_path(cut).read_text().splitlines()
    entries = [json.loads(line) for line in index[1:]]
    shards = [tmp_path / e["shard"] for e in entries]
    assert [e["count"] for e in entries] == calls == [3, 3] and all(s.is_file() for s in shards)
    assert {json.loads(line)["index"] for s in shards for line in s.read_text().splitlines()[1:]} == set(range(6))
    sent: list[int] = []
    monkeypatch.setattr(ray.data, "from_items", _recording(ray.data.from_items, sent))
    resumed = transfer(prof, inputs, cut, *ray_args, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming: 6 of" in resumed.output
    lines = len(inputs.read_text().splitlines())
    assert sent == list(range(6, lines, 3))  # only the blocks not yet written went out
    assert cut.read_bytes() == whole.read_bytes()
    assert not list(tmp_path.glob("cut.jsonl.partial*"))


def test_a_shard_changed_after_it_was_listed_is_refused(prof: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    job = RewriteJob(str(prof), "formal", "informal", TransferSettings.preset("prompt", max_new_tokens=3))
    service = RewriteService(job)
    records = [service.record(r) for r in service.results(FORMAL[:4])]
    store = PartialRecords(out, "k")
    store.write_block(list(enumerate(records))[:2])
    store.write_block(list(enumerate(records))[2:])
    done = PartialRecords.read_all(out, "k")
    assert [done[i].to_json() for i in range(4)] == [r.to_json() for r in records]
    assert PartialRecords.finished_blocks(out, "k") == {0: 2, 2: 2}  # a streamed resume's view: first → count
    shard = tmp_path / "o.jsonl.partial.b2"
    shard.write_text(shard.read_text().replace(records[2].output, "tampered"), encoding="utf-8")
    for read in (PartialRecords.read_all, PartialRecords.finished_blocks):
        with pytest.raises(SteerError, match=r"o\.jsonl\.partial\.b2 changed after it was written"):
            read(out, "k")
    for read in (PartialRecords.read_all, PartialRecords.finished_blocks):
        with pytest.raises(SteerError, match="not the index of this run"):
            read(out, "another run")
    PartialRecords.remove_all(out)
    assert list(tmp_path.glob("o.jsonl*")) == []


def _recording(from_items: Any, sent: list[int]) -> Any:
    """`ray.data.from_items` that notes the first line index of every block it is given."""

    def wrapper(rows: list[dict[str, Any]], **kwargs: Any) -> Any:
        sent.extend(int(json.loads(r["block"])[0]) for r in rows)
        return from_items(rows, **kwargs)

    return wrapper


def test_engine_options_are_checked_before_anything_loads(tmp_path: Path) -> None:
    base = ["transfer", "-p", str(tmp_path / "none.safetensors"), "--from", "a", "--to", "b", "hello"]
    no_output = CliRunner().invoke(cli, [*base, "--engine", "ray"])
    assert no_output.exit_code == 1 and "add -o FILE" in no_output.output
    stray = CliRunner().invoke(cli, [*base, "--workers", "2", "-o", str(tmp_path / "o.jsonl")])
    assert stray.exit_code == 1 and "--engine ray" in stray.output
    both = CliRunner().invoke(cli, [*base, "--engine", "ray", "--processes", "2", "-o", str(tmp_path / "o.jsonl")])
    assert both.exit_code == 1 and "drop --processes" in both.output
    gpu = CliRunner().invoke(cli, [*base, "--engine", "ray", "--gpus-per-worker", "1", "-o", str(tmp_path / "o.jsonl")])
    assert gpu.exit_code == 1 and "add --device cuda" in gpu.output
    run = CliRunner().invoke(cli, ["run", str(tmp_path / "none.toml"), "--workers", "2"])
    assert run.exit_code == 1 and "--engine ray" in run.output
    block = CliRunner().invoke(cli, [*base, "--engine", "ray", "--block-size", "0", "-o", str(tmp_path / "o.jsonl")])
    assert block.exit_code == 1 and "--block-size must be at least 1, got 0" in block.output
    stray_block = CliRunner().invoke(cli, [*base, "--block-size", "8", "-o", str(tmp_path / "o.jsonl")])
    assert stray_block.exit_code == 1 and "--engine ray" in stray_block.output


def test_run_with_ray_decoding_writes_the_outputs_and_results_of_a_local_run(
    local_ray: None, tmp_path: Path, saved_model: Path
) -> None:
    """`steer run --engine ray`: the decoding passes (a mode and a rerank rung), rerank's ranking and
    evaluation's NLL and similarity passes on Ray workers; every outputs file equals a local run's
    byte for byte (whose profile and probe the Ray run reuses) and the results agree."""
    import shutil

    from conftest import _config

    cfg = _config(tmp_path, saved_model)
    modes = 'modes = ["prompt", "deactivate", "deactivate+contrast"]'
    text = cfg.read_text().replace(modes, 'modes = ["prompt", "rerank"]')
    text = text.replace('[[directions]]\nfrom = "informal"\nto = "formal"\n', "")  # one direction (with references)
    cfg.write_text(text.replace('metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]', 'judge = "tfidf"')
                   + "[rerank]\nladder = [0, 2]\n")  # fmt: skip
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert CliRunner().invoke(cli, ["run", str(cfg), "-o", str(local), "-q"]).exit_code == 0
    remote.mkdir()
    for name in ("profile.safetensors", "probe.safetensors", "steer-run.json"):  # with the list that owns them
        shutil.copyfile(local / name, remote / name)
    result = CliRunner().invoke(cli, ["run", str(cfg), "-o", str(remote), "-q", "--engine", "ray"])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in (local / "outputs").iterdir())
    assert names == sorted(p.name for p in (remote / "outputs").iterdir()) and len(names) == 3
    for name in names:
        assert (remote / "outputs" / name).read_bytes() == (local / "outputs" / name).read_bytes(), name
    rows = [json.loads((d / "results.json").read_text())["rows"] for d in (local, remote)]
    assert rows[1] == _approx(rows[0])  # scored on workers in blocks: equal up to summation order


def test_evaluation_passes_on_ray_equal_the_same_passes_here(local_ray: None, prof: Path) -> None:
    """`RayPasses` (NLL under the profile's model, similarity under an encoder) on two workers in
    blocks of two: the values a local `run_pass` gives, in input order."""
    from steer.evaluation.metrics import Scorers, run_pass
    from steer.lab.ray_passes import RayPasses
    from steer.rewriting.service import load_profile_and_model
    from steer.scoring.encoders import SELECTION_ENCODER, shared_embedder

    texts = [*FORMAL[:3], "", *INFORMAL[:2]]
    pairs = list(zip(texts, [*INFORMAL[:3], "x", *FORMAL[:2]], strict=True))
    passes = RayPasses(str(prof), SELECTION_ENCODER, options=(("block_size", 2), ("workers", 2)))
    here = Scorers(
        None, load_profile_and_model(prof)[1], shared_embedder(SELECTION_ENCODER), allow_selection_encoder=True
    )
    remote_nll, remote_sims = passes.many([("nll", texts), ("similarity", pairs)])  # one Ray pass
    local_nll = run_pass(here, "nll", texts)
    assert [n for _, n in remote_nll] == [n for _, n in local_nll] and remote_nll[3] == (0.0, 0)
    assert [v for v, _ in remote_nll] == pytest.approx([v for v, _ in local_nll], rel=1e-5)
    assert remote_sims == pytest.approx(run_pass(here, "similarity", pairs), abs=1e-5)
    with pytest.raises(ValueError, match="unknown scoring pass"):
        run_pass(here, "bleu", texts)


def _approx(value: Any) -> Any:
    """`value` with every float compared within 1e-6 (relative), nested lists and dicts included."""
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-6, nan_ok=True)
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    return value


def test_engine_options_give_workers_this_process_thread_count_on_this_machine() -> None:
    """Float sums depend on the torch thread count, so one local worker gets the driver's (the run
    test's byte-identical rerank scores need it) and several share it; a cluster keeps Ray's
    default; bad values are refused."""
    import torch

    from steer.rewriting.on_ray import EngineOptions

    local = EngineOptions().worker_env()
    assert local == {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(torch.get_num_threads())}}}
    shared = EngineOptions(workers=2).worker_env()["runtime_env"]["env_vars"]["OMP_NUM_THREADS"]
    assert shared == str(max(1, torch.get_num_threads() // 2))  # two local workers share the cores
    assert EngineOptions(address="ray://head:10001").worker_env() == {}
    assert EngineOptions(address="auto", threads=3).worker_env()["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "3"
    for bad, message in [({"threads": 0}, "`threads` must be at least 1"), ({"workers": 0}, "--workers")]:
        with pytest.raises(SteerError, match=message):
            EngineOptions(**bad)
