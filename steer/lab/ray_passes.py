"""Scoring on Ray: a pass of per-item model work (evaluation's NLL and similarity, rerank's ranking
of decoded candidates) on actors that build their models once (`map_on_ray`), for `steer run
--engine ray`. The judges are small and stay in the driver.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from steer.generation.steerer import TransferResult
from steer.rewriting.on_ray import EngineOptions, actor_map, session


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
    with session(engine) as ray:
        mapped = actor_map(ray, rows, PassWorker, {"load": load, "apply": apply}, engine)
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
        from steer.rewriting.service import load_profile_and_model

        return load_profile_and_model(self.profile_path, device=self.device)[1]

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
    job: Any, rank: Callable[[Any, list[Any]], list[Any]], items: Sequence[Any], **options: Any
) -> list[Any]:
    """Rerank's scoring pass on Ray workers that each load the rewrite service of `job` (a
    `RewriteJob` with rerank settings: profile, model, probe and selection encoder) once:
    `rank(reranker, block)` per block of items."""
    return map_on_ray(functools.partial(_reranker, job), rank, items, **options)


def _reranker(job: Any) -> Any:
    from steer.rewriting.service import RewriteService

    return RewriteService(job).reranker
