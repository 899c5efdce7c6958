"""Decoding guards against loops: processors that ban the third copy of a unit or a repeated n-gram,
and a per-row stop once a reply loops by the rule in `steer.scoring.loops` (the metric's own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from transformers import LogitsProcessor, StoppingCriteria

from steer.config import SteerError
from steer.scoring.loops import loop_point


def third_copy_tokens(tokens: Sequence[int], max_unit: int, key: Callable[[int], str] | None = None) -> set[int]:
    """Tokens that would start a third consecutive copy of a unit the sequence ends with twice.

    For every unit length L ≤ `max_unit`, if `tokens` ends with U U (|U| = L), the first token of
    each copy is returned. With `key` (token → normalised text), copies are compared by key, so
    "Ha ha" (tokens "Ha", " ha") counts as two copies of one word, as the metric sees it.
    """
    keys: Sequence[object] = [key(t) for t in tokens] if key is not None else tokens
    banned: set[int] = set()
    n = len(tokens)
    for size in range(1, min(max_unit, n // 2) + 1):
        if keys[n - size :] == keys[n - 2 * size : n - size]:
            banned.update((tokens[n - size], tokens[n - 2 * size]))
    return banned


class NoThirdCopy(LogitsProcessor):
    """Forbid a reply from starting the third consecutive copy of anything it just said twice.

    Only generated tokens count (from `prompt_length` on), so a rewrite may copy the source text
    freely. Banning happens on the raw scores, before guidance or contrast, so their plausibility
    filters choose among the tokens that remain: a banned loop is replaced by the next thing the
    model finds plausible, never by an implausible token. Two copies stay allowed ("very very").
    """

    def __init__(
        self, prompt_length: int, decode: Callable[[list[int]], str] | None = None, max_unit: int = 16
    ) -> None:
        self.prompt_length, self.max_unit, self.decode = prompt_length, max_unit, decode
        self._keys: dict[int, str] = {}
        self.banned = 0  # how many (row, token) bans fired: a diagnostic for tests and benchmarks

    def _key(self, token: int) -> str:
        if token not in self._keys:
            assert self.decode is not None
            # tokens that decode to nothing visible (whitespace, unused ids) compare by id
            self._keys[token] = self.decode([token]).strip().lower() or f"#{token}"
        return self._keys[token]

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        key = self._key if self.decode is not None else None
        rows, tokens = [], []
        for row, generated in enumerate(input_ids[:, self.prompt_length :].tolist()):
            for token in third_copy_tokens(generated, self.max_unit, key):
                rows.append(row)
                tokens.append(token)
        if not rows:
            return scores
        self.banned += len(rows)
        out = scores.clone()
        out[rows, tokens] = float("-inf")
        return out


class StopOnLoop(StoppingCriteria):
    """Per-row stopping once a row's answer (as `clean` sees it) loops: what follows would be trimmed
    by `trim_loop` anyway, so decoding it is wasted work."""

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


class NoRepeatGeneratedNGram(LogitsProcessor):
    """Forbid a token that would repeat an n-gram the reply already contains.

    Unlike transformers' `no_repeat_ngram_size`, only generated tokens count (positions from
    `prompt_length` on), so the rewrite may still copy phrases of the source text; what it may
    not do is loop ("I swear, I swear, I swear, …"), which steering tends to provoke.
    """

    def __init__(self, size: int, prompt_length: int) -> None:
        if size < 1:
            raise SteerError(f"`no_repeat_ngram` must be ≥ 1 (or 0 for off), got {size}")
        self.size, self.prompt_length = size, prompt_length

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        generated = input_ids[:, self.prompt_length :].tolist()
        n = self.size
        banned_rows, banned_tokens = [], []
        for row, tokens in enumerate(generated):
            if len(tokens) < n:
                continue
            prefix = tuple(tokens[len(tokens) - n + 1 :]) if n > 1 else ()
            for i in range(len(tokens) - n + 1):
                if tuple(tokens[i : i + n - 1]) == prefix:
                    banned_rows.append(row)
                    banned_tokens.append(tokens[i + n - 1])
        if not banned_rows:
            return scores
        out = scores.clone()
        out[banned_rows, banned_tokens] = float("-inf")
        return out
