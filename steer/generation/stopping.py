"""steer's stopping criteria: when a row of a batch is done decoding, as plain `transformers`
`StoppingCriteria` (a user's own `model.generate(..., stopping_criteria=...)` can use them too):
once its answer is complete (`AnswerStoppingCriteria`, by the rule cleaning reads answers with,
`steer.generation.replies`) or once its answer loops (`LoopStoppingCriteria`, by the loop rule of
`steer.scoring.loops`). The logits processors are in `steer.generation.processors`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from transformers import StoppingCriteria

from steer.generation.replies import OPENING_QUOTES, Reject, answer_complete
from steer.scoring.loops import loop_point


class AnswerStoppingCriteria(StoppingCriteria):
    """Per-row stopping: a row is done once its reply's answer is complete (`answer_complete`).

    A row is checked only when its newest token holds a newline or a closing quote mark, so the
    cost per step is a dictionary look-up per row. `opening` is the text the reply was primed
    with (it is part of the reply); `rejects[row]` refuses a row's echo lines (None: none).
    The cleaned outputs are exactly those of decoding to the token limit.

    Args:
        decode: `tokenizer.decode`. prompt_length: the prompt's tokens. opening: the reply's primed
        opening. rejects: per row, the lines cleaning refuses (`echo_filter`; None: none).

    Example: `AnswerStoppingCriteria(tokenizer.decode, inputs["input_ids"].shape[1])`.
    """

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        prompt_length: int,
        *,
        opening: str = "",
        rejects: Sequence[Reject | None] | None = None,
    ) -> None:
        self.decode, self.prompt_length, self.opening = decode, prompt_length, opening
        self.rejects = rejects
        self._ends: dict[int, bool] = {}
        self.done: torch.Tensor | None = None

    def _may_end(self, token: int) -> bool:
        if token not in self._ends:
            piece = self.decode([token])
            self._ends[token] = "\n" in piece or any(q in piece for q in OPENING_QUOTES.values())
        return self._ends[token]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        if self.done is None or self.done.shape[0] != input_ids.shape[0]:
            self.done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if not self.done[row] and self._may_end(token):
                reply = self.opening + self.decode(input_ids[row, self.prompt_length :].tolist())
                reject = self.rejects[row] if self.rejects is not None else None
                self.done[row] = answer_complete(reply, reject)
        return self.done.to(input_ids.device).clone()


class LoopStoppingCriteria(StoppingCriteria):
    """Per-row stopping once a row's answer (as `clean` sees it) loops: what follows would be trimmed
    by `trim_loop` anyway, so decoding it is wasted work.

    Args:
        decode: `tokenizer.decode`. prompt_length: the prompt's tokens. cleaners: per row, what
        cleaning keeps of a reply (`replies.cleaner`).

    Example: `LoopStoppingCriteria(tokenizer.decode, n, [cleaner(opening, None)] * rows)`.
    """

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        prompt_length: int,
        clean: Callable[[str], str] | Sequence[Callable[[str], str]],
    ) -> None:
        """`clean`: how cleaning reads a reply — one function, or one per batch row."""
        self.decode, self.prompt_length, self.clean = decode, prompt_length, clean
        self.done: Tensor | None = None
        self._boundary: dict[int, bool] = {}

    def _ends_word(self, token: int) -> bool:
        if token not in self._boundary:
            piece = self.decode([token])
            self._boundary[token] = not piece or any(not ch.isalnum() for ch in piece)
        return self._boundary[token]

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs: object) -> Tensor:
        if self.done is None or self.done.shape[0] != input_ids.shape[0]:
            self.done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            # a loop shows at a word's end: check only when the newest token ends one (cached per token)
            if not self.done[row] and self._ends_word(token):
                clean = self.clean if callable(self.clean) else self.clean[row]
                text = clean(self.decode(input_ids[row, self.prompt_length :].tolist()))
                self.done[row] = loop_point(text) is not None
        return self.done.to(input_ids.device).clone()


# The name of steer 0.x, kept for callers' code.
StopAtAnswer = AnswerStoppingCriteria


class InterruptStoppingCriteria(StoppingCriteria):
    """Every row is done once `interrupted()` says so: a server stops a batch whose requests have
    all timed out, or that it is shutting down under, at the next step instead of at the token limit.

    Args:
        interrupted: called once per step; True stops the batch.

    Example: `InterruptStoppingCriteria(lambda: time.monotonic() > deadline)`.
    """

    def __init__(self, interrupted: Callable[[], bool]) -> None:
        self.interrupted = interrupted

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs: object) -> Tensor:
        return torch.full((input_ids.shape[0],), bool(self.interrupted()), dtype=torch.bool, device=input_ids.device)
