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

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn

from steer.model.prefix import cache_keyword, cache_of, last_logits_kwargs, positions_of

# the hooks of one forward pass, given the rows of the full batch it holds (indices, in batch order)
StepHooks = Callable[[Tensor], AbstractContextManager[Any]]


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
        return logits.clone(), cache_of(out)
    return logits.new_zeros(rows, logits.shape[-1]).index_copy(0, active, logits), cache_of(out)


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
    extra = {"use_cache": True, **last_logits_kwargs(model)}
    cache_key = cache_keyword()
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
