"""Past one machine: rewrites decoded on Ray Data — long-lived worker actors that each load the
model, profile and probe once, streaming blocks through them, retried when a worker dies.

Why no collectives: steer seeds sampling per text, so a rewrite does not depend on its batch, its
order or its process, and workers never need to talk to each other. Two ways in:
- `decode_blocks_on_ray` (`steer transfer -i FILE` for a .txt, .jsonl or .parquet FILE): the driver
  sends block descriptors (`steer.profiling.corpus.InputBlock`: where a block of lines lies in the
  file) and each worker reads its block itself, so the driver never holds the texts;
- `decode_items_on_ray` (texts the driver already holds: arguments, stdin, CSV/TSV, `hf:` datasets, and
  `steer run`'s decoding passes): blocks of (input index, text).
Either way the driver writes each finished block as it arrives (`partial.PartialRecords`): a block
is written once, when Ray hands its result back — a worker that dies mid-block is restarted and
the block retried, so nothing is lost and nothing is written twice — and `--resume` sends only the
blocks not yet written. Records come from `steer.rewriting.service` in the workers, so they are byte
for byte what one process writes. Scoring passes on Ray are in `steer.lab.ray_passes`. Ray is an
optional extra: `pip install 'steer[ray]'`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.generation.steerer import TransferResult
from steer.profiling.corpus import BlockedInput, InputBlock
from steer.rewriting.records import TransferRecord
from steer.rewriting.service import RewriteJob, RewriteService

logger = logging.getLogger(__name__)
BLANK = -1  # the index of the request for a blank line's record (no text to decode)
MAX_RETRIES = 3  # restarts of a dead worker, and retries of its block, before the run fails


@dataclass(frozen=True)
class EngineOptions:
    """How a Ray pass runs: `workers` actors with `gpus_per_worker` GPUs each, on the cluster at
    `address` (`ray://…` or `auto`; None starts a local instance), blocks of `block_size` items,
    `max_retries` restarts of a dead worker (and retries of its block), Ray Data's progress bars,
    `threads` torch threads per worker (None: on this machine, this process's count shared among
    the workers — so one worker computes with this process's count, and float sums, which depend on
    the thread count, come out byte-identical; on a cluster, Ray's default, one per CPU a worker
    holds)."""

    workers: int = 1
    gpus_per_worker: float = 0.0
    address: str | None = None
    block_size: int = 32
    max_retries: int = MAX_RETRIES
    progress: bool = False
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise SteerError(f"--workers must be at least 1, got {self.workers}")
        if self.gpus_per_worker < 0:
            raise SteerError(f"--gpus-per-worker must be ≥ 0, got {self.gpus_per_worker}")
        if self.block_size < 1:
            raise SteerError(f"--block-size must be at least 1, got {self.block_size}")
        if self.threads is not None and self.threads < 1:
            raise SteerError(f"`threads` must be at least 1, got {self.threads}")

    def worker_env(self) -> dict[str, Any]:
        """Ray remote options that give each worker `threads` torch threads (see the class)."""
        threads = self.threads
        if threads is None and self.address is None:
            import torch

            threads = max(1, torch.get_num_threads() // self.workers)
        return {"runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads)}}} if threads else {}


class RewriteWorker:
    """A Ray Data actor: one `RewriteService` (model, profile, probe loaded once); each call turns
    a block of {index, text} into {index, record JSON}."""

    def __init__(self, job: RewriteJob, fault: dict[str, Any] | None = None) -> None:
        self.service = RewriteService(job)
        self.fault = fault  # tests only: die on a given input index (once, or every time)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        indices = [int(i) for i in batch["index"]]
        texts = [str(t) for t in batch["text"]]
        if self.fault is not None and self.fault["index"] in indices:
            _die(self.fault)
        real = [(i, t) for i, t in zip(indices, texts, strict=True) if i != BLANK]
        results = self.service.results([t for _, t in real])
        records = {i: self.service.record(r) for (i, _), r in zip(real, results, strict=True)}
        if BLANK in indices:
            records[BLANK] = self.service.blank_record()
        return {"index": np.array(indices), "record": np.array([records[i].to_json() for i in indices], dtype=object)}


class BlockWorker:
    """A Ray Data actor for a streamed input: each row is a block of the input file
    (`InputBlock`), which the worker reads itself (`BlockedInput.read`) and decodes with its
    `RewriteService`; out comes the block's first line index and its records (JSON), one per
    line, blank lines' included."""

    def __init__(self, job: RewriteJob, source: BlockedInput, fault: dict[str, Any] | None = None) -> None:
        self.service = RewriteService(job)
        self.source, self.fault = source, fault
        self.blank = self.service.blank_record().to_dict()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        firsts, out = [], []
        for row in batch["block"]:
            block = InputBlock(*json.loads(str(row)))
            if self.fault is not None and block.first <= self.fault["index"] < block.first + block.count:
                _die(self.fault)
            texts = self.source.read(block)
            results = iter(self.service.results([t for t in texts if t]))
            records = [self.service.record(next(results)).to_dict() if t else self.blank for t in texts]
            firsts.append(block.first)
            out.append(json.dumps(records, ensure_ascii=False))
        return {"first": np.array(firsts), "records": np.array(out, dtype=object)}


