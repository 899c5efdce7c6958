"""Past one machine: a rewrite job decoded on Ray Data — long-lived worker actors that each load
the model, profile and probe once, streaming blocks of texts through them, retried when a worker dies.

Why no collectives: steer seeds sampling per text, so a rewrite does not depend on its batch, its
order or its process, and workers never need to talk to each other. The driver (the `steer
transfer` process) sends blocks of (input index, text), receives records, and appends them to
the same resumable partial file one process writes (`records.PartialRecords`): a block is
appended once, when Ray hands its result back — a worker that dies mid-block is restarted and
the block retried, so nothing is lost and nothing is written twice — and `--resume` sends only
the texts the partial file lacks. Records come from `steer.service` in the workers, so they are
byte for byte what one process writes. Ray is an optional extra: `pip install 'steer[ray]'`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from steer.config import SteerError
from steer.records import TransferRecord
from steer.service import RewriteJob, RewriteService

logger = logging.getLogger(__name__)
BLANK = -1  # the index of the request for a blank line's record (no text to decode)
MAX_RETRIES = 3  # restarts of a dead worker, and retries of its block, before the run fails


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
    workers: int = 1,
    gpus_per_worker: float = 0.0,
    address: str | None = None,
    block_size: int = 32,
    max_retries: int = MAX_RETRIES,
    progress: bool = False,
    fault: dict[str, Any] | None = None,
) -> TransferRecord | None:
    """Decode `items[i]` for every i in `todo` on `workers` Ray actors, handing each finished
    block's (index, record) pairs to `append` as it arrives; returns the record of a blank line
    when `need_blank`. `address`: a running Ray cluster (`ray://…` or `auto`); None starts a local
    one. Raises `SteerError` when a block still fails after `max_retries` worker restarts."""
    try:
        import ray
    except ImportError:
        raise SteerError("--engine ray needs Ray; install it with: pip install 'steer[ray]'") from None
    if workers < 1:
        raise SteerError(f"--workers must be at least 1, got {workers}")
    if gpus_per_worker < 0:
        raise SteerError(f"--gpus-per-worker must be ≥ 0, got {gpus_per_worker}")
    rows = [{"index": i, "text": items[i]} for i in todo]
    if need_blank:
        rows.append({"index": BLANK, "text": ""})
    if not rows:
        return None
    started = not ray.is_initialized()
    if started:
        local = {} if address else {"num_cpus": max(2, workers)}
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR", **local)
    blank = None
    context = ray.data.DataContext.get_current()
    bars, data_log = context.enable_progress_bars, logging.getLogger("ray.data")
    level = data_log.level
    context.enable_progress_bars, context.enable_operator_progress_bars = progress, progress
    data_log.setLevel(max(level, logging.WARNING if progress else logging.ERROR))  # Ray Data's own lines; restored
    try:
        dataset = ray.data.from_items(rows, override_num_blocks=max(1, math.ceil(len(rows) / block_size)))
        with warnings.catch_warnings():
            # Ray Data (≥ 2.51) has no named parameter for a bounded number of actor restarts, and
            # its default is to restart forever — a block that kills every worker would never end.
            # `max_restarts` still passes through ray_remote_args (deprecated, removed in 2.64: the
            # extra pins ray < 2.64).
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            decoded = dataset.map_batches(
                RewriteWorker,
                fn_constructor_kwargs={"job": job, "fault": fault},
                batch_size=block_size,
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=workers),
                num_cpus=1,
                num_gpus=gpus_per_worker or None,
                max_restarts=max_retries,
                max_task_retries=max_retries,
            )
        for batch in decoded.iter_batches(batch_size=None, batch_format="numpy"):
            pairs = [
                (int(i), TransferRecord.from_dict(json.loads(r), "a Ray worker's record"))
                for i, r in zip(batch["index"], batch["record"], strict=True)
            ]
            blank = next((r for i, r in pairs if i == BLANK), blank)
            append([(i, r) for i, r in pairs if i != BLANK])
    except ray.exceptions.RayError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise SteerError(
            f"the Ray run failed after {max_retries} retries ({first}); the finished rewrites are saved: "
            "run the same command with --resume"
        ) from None
    finally:
        context.enable_progress_bars = context.enable_operator_progress_bars = bars
        data_log.setLevel(level)
        if started:
            ray.shutdown()
    return blank
