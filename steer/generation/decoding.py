"""Greedy decoding that stops computing a row once it is finished: each step runs the model on the
unfinished rows only, while logits processors and stopping criteria see the whole batch.

Why: `transformers`' `generate()` keeps every row of a batch in every forward pass until the last
row stops, padding the finished ones. A rerank ladder decodes six rows per text, and in a batch of
48 rows the longest reply sets the number of steps for all of them: on the formality dev texts
fewer than half the row-steps were real work. Here a finished row leaves the KV cache
(`Cache.reorder_cache`) and the model's batch; per-row edit hooks are registered for each forward
pass with the rows that pass holds (`hooks`), so no hook keeps state the loop must update.
Everything else is `generate()`'s greedy loop: the same first call (the prompt, or
its last token after a shared prefill), the same position ids and attention mask, the same
processors and criteria in the same order (min-new-tokens first, EOS and the token limit among the
criteria), and finished rows padded — so processors written for `generate()` run unchanged and
the returned sequences have `generate()`'s layout.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn

# the hooks of one forward pass, given the rows of the full batch it holds (indices, in batch order)
StepHooks = Callable[[Tensor], AbstractContextManager[Any]]


def _cache_name() -> str:
    """The keyword `forward` takes the KV cache by: `cache` (transformers ≥ 5.20) or `past_key_values`."""
    from transformers.generation import utils as generation

    return "cache" if "cache" in getattr(generation, "ALL_CACHE_NAMES", ()) else "past_key_values"


def _cache_of(out: Any) -> Any:
    return out.get("cache") if out.get("cache") is not None else out.get("past_key_values")


def _logits_kwargs(model: nn.Module) -> dict[str, Any]:
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
    out = model(input_ids=torch.tensor([list(prefix)], device=device), use_cache=True, **_logits_kwargs(model))
    return _cache_of(out)


def _expanded(model: nn.Module, prefix: Any, rows: int) -> Any:
    """A new cache holding `prefix`'s one row for each of `rows` rows: expanded views, copied once
    into the new cache; `prefix` itself is left as it was, for the next batch."""
    from transformers import DynamicCache

    layers = [(layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in prefix.layers]
    return DynamicCache(ddp_cache_data=layers, config=model.config)


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
    cache = None if prefix is None else _expanded(model, prefix, ids.shape[0])
    if ids.shape[1] - 1 > start:
        inputs = {
            "input_ids": ids[:, start:-1].to(device),
            "attention_mask": mask[:, :-1].to(device),
            "position_ids": positions_of(mask)[:, start:-1].to(device),
        }
        if cache is not None:
            inputs[_cache_name()] = cache
        cache = _cache_of(model(**inputs, use_cache=True, **_logits_kwargs(model)))
    if cache is not None and copies > 1:
        cache.reorder_cache(torch.arange(ids.shape[0]).repeat(copies).to(device))
    return cache


def _end_rules(
    prompt_length: int, min_new_tokens: int, eos_token_id: int | list[int] | None, stopping: Any, device: Any
) -> tuple[list[Any], list[Any]]:
    """`generate()`'s rules at the end of a reply: the processor that holds EOS back for
    `min_new_tokens`, and the stopping criteria (the caller's, then EOS)."""
    from transformers.generation.logits_process import MinNewTokensLengthLogitsProcessor
    from transformers.generation.stopping_criteria import EosTokenCriteria

    eos = None if eos_token_id is None else torch.tensor(eos_token_id, device=device).reshape(-1)
    first = (
        [MinNewTokensLengthLogitsProcessor(prompt_length, min_new_tokens, eos, device=device)]
        if min_new_tokens and eos is not None
        else []
    )
    return first, [*stopping, *([EosTokenCriteria(eos)] if eos is not None else [])]


def _step_scores(model: nn.Module, inputs: dict[str, Any], active: Tensor, rows: int) -> tuple[Tensor, Any]:
    """One forward step on the active rows: float32 next-token scores for every row of the batch
    (zeros for rows that left it, as `generate()` gives finished rows) and the updated cache."""
    out = model(**inputs, return_dict=True)
    logits = out.logits[:, -1].to(dtype=torch.float32)
    if active.shape[0] == rows:
        return logits.clone(), _cache_of(out)
    return logits.new_zeros(rows, logits.shape[-1]).index_copy(0, active, logits), _cache_of(out)


@torch.inference_mode()
def greedy_decode(
    model: nn.Module,
    ids: Tensor,
    mask: Tensor,
    *,
    max_new_tokens: int,
    pad_token_id: int,
    eos_token_id: int | list[int] | None,
    min_new_tokens: int = 0,
    processors: Any = (),
    stopping: Any = (),
    cache: Any = None,
    hooks: StepHooks | None = None,
    compact: bool = True,
) -> Tensor:
    """Decode `ids` (left-padded, [rows, length], with `mask`) greedily; returns [rows, length + steps]
    as `generate(do_sample=False)` would, finished rows padded with `pad_token_id`.

    `processors` and `stopping` are callables `(input_ids, scores)` as in transformers (e.g. a
    `LogitsProcessorList`); they always see every row — a finished row's scores are zeros and its
    token is replaced by padding, as in `generate()`. `cache` may hold a prefix of every row
    (`shared_prefix_cache`); the rest of the prompt is fed in the first call. With `compact`,
    finished rows leave the model's batch; `hooks(held)` is entered around each forward pass with
    the full-batch indices of the rows it holds, so per-row edits (`hooks.edit_neurons` with
    `BatchLayout.edit_rows(k, held)`) are built for exactly that pass. `compact=False` keeps every
    row to the end, for hooks registered outside that cannot follow a shrinking batch (layer
    contrast reads the whole batch's states).
    """
    device = next(model.parameters()).device
    first, criteria = _end_rules(ids.shape[1], min_new_tokens, eos_token_id, stopping, device)
    return _loop(model, ids, mask, max_new_tokens, pad_token_id, [*first, processors], criteria, cache, hooks, compact)


@torch.inference_mode()
def compact_greedy(
    model: nn.Module,
    input_ids: Tensor,
    logits_processor: Any,
    stopping_criteria: Any,
    generation_config: Any,
    synced_gpus: bool = False,
    streamer: Any = None,
    hooks: StepHooks | None = None,
    compact: bool = True,
    **model_kwargs: Any,
) -> Tensor:
    """steer's decoding loop as `model.generate(..., custom_generate=compact_greedy)`: `generate()`
    prepares the batch, the processors (min-new-tokens first) and the stopping criteria (the token
    limit, EOS, the caller's) from its generation config, and this loop drops finished rows (`hooks`
    and `compact` as in `greedy_decode`). Greedy only; a user's own `generate()` call gets steer's
    speed-up this way, with transformers' argument handling."""
    if generation_config.do_sample or (generation_config.num_beams or 1) > 1 or streamer is not None or synced_gpus:
        raise ValueError("compact_greedy decodes greedily, one beam, without a streamer or synced GPUs")
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    mask = model_kwargs.get("attention_mask")
    mask = torch.ones_like(input_ids) if mask is None else mask
    pad = generation_config._pad_token_tensor
    pad = int(pad.reshape(-1)[0]) if pad is not None else 0
    max_new = generation_config.max_length - input_ids.shape[1]
    return _loop(
        model, input_ids, mask, max_new, pad, [logits_processor], list(stopping_criteria), cache, hooks, compact
    )


def _loop(
    model: nn.Module,
    ids: Tensor,
    mask: Tensor,
    max_new_tokens: int,
    pad_token_id: int,
    processors: list[Any],
    criteria: list[Any],
    cache: Any,
    hooks: StepHooks | None,
    compact: bool,
) -> Tensor:
    """The loop both entry points share: each of `processors` in turn, then the argmax; a row is
    done once any of `criteria` says so."""
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    rows = ids.shape[0]
    hooks = hooks or (lambda _held: nullcontext())
    extra = {"use_cache": True, **_logits_kwargs(model)}
    cache_key = _cache_name()
    # generate() drops an all-ones mask (no padding) and relies on causal attention alone
    keep_mask = not bool((mask == 1).all())
    positions = positions_of(mask)
    done_tokens = cache.get_seq_length() if cache is not None else 0
    step_ids, step_mask = ids[:, done_tokens:], mask
    step_positions = positions[:, done_tokens:]
    unfinished = torch.ones(rows, dtype=torch.bool, device=device)
    active = torch.arange(rows, device=device)
    sequences = ids
    for _ in range(max_new_tokens):
        inputs = {"input_ids": step_ids, "position_ids": step_positions, **extra}
        if keep_mask:
            inputs["attention_mask"] = step_mask
        if cache is not None:
            inputs[cache_key] = cache
        with hooks(active):
            scores, cache = _step_scores(model, inputs, active, rows)
        for processor in processors:
            scores = processor(sequences, scores) if processor else scores
        next_tokens = scores.argmax(-1)
        next_tokens = torch.where(unfinished, next_tokens, torch.full_like(next_tokens, pad_token_id))
        sequences = torch.cat([sequences, next_tokens[:, None]], dim=-1)
        for criterion in criteria:
            unfinished = unfinished & ~criterion(sequences, scores).to(device)
        if not bool(unfinished.any()):
            break
        last_positions = step_positions[:, -1:]
        step_mask = torch.cat([step_mask, step_mask.new_ones(step_mask.shape[0], 1)], dim=-1)
        still = unfinished[active]
        if compact and not bool(still.all()):
            kept = still.nonzero().flatten()
            cache.reorder_cache(kept)
            active, step_mask, last_positions = active[kept], step_mask[kept], last_positions[kept]
        step_ids = sequences[active, -1:]
        step_positions = last_positions + 1
    return sequences
