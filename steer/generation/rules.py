"""What holds each row of a batch while it decodes, built from the call's plan: the edit hooks of
each forward pass, the bans and the bonus on the next token, and when a row stops.

Why here and not in the steerer: these are the plan's rows turned into `transformers` processors,
stopping criteria and hooks; the steerer only encodes, runs the decoder and reads the rows back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from torch import Tensor, nn

from steer.generation.decoding import StepHooks
from steer.generation.keeping import MarkerPenalty, SourceWordBonus
from steer.generation.plan import BatchLayout, CallPlan
from steer.generation.repetition import NoRepeatGeneratedNGram, NoThirdCopy, StopOnLoop
from steer.generation.replies import NoInstructionEcho, StopAtAnswer, cleaner
from steer.model.hooks import edit_neurons

ECHO_SIZE = 3  # the echo guard bans copying any 3 tokens of the instruction that the source lacks


def step_edits(sites: Sequence[nn.Module], plan: CallPlan, layout: BatchLayout) -> StepHooks:
    """The edit hooks of one forward pass: every edited candidate's edit on its rows among those
    the pass holds (the decoder drops finished rows, so each pass gets hooks for its own rows)."""
    pairs = zip(plan.candidates, plan.edits, strict=True)
    edited = [(k, c.positions, edit) for k, (c, edit) in enumerate(pairs) if len(edit)]

    @contextmanager
    def hooks(held: Tensor) -> Iterator[None]:
        with ExitStack() as stack:
            for k, positions, edit in edited:
                stack.enter_context(edit_neurons(sites, edit, positions, layout.edit_rows(k, held)))
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
        processors.append(NoThirdCopy(prompt_length, decode))
    if first.no_repeat_ngram:
        processors.append(NoRepeatGeneratedNGram(first.no_repeat_ngram, prompt_length))
    if first.echo_guard and plan.instruction.strip():
        processors.append(
            NoInstructionEcho(
                prompt_length,
                layout.per_row([plan.first_tokens[i] for i in rows]),
                layout.per_row([plan.echo_grams[i] for i in rows]),
                ECHO_SIZE,
            )
        )
    beta = layout.per_candidate([c.keep_words for c in plan.candidates])  # keep-words: +β words, −β markers
    if plan.keep_tokens:
        processors.append(SourceWordBonus(prompt_length, layout.per_row([plan.keep_tokens[i] for i in rows]), beta))
    if plan.marker_tokens:
        processors.append(MarkerPenalty(prompt_length, layout.per_row([plan.marker_tokens[i] for i in rows]), beta))
    return processors


def stopping_rules(plan: CallPlan, row_rejects: list[Any], prompt_length: int, decode: Callable[..., str]) -> Any:
    """With cleaning on, a row stops once its answer line is complete (the same cleaned output),
    and, with the loop guard, once its answer loops (it would be trimmed)."""
    from transformers import StoppingCriteriaList

    first = plan.candidates[0]
    stopping = StoppingCriteriaList(
        [StopAtAnswer(decode, prompt_length, opening=plan.opening, rejects=row_rejects)] if first.clean else []
    )
    if first.clean and first.loop_guard:
        cleaners = [cleaner(plan.opening, reject) for reject in row_rejects]
        stopping.append(StopOnLoop(decode, prompt_length, cleaners))
    return stopping
