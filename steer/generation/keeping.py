"""Keep the source's content under strong steering: a logits bonus for the first token of each of
the source's content words that the reply has not produced yet.

Why: the strongest rung of the ladder changes the style most, and it also drops the source's
content (formal → informal, dev: 35% of rerank's outputs kept under 40% of the source's content
words, most of them from λ = 3). A bonus β on the source's own content words — only until the
reply has said each once, so it never rewards saying one twice — pulls the reply back to the
source's content while the neuron shift moves its style (the function words, contractions,
punctuation). Applied with the bans, on raw scores, so both copies of a guided row see it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch
from transformers import LogitsProcessor

from steer.scoring.faithfulness import is_stop_word

_SURFACE = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+")


def content_tokens(encode: Callable[[str], list[int]], source: str) -> list[int]:
    """The token ids that begin one of the source's content words, as the reply could spell it:
    with and without a leading space, as written and capitalised."""
    ids: set[int] = set()
    for word in dict.fromkeys(_SURFACE.findall(source)):
        bare = word.strip("'-")
        if len(bare) < 2 or is_stop_word(bare):
            continue
        for form in {bare, bare.capitalize()}:
            for spelled in (form, " " + form):
                tokens = encode(spelled)
                if tokens:
                    ids.add(tokens[0])
    return sorted(ids)


class SourceWordBonus(LogitsProcessor):
    """Add `bonus[row]` to the scores of `tokens[row]` (a row's source content-word tokens) that
    the row has not generated yet; rows with a bonus of 0 are left as they are."""

    def __init__(self, prompt_length: int, tokens: Sequence[Sequence[int]], bonus: Sequence[float]) -> None:
        if len(tokens) != len(bonus):
            raise ValueError(f"{len(tokens)} token lists for {len(bonus)} bonuses")
        self.prompt_length = prompt_length
        self.tokens = [torch.tensor(list(t), dtype=torch.long) for t in tokens]
        self.bonus = [float(b) for b in bonus]
        self._on: dict[torch.device, list[torch.Tensor]] = {}  # the token lists on the scores' device

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.device not in self._on:
            self._on[scores.device] = [t.to(scores.device) for t in self.tokens]
        rows, tokens, values = [], [], []
        for row, (ids, beta) in enumerate(zip(self._on[scores.device], self.bonus, strict=True)):
            if beta == 0 or not len(ids):
                continue
            unsaid = ids[~torch.isin(ids, input_ids[row, self.prompt_length :])]
            rows.append(torch.full_like(unsaid, row))
            tokens.append(unsaid)
            values.append(torch.full(unsaid.shape, beta, dtype=scores.dtype, device=scores.device))
        if not rows:
            return scores
        # one out-of-place copy of the scores, with β added where a row still owes a word
        return scores.index_put((torch.cat(rows), torch.cat(tokens)), torch.cat(values), accumulate=True)
