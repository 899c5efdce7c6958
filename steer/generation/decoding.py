"""One decoding step, planned and run: the batch plan (which rows of a batch belong to which
candidate recipe, its edit and its guidance pair), the hooks, processors and stopping criteria
each step runs with, and the greedy loop that runs the model on the unfinished rows only.

The plan (`CallPlan`, `BatchLayout`) is immutable, so the offset arithmetic lives in one place.
Rows leave a batch as they finish: the loop narrows the layout to the rows each forward pass holds
(`edit_rows(k, held)`) and that pass's edit hooks are built from the narrowed rows, while the
layout keeps describing the batch as it was planned, which is what outputs are read back by.

Why a loop of steer's own: `transformers`' `generate()` keeps every row of a batch in every
forward pass until the last row stops, padding the finished ones; a rerank ladder decodes six rows
per text, and the longest reply would set the number of steps for all of them. Here a finished
row leaves the KV cache (`Cache.reorder_cache`) and the model's batch. Everything else is
`generate()`'s greedy loop: the same first call (the prompt, or its last token after a shared
prefill), the same position ids and attention mask, the same processors and criteria in the same
order (min-new-tokens first, EOS and the token limit among the criteria), and finished rows
padded — so processors written for `generate()` (`steer.generation.processors`, `.stopping`) run unchanged
and the returned sequences have `generate()`'s layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from steer.generation.processors import (
    MarkerPenaltyLogitsProcessor,
    NoInstructionEchoLogitsProcessor,
    NoRepeatGeneratedNGramLogitsProcessor,
    NoThirdCopyLogitsProcessor,
    SourceWordBonusLogitsProcessor,
)
from steer.generation.replies import cleaner
from steer.generation.stopping import AnswerStoppingCriteria, LoopStoppingCriteria
from steer.model.hooks import NeuronEdit, NeuronPush, edit_neurons, project_out, push_neurons
from steer.model.prefix import cache_keyword, cache_of, last_logits_kwargs, positions_of
from steer.settings import TransferSettings, parse_schedule

T = TypeVar("T")

# the hooks of one forward pass, given the rows of the full batch it holds (indices, in batch order)
StepHooks = Callable[[Tensor], AbstractContextManager[Any]]

# the fields that only change a candidate's edit; candidates that differ in nothing else share a batch
_EDIT_FIELDS = {"mode", "top_k", "method", "positions", "edit_layers", "amplify_factor", "strength"}
_EDIT_FIELDS |= {"guidance", "alpha", "keep_words", "instruction_contrast", "neutral"}
_EDIT_FIELDS |= {"push", "push_top_k", "push_gate", "push_schedule", "refusal"}


def decoding_groups(candidates: Sequence[TransferSettings]) -> list[list[int]]:
    """Indices of the candidates that can share one batch (`Steerer.transfer_candidates`): those that
    agree on everything but the edit — e.g. a few-shot rung has a prompt of its own. Layer contrast
    and sampling get a group each."""
    groups: dict[str, list[int]] = {}
    for k, c in enumerate(candidates):
        shared = {f: v for f, v in c.to_dict().items() if f not in _EDIT_FIELDS}
        alone = c.contrast or c.temperature > 0
        groups.setdefault(repr([shared, k if alone else None]), []).append(k)
    return list(groups.values())


@dataclass(frozen=True)
class CallPlan:
    """What the batches of one `Steerer.transfer_candidates` call share (built by `Steerer._plan`)."""

    candidates: list[TransferSettings]
    edits: list[NeuronEdit]
    guided: list[bool]  # a guided candidate decodes an unedited and an edited copy of each row
    contrasted: list[bool]  # an instruction-contrasted one decodes each text also under the neutral instruction
    layers: list[int]  # layer contrast's premature layers; [] without contrast
    prompts: list[list[int]]
    truncated: list[bool]
    opening: str
    instruction: str
    rejects: list[Any]  # per text: the echo filter cleaning and stop-at-answer apply
    first_tokens: list[Any]  # per text: the echo guard's banned first tokens ([] when off)
    echo_grams: list[Any]
    keep_tokens: list[list[list[list[int]]]]  # per text, per content word, per spelling: its tokens ([] when off)
    marker_tokens: list[list[list[int]]]  # per text: the spellings of its source-style markers ([] when off)
    share_prefill: bool
    prefix_length: int  # the tokens every prompt starts with, prefilled once per call (0: none shared)
    eos_token_id: Any
    neutral_prompts: list[list[int]]  # per text: its prompt under the neutral instruction ([] when none is contrasted)
    pushes: list[NeuronPush | None] = field(default_factory=list)  # per candidate: its instruction push
    refusals: list[Tensor | None] = field(default_factory=list)  # per candidate: the refusal direction it removes

    def layout(self, size: int) -> BatchLayout:
        """The rows of a batch of `size` texts under every candidate of this call."""
        return BatchLayout(size, tuple(self.guided), tuple(self.contrasted))

    def row_prompts(self, texts: Sequence[int], layout: BatchLayout) -> list[list[int]]:
        """The prompt of every row of a batch of the texts `texts` (indices), copy by copy."""
        out: list[list[int]] = []
        for k in range(len(self.candidates)):
            out += [self.prompts[i] for i in texts]
            if layout.contrasted[k]:
                out += [self.neutral_prompts[i] for i in texts]
            elif layout.guided[k]:
                out += [self.prompts[i] for i in texts]
        return out


@dataclass(frozen=True)
class BatchLayout:
    """The rows of one batch of `size` texts decoded under several candidates at once.

    Candidate k's rows are [offset_k, offset_k + size); a guided candidate's edited copy follows at
    [offset_k + size, offset_k + 2·size), and an instruction-contrasted candidate's rows under the
    neutral instruction follow its own (edited, when it edits) rows there. Batch row r holds text
    r % size of the batch.
    """

    size: int
    guided: tuple[bool, ...]
    contrasted: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if not self.contrasted:
            object.__setattr__(self, "contrasted", (False,) * len(self.guided))

    def _rows(self, k: int) -> int:
        """How many rows candidate k holds: two copies of the batch when guided or contrasted."""
        return 2 * self.size if self.guided[k] or self.contrasted[k] else self.size

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        starts, total = [], 0
        for k in range(len(self.guided)):
            starts.append(total)
            total += self._rows(k)
        return tuple(starts)

    @cached_property
    def total(self) -> int:
        return sum(self._rows(k) for k in range(len(self.guided)))

    @property
    def copies(self) -> int:
        """How many copies of the batch's prompts the batch holds."""
        return self.total // self.size

    def edited_start(self, k: int) -> int:
        """The first row candidate k's edit applies to: its edited copy when guided, else its rows."""
        return self.offsets[k] + (self.size if self.guided[k] else 0)

    def edit_rows(self, k: int, held: Tensor | None = None) -> Tensor | None:
        """Candidate k's edited rows as a mask over the batch, or over the rows `held` (full-batch
        indices: the rows a forward pass still holds once finished rows left); None when the batch
        is k's alone."""
        if self.total == self.size:
            return None
        rows, lo = torch.arange(self.total), self.edited_start(k)
        mask = (rows >= lo) & (rows < lo + self.size)
        return mask if held is None else mask[held.cpu()]

    def guidance_pair(self, k: int, alpha: float, guidance: float) -> tuple[int, int, int, float, float]:
        """`GuidanceLogitsProcessor`'s group for guided candidate k: (unedited start, edited start, size, α, γ)."""
        return (self.offsets[k], self.edited_start(k), self.size, alpha, guidance)

    def contrast_pair(self, k: int, alpha: float, gamma: float) -> tuple[int, int, int, float, float]:
        """`InstructionContrastLogitsProcessor`'s group for contrasted candidate k: (instructed start,
        neutral start, size, α, γ)."""
        return (self.offsets[k], self.offsets[k] + self.size, self.size, alpha, gamma)

    def per_row(self, per_text: Sequence[T]) -> list[T]:
        """A per-text value spread over the batch rows (row r gets text r % size's)."""
        return [per_text[r % self.size] for r in range(self.total)]

    def per_candidate(self, per_candidate: Sequence[T]) -> list[T]:
        """A per-candidate value spread over the batch rows (both copies of a guided or contrasted candidate get it)."""
        out: list[T] = []
        for k in range(len(self.guided)):
            out += [per_candidate[k]] * self._rows(k)
        return out

    def row(self, k: int, j: int) -> int:
        """The batch row of text j under candidate k (its unedited copy when guided, its instructed one when
        contrasted)."""
        return self.offsets[k] + j


