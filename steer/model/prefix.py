"""KV caches of prompt prefixes: a prefix every prompt shares, prefilled once and expanded per batch.

Why: a rewrite prompt is mostly its chat template and instruction, the same for every text of a
direction (and a judge's prompt mostly its grading instructions); a guided candidate or a rerank
ladder decodes each prompt several times. Prefilling what rows share once and handing every row a
view of it is most of the prefill's work saved. Decoding (`steer.generation.decoding`) and the LLM
judge (`steer.evaluation.llm_judge`) both sit above this module.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn


def cache_keyword() -> str:
    """The keyword `forward` takes the KV cache by: `cache` (transformers ≥ 5.20) or `past_key_values`."""
    from transformers.generation import utils as generation

    return "cache" if "cache" in getattr(generation, "ALL_CACHE_NAMES", ()) else "past_key_values"


def cache_of(out: Any) -> Any:
    return out.get("cache") if out.get("cache") is not None else out.get("past_key_values")


def last_logits_kwargs(model: nn.Module) -> dict[str, Any]:
    """`logits_to_keep=1` where `forward` takes it (only the last position's logits are needed)."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def positions_of(mask: Tensor) -> Tensor:
    """Position ids under left padding, by `generate()`'s rule: real tokens count from 0, padding is 0."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


def common_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every prompt shares, leaving each at least two of its own (the text's
    last token is fed by the decoding loop, and a row must have something to prefill per row)."""
    if len(prompts) < 1:
        return 0
    first, shortest = prompts[0], min(len(p) for p in prompts)
    length = 0
    while length < shortest - 2 and all(p[length] == first[length] for p in prompts):
        length += 1
    return length


def prefix_cache(model: nn.Module, prefix: Sequence[int]) -> Any:
    """The unedited KV cache of the tokens every prompt of a call starts with (chat template, system
    prompt, instruction), computed once for one row; `shared_prefix_cache` expands it to a batch.

    Why: with a chat template most of a rewrite prompt is the same for every text of a direction, and
    prefilling it again for every row of every batch was most of the prefill's work. Call it before
    any edit hook is registered."""
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([list(prefix)], device=device), use_cache=True, **last_logits_kwargs(model))
    return cache_of(out)


def expand_cache(model: nn.Module, prefix: Any, rows: int) -> Any:
    """A new cache holding `prefix`'s one row for each of `rows` rows: expanded views, copied once
    into the new cache; `prefix` itself is left as it was, for the next batch."""
    from transformers import DynamicCache

    layers = [(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in prefix.layers]
    return DynamicCache(ddp_cache_data=layers, config=cast(Any, model).config)


def shared_prefix_cache(model: nn.Module, ids: Tensor, mask: Tensor, copies: int, prefix: Any = None) -> Any:
    """The unedited KV cache of each prompt but its last token, computed once and tiled `copies`
    times (in the order of `ids.repeat(copies, 1)`), or None when there is nothing to prefill.

    Why: a guided candidate decodes its prompt twice (unedited and edited) and a rerank ladder
    K times; with edits only at generated positions every copy's prefix is the same, so one
    prefill serves them all (the last prompt token, which predicts the first new one and is
    edited, is left to the decoding loop). With `prefix` (`prefix_cache`: the first P columns that
    every row of `ids` shares, which `ids` must hold as its first P columns, padding after them),
    only the rows' own tokens are prefilled. Call it before any edit hook is registered.
    """
    device = next(model.parameters()).device
    start = 0 if prefix is None else prefix.get_seq_length()
    cache = None if prefix is None else expand_cache(model, prefix, ids.shape[0])
    if ids.shape[1] - 1 > start:
        inputs = {
            "input_ids": ids[:, start:-1].to(device),
            "attention_mask": mask[:, :-1].to(device),
            "position_ids": positions_of(mask)[:, start:-1].to(device),
        }
        if cache is not None:
            inputs[cache_keyword()] = cache
        cache = cache_of(model(**inputs, use_cache=True, **last_logits_kwargs(model)))
    if cache is not None and copies > 1:
        cache.reorder_cache(torch.arange(ids.shape[0]).repeat(copies).to(device))
    return cache


def extend_cache(model: nn.Module, ids: Tensor, mask: Tensor, cache: Any) -> tuple[Tensor, Any]:
    """Feed `ids` (new columns after what `cache` holds) and return (each row's last-position
    logits, the extended cache); `mask` covers the cached columns and the new ones, so padding may
    sit anywhere (position ids by `positions_of`). With `cache` None it is a plain prefill."""
    device = next(model.parameters()).device
    inputs: dict[str, Any] = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": positions_of(mask)[:, -ids.shape[1] :].to(device),
    }
    if cache is not None:
        inputs[cache_keyword()] = cache
    out = model(**inputs, use_cache=True, **last_logits_kwargs(model))
    return out.logits[:, -1, :], cache_of(out)
