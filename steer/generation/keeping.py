"""Keep the source's content under strong steering: a logits bonus for the first tokens of each of
the source's content words that the reply has not produced yet, and for the next token of a
source word the reply has begun; and a penalty on the source style's own markers.

Why: the strongest rung of the ladder changes the style most, and it also drops the source's
content (formal → informal, dev: 35% of rerank's outputs kept under 40% of the source's content
words, most of them from λ = 3). A bonus β on the source's own content words — only until the
reply has said each once, so it never rewards saying one twice — pulls the reply back to the
source's content while the neuron shift moves its style (the function words, contractions,
punctuation). Applied with the bans, on raw scores, so both copies of a guided row see it.

Why the completion: SmolLM2's tokenizer splits many spellings after a letter or two ("Ink" →
`In`+`k`), so a bonus on first tokens alone favours every word that begins so, and the reply went
on to another word ("they do n't have my ink" → "Including your art, …"; 52 of 288 tuning texts
had such a stray word). While the reply ends with the first j tokens of a spelling, the spelling's
next token gets β too, so `In` goes on to `k` (52 → 28; docs/findings.md).

Why not every content word: some of a source's words are its style ("shit", "horrible", "thou");
the caller passes the source style's markers (`steer.generation.markers`) to leave out, and
`MarkerPenalty` lowers the source's own markers by the same β wherever the reply could say them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

import torch
from transformers import LogitsProcessor

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


class _Endings:
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


def _add_once(
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


class SourceWordBonus(LogitsProcessor):
    """Add `bonus[row]` to the scores of (1) the first token of each spelling of each of a row's
    source content words (`words[row]`: per word, its spellings' token ids) until the row has
    generated the first token of any spelling of that word, and (2) the next token of every
    spelling whose first j tokens (1 ≤ j < its length) the row's reply ends with. A token favoured
    for several reasons gets β once; rows with a bonus of 0 are left as they are.

    A word is retired as a whole: favouring each spelling until that spelling is said would reward
    saying the word again in another spelling ("Dude, Dude dude,"). Completion is not retired: it
    only acts once the reply has itself begun a source word, and finishes that word rather than
    letting the begun token start another ("In" → "Ink", not "Including")."""

    def __init__(
        self, prompt_length: int, words: Sequence[Sequence[Sequence[Sequence[int]]]], bonus: Sequence[float]
    ) -> None:
        if len(words) != len(bonus):
            raise ValueError(f"{len(words)} word lists for {len(bonus)} bonuses")
        self.prompt_length = prompt_length
        self.bonus = torch.tensor([float(b) for b in bonus], dtype=torch.float64)
        # (1) one entry per (row, word, first token): the row, the word's index over all rows, the token
        firsts: dict[tuple[int, int, int], None] = {}
        # (2) one entry per (row, first j tokens of a spelling, its next token), 1 ≤ j < its length
        nexts: dict[tuple[int, tuple[int, ...], int], None] = {}
        word = 0
        for row, (row_words, beta) in enumerate(zip(words, bonus, strict=True)):
            if float(beta) == 0:
                continue
            for spellings in row_words:
                for spelling in spellings:
                    if not len(spelling):
                        continue
                    firsts[(row, word, int(spelling[0]))] = None
                    for j in range(1, len(spelling)):
                        prefix = tuple(int(t) for t in spelling[:j])
                        nexts[(row, prefix, int(spelling[j]))] = None
                word += 1
        self.words = word
        first = list(firsts)
        self.first = (
            torch.tensor([r for r, _, _ in first], dtype=torch.long),
            torch.tensor([w for _, w, _ in first], dtype=torch.long),
            torch.tensor([t for _, _, t in first], dtype=torch.long),
        )
        self.next = _Endings(nexts)
        self._on: dict[torch.device, tuple[torch.Tensor, ...]] = {}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not len(self.first[0]):
            return scores
        if scores.device not in self._on:
            self._on[scores.device] = tuple(t.to(scores.device) for t in self.first)
        rows, word_of, firsts = self._on[scores.device]
        reply = input_ids[:, self.prompt_length :]
        # (1) first tokens of the words no spelling of which has begun in the reply
        begun = (reply[rows] == firsts[:, None]).any(1) if reply.shape[1] else torch.zeros_like(rows, dtype=torch.bool)
        said = torch.zeros(self.words, dtype=torch.long, device=scores.device).index_add(0, word_of, begun.long()) > 0
        # (2) the next token of each spelling the reply ends partway through
        ending_rows, ending_tokens = self.next(reply)
        return _add_once(
            scores, [rows[~said[word_of]], *ending_rows], [firsts[~said[word_of]], *ending_tokens], self.bonus
        )


class MarkerPenalty(LogitsProcessor):
    """Subtract `penalty[row]` from the last token of each spelling in `spellings[row]` (the
    source's own style markers, `marker_tokens`) whenever the row's reply ends with that
    spelling's other tokens — always, for a one-token spelling. A token is lowered once per step.

    Why: leaving a marker out of the keep-words bonus does not stop the model from copying it
    ("you are a fucking idiot" → "You're a fucking idiot, …"), and the markers are the words a
    rewrite has to change ("good" → "bad" for positive → negative). Never retired: a marker is
    as unwelcome the second time."""

    def __init__(
        self, prompt_length: int, spellings: Sequence[Sequence[Sequence[int]]], penalty: Sequence[float]
    ) -> None:
        if len(spellings) != len(penalty):
            raise ValueError(f"{len(spellings)} spelling lists for {len(penalty)} penalties")
        self.prompt_length = prompt_length
        self.penalty = -torch.tensor([float(b) for b in penalty], dtype=torch.float64)
        entries: dict[tuple[int, tuple[int, ...], int], None] = {}
        for row, (row_spellings, beta) in enumerate(zip(spellings, penalty, strict=True)):
            for spelling in row_spellings if float(beta) else []:
                if len(spelling):
                    entries[(row, tuple(int(t) for t in spelling[:-1]), int(spelling[-1]))] = None
        self.endings = _Endings(entries)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows, tokens = self.endings(input_ids[:, self.prompt_length :])
        return _add_once(scores, rows, tokens, self.penalty)
