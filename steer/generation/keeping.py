"""Keep the source's content under strong steering: a logits bonus for the first tokens of each of
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

from steer.scoring.faithfulness import content_words

_SURFACE = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+")


def content_tokens(encode: Callable[[str], list[int]], source: str) -> list[list[int]]:
    """The source's content words, each as the token ids that could begin it in the reply: with
    and without a leading space, as written and capitalised. One list per word, in source order;
    saying any one of a word's spellings says the word.

    A word is content by the faithfulness rules' definition (`content_words`: what `kept` and
    `invented` count), or a number of two digits or more. So a tokenised corpus's clitics ("do
    n't", "it 's") are not favoured: "n't" was, and replies began with it ("n't recommend this
    dentist")."""
    words: list[list[int]] = []
    for word in dict.fromkeys(_SURFACE.findall(source)):
        bare = word.strip("'-")
        if not ((bare.isdigit() and len(bare) > 1) or content_words(bare)):
            continue
        ids: set[int] = set()
        for form in {bare, bare.capitalize()}:
            for spelled in (form, " " + form):
                tokens = encode(spelled)
                if tokens:
                    ids.add(tokens[0])
        if ids:
            words.append(sorted(ids))
    return words


class SourceWordBonus(LogitsProcessor):
    """Add `bonus[row]` to the scores of the spellings of each of a row's source content words
    (`words[row]`: one token-id list per word) until the row has generated any spelling of that
    word; rows with a bonus of 0 are left as they are.

    A word is retired as a whole: favouring each spelling until that spelling is said would reward
    saying the word again in another spelling ("Dude, Dude dude,"). A token that begins two words
    stays favoured while either is unsaid."""

    def __init__(self, prompt_length: int, words: Sequence[Sequence[Sequence[int]]], bonus: Sequence[float]) -> None:
        if len(words) != len(bonus):
            raise ValueError(f"{len(words)} word lists for {len(bonus)} bonuses")
        self.prompt_length = prompt_length
        # per row: every spelling's token id, and the index of the word it spells
        self.tokens = [torch.tensor([t for w in row for t in w], dtype=torch.long) for row in words]
        self.word_of = [torch.tensor([i for i, w in enumerate(row) for _ in w], dtype=torch.long) for row in words]
        self.words = [len(row) for row in words]
        self.bonus = [float(b) for b in bonus]
        self._on: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # on the scores' device

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.device not in self._on:
            self._on[scores.device] = [
                (t.to(scores.device), w.to(scores.device)) for t, w in zip(self.tokens, self.word_of, strict=True)
            ]
        rows, tokens, values = [], [], []
        for row, ((ids, word_of), beta) in enumerate(zip(self._on[scores.device], self.bonus, strict=True)):
            if beta == 0 or not len(ids):
                continue
            spelled = torch.isin(ids, input_ids[row, self.prompt_length :]).long()
            said = torch.zeros(self.words[row], dtype=torch.long, device=scores.device).index_add(0, word_of, spelled)
            said = said > 0  # per word: any of its spellings generated
            owed = torch.unique(ids[~said[word_of]])  # a token shared by a said and an unsaid word: once
            rows.append(torch.full_like(owed, row))
            tokens.append(owed)
            values.append(torch.full(owed.shape, beta, dtype=scores.dtype, device=scores.device))
        if not rows:
            return scores
        # one out-of-place copy of the scores, with β added where a row still owes a word
        return scores.index_put((torch.cat(rows), torch.cat(tokens)), torch.cat(values), accumulate=True)