ECHO_SIZE = 3  # the echo guard bans copying any 3 tokens of the instruction that the source lacks


def step_edits(
    sites: Sequence[nn.Module], plan: CallPlan, layout: BatchLayout, blocks: Sequence[nn.Module] | None = None
) -> StepHooks:
    """The edit hooks of one forward pass: every edited candidate's edit, refusal projection and
    instruction push on its rows among those the pass holds (the decoder drops finished rows, so each
    pass gets hooks for its own rows). The push's schedule counts the passes: the n-th pass predicts
    the n-th generated token."""
    pairs = zip(plan.candidates, plan.edits, strict=True)
    edited = [(k, c.positions, edit) for k, (c, edit) in enumerate(pairs) if len(edit)]
    pushed = [(k, push, parse_schedule(plan.candidates[k].push_schedule)) for k, push in enumerate(plan.pushes) if push]
    removed = [(k, r, plan.candidates[k].refusal) for k, r in enumerate(plan.refusals) if r is not None]
    step = [0]

    @contextmanager
    def hooks(held: Tensor) -> Iterator[None]:
        with ExitStack() as stack:
            for k, positions, edit in edited:
                stack.enter_context(edit_neurons(sites, edit, positions, layout.edit_rows(k, held), blocks))
            for k, direction, share in removed:
                stack.enter_context(project_out(sites, direction, share, layout.edit_rows(k, held)))
            for k, push, (first, decay) in pushed:
                if first is None or step[0] < first:
                    stack.enter_context(push_neurons(sites, push, decay ** step[0], layout.edit_rows(k, held)))
            step[0] += 1
            yield

    return hooks