def _die(fault: dict[str, Any]) -> None:
    """Tests only: end the worker's process, once (a marker file says it happened) or every time."""
    marker = Path(fault["marker"])
    if fault.get("always") or not marker.exists():
        marker.touch()
        os._exit(1)  # a worker dying mid-block, as a crashed or pre-empted node does


def decode_blocks_on_ray(
    job: RewriteJob,
    source: BlockedInput,
    blocks: Sequence[InputBlock],
    write_block: Callable[[list[tuple[int, TransferRecord]]], None],
    *,
    fault: dict[str, Any] | None = None,
    **options: Any,
) -> None:
    """Decode `blocks` of a streamed input on Ray actors that read each block themselves (the
    driver sends block descriptors, never texts); each finished block's (line index, record)
    pairs go to `write_block` as it arrives. `options` are `EngineOptions`; raises `SteerError`
    when a block still fails after `max_retries` worker restarts."""
    engine = EngineOptions(**options)
    rows = [{"block": json.dumps(dataclasses.astuple(b))} for b in blocks]
    if not rows:
        return
    light = dataclasses.replace(source, blocks=())  # the workers need where to read, not the block list
    with session(engine) as ray:
        kwargs = {"job": job, "source": light, "fault": fault}
        decoded = actor_map(ray, rows, BlockWorker, kwargs, engine, rows_per_block=1)
        for batch in decoded.iter_batches(batch_size=None, batch_format="numpy"):
            for first, records in zip(batch["first"], batch["records"], strict=True):
                items = json.loads(str(records))
                write_block(
                    [
                        (int(first) + k, TransferRecord.from_dict(r, "a Ray worker's record"))
                        for k, r in enumerate(items)
                    ]
                )


def decode_items_on_ray(
    job: RewriteJob,
    items: Sequence[str],
    todo: Sequence[int],
    append: Callable[[list[tuple[int, TransferRecord]]], None],
    *,
    need_blank: bool = False,
    fault: dict[str, Any] | None = None,
    **options: Any,
) -> TransferRecord | None:
    """Decode `items[i]` for every i in `todo` on Ray actors, handing each finished block's (index,
    record) pairs to `append` as it arrives; returns the record of a blank line when `need_blank`.
    `options` are `EngineOptions` (workers, GPUs, cluster address, block size, retries, progress).
    Raises `SteerError` when a block still fails after `max_retries` worker restarts."""
    engine = EngineOptions(**options)
    rows = [{"index": i, "text": items[i]} for i in todo]
    if need_blank:
        rows.append({"index": BLANK, "text": ""})
    if not rows:
        return None
    blank = None
    with session(engine) as ray:
        decoded = actor_map(ray, rows, RewriteWorker, {"job": job, "fault": fault}, engine)
        for batch in decoded.iter_batches(batch_size=None, batch_format="numpy"):
            pairs = [
                (int(i), TransferRecord.from_dict(json.loads(r), "a Ray worker's record"))
                for i, r in zip(batch["index"], batch["record"], strict=True)
            ]
            blank = next((r for i, r in pairs if i == BLANK), blank)
            append([(i, r) for i, r in pairs if i != BLANK])
    return blank


