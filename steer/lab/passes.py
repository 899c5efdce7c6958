"""A run's decoding passes: a direction's texts under several recipes at once, here (over this
machine's processes, `map_sharded`) or on Ray workers, every finished batch handed on as it ends
(`done(k, indices, results)`: recipe k's rewrites of those texts) so the run's store can keep it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from steer.distributed import map_sharded
from steer.generation.steerer import TransferResult
from steer.lab.experiment import Direction
from steer.rewriting.service import Corpora, RewriteService
from steer.settings import TransferSettings

Done = Callable[[int, list[int], list[Any]], None]


def decode_here(
    service: RewriteService, direction: Direction, recipes: list[TransferSettings], todo: list[int], done: Done
) -> list[list[TransferResult]]:
    """result[k][j]: text todo[j] under recipe k, every recipe in one batch per text group
    (`RewriteService.candidates`), split over this machine's processes."""

    def share(part: list[tuple[int, str]]) -> list[tuple[TransferResult, ...]]:
        def on_batch(rows: list[int], batch: list[list[TransferResult]]) -> None:
            for k, results in enumerate(batch):
                done(k, [part[r][0] for r in rows], results)

        texts = [t for _, t in part]
        decoded = service.candidates(texts, recipes, on_batch=on_batch)
        return list(zip(*decoded, strict=True))

    items = [(i, direction.texts[i]) for i in todo]
    per_text = map_sharded(share, items, size=lambda item: len(item[1]))
    return [[candidates[k] for candidates in per_text] for k in range(len(recipes))]


def decode_recipes_on_ray(
    profile_path: str,
    direction: Direction,
    recipes: list[TransferSettings],
    todo: list[int],
    done: Done,
    options: dict[str, Any],
    corpora: Corpora | None = None,
) -> list[list[TransferResult]]:
    """The same on Ray workers (`steer.rewriting.on_ray.decode_texts_on_ray`), one pass per recipe — the
    same outputs, since no output depends on its batch; `options`: device, progress, engine options;
    `corpora`: the texts few-shot and keep-words recipes read (`RewriteJob.corpora`)."""
    from steer.rewriting.on_ray import decode_texts_on_ray

    texts = [direction.texts[i] for i in todo]
    return [
        decode_texts_on_ray(
            profile_path,
            direction.source,
            direction.target,
            recipe,
            texts,
            on_block=functools.partial(_arrived, done, k, todo),
            corpora=corpora,
            **options,
        )  # fmt: skip
        for k, recipe in enumerate(recipes)
    ]


def _arrived(done: Done, k: int, todo: list[int], positions: list[int], results: list[TransferResult]) -> None:
    """A Ray block of recipe k finished: its positions in `todo` → the direction's text indices."""
    done(k, [todo[j] for j in positions], results)