def token_rules(
    plan: CallPlan, rows: list[int], layout: BatchLayout, prompt_length: int, decode: Callable[..., str]
) -> Any:
    """The logits processors on raw scores: the bans (loop guard, n-gram ban, echo guard), then the
    keep-words bonus and its penalty on the source style's markers. They go first, so both guided
    copies see them and the plausibility filters of guidance and contrast choose among what
    remains."""
    from transformers import LogitsProcessorList

    first = plan.candidates[0]
    processors = LogitsProcessorList()
    if first.loop_guard:
        processors.append(NoThirdCopyLogitsProcessor(prompt_length, decode))
    if first.no_repeat_ngram:
        processors.append(NoRepeatGeneratedNGramLogitsProcessor(first.no_repeat_ngram, prompt_length))
    if first.echo_guard and plan.instruction.strip():
        processors.append(
            NoInstructionEchoLogitsProcessor(
                prompt_length,
                layout.per_row([plan.first_tokens[i] for i in rows]),
                layout.per_row([plan.echo_grams[i] for i in rows]),
                ECHO_SIZE,
            )
        )
    beta = layout.per_candidate([c.keep_words for c in plan.candidates])  # keep-words: +β words, −β markers
    if plan.keep_tokens:
        processors.append(
            SourceWordBonusLogitsProcessor(prompt_length, layout.per_row([plan.keep_tokens[i] for i in rows]), beta)
        )
    if plan.marker_tokens:
        processors.append(
            MarkerPenaltyLogitsProcessor(prompt_length, layout.per_row([plan.marker_tokens[i] for i in rows]), beta)
        )
    return processors


def stopping_rules(plan: CallPlan, row_rejects: list[Any], prompt_length: int, decode: Callable[..., str]) -> Any:
    """With cleaning on, a row stops once its answer line is complete (the same cleaned output),
    and, with the loop guard, once its answer loops (it would be trimmed)."""
    from transformers import StoppingCriteriaList

    first = plan.candidates[0]
    stopping = StoppingCriteriaList(
        [AnswerStoppingCriteria(decode, prompt_length, opening=plan.opening, rejects=row_rejects)]
        if first.clean
        else []
    )
    if first.clean and first.loop_guard:
        cleaners = [cleaner(plan.opening, reject) for reject in row_rejects]
        stopping.append(LoopStoppingCriteria(decode, prompt_length, cleaners))
    return stopping


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