def decode_texts_on_ray(
    profile_path: str,
    source: str,
    target: str,
    recipe: Any,
    texts: Sequence[str],
    *,
    device: str = "cpu",
    on_block: Callable[[list[int], list[Any]], None] | None = None,
    corpora: Any = None,
    **options: Any,
) -> list[Any]:
    """One recipe's rewrites of `texts` (`TransferResult`s, in order) decoded by Ray workers that
    each load the profile and its model once — `steer run`'s decoding passes; `on_block(indices,
    results)` gets each block as it arrives (the run's partial files); `corpora`: `RewriteJob.corpora`."""
    job = RewriteJob(profile_path, source, target, recipe, device=device, corpora=corpora)
    got: dict[int, TransferResult] = {}

    def arrived(pairs: list[tuple[int, TransferRecord]]) -> None:
        block = {i: TransferResult(texts[i], r.output, r.raw_output, bool(r.truncated)) for i, r in pairs}
        got.update(block)
        if on_block is not None and block:
            on_block(list(block), list(block.values()))

    decode_items_on_ray(job, list(texts), range(len(texts)), arrived, **options)
    return [got[i] for i in range(len(texts))]


@contextmanager
def cluster(address: str | None = None, workers: int = 1) -> Iterator[None]:
    """Ray for a whole `steer run`: started (or joined) once, so that its many passes do not each
    start a local instance; shut down after when this call started it."""
    try:
        import ray
    except ImportError:
        raise SteerError("--engine ray needs Ray; install it with: pip install 'steer[ray]'") from None
    started = not ray.is_initialized()
    if started:
        import logging

        cpus = None if address else max(2, workers)
        ray.init(
            address=address, num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR
        )
    try:
        yield
    finally:
        if started:
            ray.shutdown()


@contextmanager
def session(engine: EngineOptions) -> Iterator[Any]:
    """Ray (`cluster`) with Ray Data's progress bars and log level set for the call; a run that still
    fails after the retries becomes one `SteerError` line pointing at --resume."""
    with cluster(engine.address, engine.workers):
        import ray

        with _data_context(ray, engine.progress):
            try:
                yield ray
            except ray.exceptions.RayError as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise SteerError(
                    f"the Ray run failed after {engine.max_retries} retries ({first}); the finished work is saved: "
                    "run the same command with --resume"
                ) from None


@contextmanager
def _data_context(ray: Any, progress: bool) -> Iterator[None]:
    """Ray Data's progress bars and log level set for one call, restored after."""
    context = ray.data.DataContext.get_current()
    bars, data_log = context.enable_progress_bars, logging.getLogger("ray.data")
    level = data_log.level
    context.enable_progress_bars, context.enable_operator_progress_bars = progress, progress
    data_log.setLevel(max(level, logging.WARNING if progress else logging.ERROR))  # Ray Data's own lines; restored
    try:
        yield
    finally:
        context.enable_progress_bars = context.enable_operator_progress_bars = bars
        data_log.setLevel(level)


def actor_map(
    ray: Any,
    rows: list[dict[str, Any]],
    worker: type,
    kwargs: dict[str, Any],
    engine: EngineOptions,
    rows_per_block: int | None = None,
) -> Any:
    """`rows` as a Ray Dataset of `rows_per_block` rows per block (default `block_size`), mapped
    through a pool of long-lived `worker` actors, one block per call."""
    size = rows_per_block or engine.block_size
    blocks = max(1, math.ceil(len(rows) / size))
    dataset = ray.data.from_items(rows, override_num_blocks=blocks)
    with warnings.catch_warnings():
        # Ray Data (≥ 2.51) has no named parameter for a bounded number of actor restarts, and
        # its default is to restart forever — a block that kills every worker would never end.
        # `max_restarts` still passes through ray_remote_args (deprecated, removed in 2.64: the
        # extra pins ray < 2.64).
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        return dataset.map_batches(
            worker,
            fn_constructor_kwargs=kwargs,
            batch_size=size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(engine.workers, blocks)),  # no worker loads a model for nothing
            num_cpus=1,
            num_gpus=engine.gpus_per_worker or None,
            max_restarts=engine.max_retries,
            max_task_retries=engine.max_retries,
            **engine.worker_env(),
        )
