"""Past one machine: a rewrite job decoded on Ray Data — long-lived worker actors that each load
the model, profile and probe once, streaming blocks of texts through them, retried when a worker dies.

Why no collectives: steer seeds sampling per text, so a rewrite does not depend on its batch, its
order or its process, and workers never need to talk to each other. The driver (the `steer
transfer` process) sends blocks of (input index, text), receives records, and appends them to
the same resumable partial file one process writes (`partial.PartialRecords`): a block is
appended once, when Ray hands its result back — a worker that dies mid-block is restarted and
the block retried, so nothing is lost and nothing is written twice — and `--resume` sends only
the texts the partial file lacks. Records come from `steer.runs.service` in the workers, so they are
byte for byte what one process writes. Ray is an optional extra: `pip install 'steer[ray]'`.

`steer run --engine ray` also scores on workers (`map_on_ray`: a loader that builds a worker's
models once, and a function applied to each block): evaluation's per-text model passes (NLL
under the model, similarity under the evaluation encoder; `RayPasses`) and rerank's ranking of
decoded candidates (`rank_on_ray`). The judges are small and stay in the driver.
"""

from __future__ import annotations

import functools
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

from steer.config import SteerError
from steer.generation.steerer import TransferResult
from steer.runs.records import TransferRecord
from steer.runs.service import RewriteJob, RewriteService

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
            marker = Path(self.fault["marker"])
            if self.fault.get("always") or not marker.exists():
                marker.touch()
                os._exit(1)  # a worker dying mid-block, as a crashed or pre-empted node does
        real = [(i, t) for i, t in zip(indices, texts, strict=True) if i != BLANK]
        results = self.service.results([t for _, t in real])
        records = {i: self.service.record(r) for (i, _), r in zip(real, results, strict=True)}
        if BLANK in indices:
            records[BLANK] = self.service.blank_record()
        return {"index": np.array(indices), "record": np.array([records[i].to_json() for i in indices], dtype=object)}


def decode_on_ray(
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
    with _session(engine) as ray:
        decoded = _actor_map(ray, rows, RewriteWorker, {"job": job, "fault": fault}, engine)
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
    **options: Any,
) -> list[Any]:
    """One recipe's rewrites of `texts` (`TransferResult`s, in order) decoded by Ray workers that
    each load the profile and its model once — `steer run`'s decoding passes; `on_block(indices,
    results)` gets each block as it arrives (the run's partial files)."""
    job = RewriteJob(profile_path, source, target, recipe, device=device)
    got: dict[int, TransferResult] = {}

    def arrived(pairs: list[tuple[int, TransferRecord]]) -> None:
        block = {i: TransferResult(texts[i], r.output, r.raw_output, bool(r.truncated)) for i, r in pairs}
        got.update(block)
        if on_block is not None and block:
            on_block(list(block), list(block.values()))

    decode_on_ray(job, list(texts), range(len(texts)), arrived, **options)
    return [got[i] for i in range(len(texts))]


class PassWorker:
    """A Ray Data actor for a scoring pass: `load()` builds its models once; each block of items
    (JSON written by the driver, `_encode`) becomes `apply(loaded, items)`."""

    def __init__(self, load: Callable[[], Any], apply: Callable[[Any, list[Any]], list[Any]]) -> None:
        self.loaded, self.apply = load(), apply

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        items = [_decode(str(b)) for b in batch["item"]]
        results = self.apply(self.loaded, items)
        if len(results) != len(items):
            raise RuntimeError(f"a scoring pass gave {len(results)} results for {len(items)} items")
        return {"index": batch["index"], "result": np.array([_encode(r) for r in results], dtype=object)}


def _encode(value: Any) -> str:
    """A pass's item or result as JSON: strings, numbers, lists and dicts as they are; tuples and
    `TransferResult`s tagged so `_decode` gives them back as they were (no pickle on either side)."""

    def tag(x: Any) -> Any:
        if isinstance(x, TransferResult):
            return {"__result__": [x.text, x.output, x.raw_output, x.truncated, tag(x.info)]}
        if isinstance(x, tuple):
            return {"__tuple__": [tag(v) for v in x]}
        if isinstance(x, list):
            return [tag(v) for v in x]
        if isinstance(x, dict):
            return {k: tag(v) for k, v in x.items()}
        return x

    return json.dumps(tag(value), ensure_ascii=False)


def _decode(text: str) -> Any:
    """The value `_encode` wrote."""

    def untag(x: Any) -> Any:
        if isinstance(x, dict) and "__result__" in x:
            t, output, raw, truncated, info = x["__result__"]
            return TransferResult(t, output, raw, truncated, untag(info))
        if isinstance(x, dict) and "__tuple__" in x:
            return tuple(untag(v) for v in x["__tuple__"])
        if isinstance(x, list):
            return [untag(v) for v in x]
        if isinstance(x, dict):
            return {k: untag(v) for k, v in x.items()}
        return x

    return untag(json.loads(text))


