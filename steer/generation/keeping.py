"""Keep-words: logits that keep the source's content words under strong steering.

A bonus for the first tokens of each of the source's content words that the reply has not produced
yet, and for the next token of a source word the reply has begun; and a penalty on the source
style's own markers.

Why: the strongest rung of the ladder changes the style most, and it is also the one that most
often drops the source's content. A bonus β on the source's own content words — only until the
reply has said each once, so it never rewards saying one twice — pulls the reply back to the
source's content while the neuron shift moves its style (the function words, contractions,
punctuation). Applied with the bans, on raw scores, so both copies of a guided row see it.

Why the completion: SmolLM2's tokenizer splits many spellings after a letter or two ("Ink" →
`In`+`k`), so a bonus on first tokens alone favours every word that begins so, and the reply went
on to another word ("they do n't have my ink" → "Including your art, …"). While the reply ends with
the first j tokens of a spelling, the spelling's next token gets β too, so `In` goes on to `k`.

Why not every content word: some of a source's words are its style ("shit", "horrible", "thou");
the caller passes the source style's markers (`steer.generation.markers`) to leave out, and
`MarkerPenaltyLogitsProcessor` lowers the source's own markers by the same β wherever the reply could say them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

import torch

from steer.scoring.faithfulness import content_words

_SURFACE = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+")

Spellings = list[list[int]]  # one source word: the token ids of each way the reply could write it


def content_tokens(
    encode: Callable[[str], list[int]], source: str, skip: Collection[str] = frozenset()
) -> list[Spellings]:
    """The source's content words, each as the token ids of its spellings in the reply: with and
    without a leading space, as written and capitalised (distinct spellings, sorted). One list per
    word, in source order; saying any one of a word's spellings says the word.

    A word is content by the faithfulness rules' definition (`content_words`: what `kept` and
    `invented` count), or a number of two digits or more. So a tokenised corpus's clitics ("do
    n't", "it 's") are not favoured: "n't" was, and replies began with it ("n't recommend this
    dentist"). A word whose content form is in `skip` is left out: the source style's markers
    (`steer.generation.markers`), which a rewrite should not keep."""
    words: list[Spellings] = []
    skip = frozenset(skip)
    for word in dict.fromkeys(_SURFACE.findall(source)):
        bare = word.strip("'-")
        content = content_words(bare)
        if not ((bare.isdigit() and len(bare) > 1) or content):
            continue
        if content and content <= skip:
            continue
        spellings = _spellings(encode, {bare, bare.capitalize()})
        if spellings:
            words.append(spellings)
    return words


def marker_tokens(encode: Callable[[str], list[int]], source: str, markers: Collection[str]) -> Spellings:
    """The spellings (token ids) of the source's words whose content form is a marker of the
    source style: as written, capitalised and lower-cased, with and without a leading space."""
    markers = frozenset(markers)
    out: set[tuple[int, ...]] = set()
    for word in dict.fromkeys(_SURFACE.findall(source)):
        bare = word.strip("'-")
        content = content_words(bare)
        if content and content <= markers:
            out.update(tuple(s) for s in _spellings(encode, {bare, bare.capitalize(), bare.lower()}))
    return [list(s) for s in sorted(out)]


def _spellings(encode: Callable[[str], list[int]], forms: Collection[str]) -> Spellings:
    """Each form's token ids with and without a leading space (distinct, sorted)."""
    spellings: set[tuple[int, ...]] = set()
    for form in forms:
        for spelled in (form, " " + form):
            tokens = encode(spelled)
            if tokens:
                spellings.add(tuple(tokens))
    return [list(s) for s in sorted(spellings)]


class Endings:
    """Token ids owed to rows whose reply ends with given tokens: entries (row, the last j tokens
    the reply must end with, the token), grouped by j (j = 0: always), tested for every row at once."""

    def __init__(self, entries: dict[tuple[int, tuple[int, ...], int], None]) -> None:
        by_length: dict[int, list[tuple[int, tuple[int, ...], int]]] = {}
        for entry in entries:
            by_length.setdefault(len(entry[1]), []).append(entry)
        self.tables = {
            j: (
                torch.tensor([r for r, _, _ in rows], dtype=torch.long),
                torch.tensor([p for _, p, _ in rows], dtype=torch.long).reshape(len(rows), j),
                torch.tensor([t for _, _, t in rows], dtype=torch.long),
            )
            for j, rows in sorted(by_length.items())
        }
        self._on: dict[torch.device, dict[int, tuple[torch.Tensor, ...]]] = {}

    def __call__(self, reply: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(rows, tokens) pieces of the entries whose ending `reply` ([rows, length]) has."""
        if reply.device not in self._on:
            self._on[reply.device] = {j: tuple(t.to(reply.device) for t in ts) for j, ts in self.tables.items()}
        length, rows, tokens = reply.shape[1], [], []
        for j, (at, ending, token) in self._on[reply.device].items():
            if j > length:
                break
            ends = (reply[at, length - j :] == ending).all(1)
            rows.append(at[ends])
            tokens.append(token[ends])
        return rows, tokens


def add_once(
    scores: torch.Tensor, rows: list[torch.Tensor], tokens: list[torch.Tensor], value: torch.Tensor
) -> torch.Tensor:
    """`scores` with value[row] added once at each distinct (row, token) — out of place."""
    if not rows:
        return scores
    vocab = scores.shape[-1]
    owed = torch.unique(torch.cat(rows) * vocab + torch.cat(tokens))
    if not len(owed):
        return scores
    row = owed // vocab
    return scores.index_put(
        (row, owed % vocab), value.to(device=scores.device, dtype=scores.dtype)[row], accumulate=True
    )