def map_on_ray(
    load: Callable[[], Any],
    apply: Callable[[Any, list[Any]], list[Any]],
    items: Sequence[Any],
    **options: Any,
) -> list[Any]:
    """`apply(loaded, block)` over `items` in blocks on actors that each ran `load()` once; one
    result per item, in input order (`options`: `EngineOptions`). Items and results travel as JSON
    (`_encode`); `load` and `apply` are module-level functions or `functools.partial`s of them, so
    that Ray ships a reference to code, and no model travels from the driver."""
    engine = EngineOptions(**options)
    if not items:
        return []
    rows = [{"index": i, "item": _encode(x)} for i, x in enumerate(items)]
    out: list[Any] = [None] * len(items)
    with _session(engine) as ray:
        mapped = _actor_map(ray, rows, PassWorker, {"load": load, "apply": apply}, engine)
        for batch in mapped.iter_batches(batch_size=None, batch_format="numpy"):
            for i, r in zip(batch["index"], batch["result"], strict=True):
                out[int(i)] = _decode(str(r))
    return out


@dataclass(frozen=True)
class RayPasses:
    """Evaluation's per-text model passes (`steer.evaluation.metrics.Scorers.engine`) on Ray workers that load
    the profile's model and, when a similarity is asked for, the encoder:
    `passes.many([("nll", texts), ("similarity", [(output, source), …])])`, in one Ray pass."""

    profile_path: str
    encoder: str  # the similarity encoder: the evaluation encoder, or the selection one for tuning
    device: str = "cpu"
    options: tuple[tuple[str, Any], ...] = ()

    def many(self, requests: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        items = [(op, x) for op, xs in requests for x in xs]
        load = functools.partial(_WorkerScorers, self.profile_path, self.encoder, self.device)
        flat = iter(map_on_ray(load, _evaluation_passes, items, **dict(self.options)))
        return [[next(flat) for _ in xs] for _, xs in requests]


class _WorkerScorers:
    """A worker's scorers, each model loaded on first use (an NLL-only pass loads no encoder)."""

    def __init__(self, profile_path: str, encoder: str, device: str) -> None:
        self.profile_path, self.encoder, self.device = profile_path, encoder, device

    @functools.cached_property
    def fluency_lm(self) -> Any:
        from steer.runs.service import load_for_profile

        return load_for_profile(self.profile_path, device=self.device)[1]

    @functools.cached_property
    def embedder(self) -> Any:
        from steer.scoring.encoders import shared_embedder

        return shared_embedder(self.encoder, device=self.device)


def _evaluation_passes(scorers: Any, block: list[tuple[str, Any]]) -> list[Any]:
    """A block of (pass, item) pairs: each pass run once over its items, results in block order."""
    from steer.evaluation.metrics import run_pass

    out: list[Any] = [None] * len(block)
    for op in dict.fromkeys(op for op, _ in block):
        where = [j for j, (o, _) in enumerate(block) if o == op]
        for j, value in zip(where, run_pass(scorers, op, [block[j][1] for j in where]), strict=True):
            out[j] = value
    return out


def rank_on_ray(
    profile_path: str,
    probe_path: str,
    rank: Callable[[Any, list[Any]], list[Any]],
    items: Sequence[Any],
    *,
    device: str = "cpu",
    **options: Any,
) -> list[Any]:
    """Rerank's scoring pass on Ray workers that each load the profile, its model, the probe and the
    selection encoder once: `rank(reranker, block)` per block of items."""
    return map_on_ray(functools.partial(_reranker, profile_path, probe_path, device), rank, items, **options)


def _reranker(profile_path: str, probe_path: str, device: str) -> Any:
    from steer.generation.rerank import Reranker
    from steer.generation.steerer import Steerer
    from steer.profiling.probe import StyleProbe
    from steer.runs.service import load_for_profile
    from steer.scoring.encoders import SELECTION_ENCODER, shared_embedder

    prof, lm = load_for_profile(profile_path, device=device)
    return Reranker(Steerer(lm, prof), StyleProbe.load(probe_path), shared_embedder(SELECTION_ENCODER, device=device))


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
        local = {} if address else {"num_cpus": max(2, workers)}
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR", **local)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


@contextmanager
def _session(engine: EngineOptions) -> Iterator[Any]:
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


def _actor_map(
    ray: Any, rows: list[dict[str, Any]], worker: type, kwargs: dict[str, Any], engine: EngineOptions
) -> Any:
    """`rows` as a Ray Dataset of `block_size` rows per block, mapped through a pool of long-lived
    `worker` actors."""
    dataset = ray.data.from_items(rows, override_num_blocks=max(1, math.ceil(len(rows) / engine.block_size)))
    with warnings.catch_warnings():
        # Ray Data (≥ 2.51) has no named parameter for a bounded number of actor restarts, and
        # its default is to restart forever — a block that kills every worker would never end.
        # `max_restarts` still passes through ray_remote_args (deprecated, removed in 2.64: the
        # extra pins ray < 2.64).
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        return dataset.map_batches(
            worker,
            fn_constructor_kwargs=kwargs,
            batch_size=engine.block_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=engine.workers),
            num_cpus=1,
            num_gpus=engine.gpus_per_worker or None,
            max_restarts=engine.max_retries,
            max_task_retries=engine.max_retries,
            **engine.worker_env(),
        )
