"""Loops on strings: when a text loops (the metric's rule) and where it starts to, shared by the
decoding guards, reply cleaning, fluency and evaluation so that all of them agree on what a loop is.

A small LM that is steered (or merely prompted) can fall into "a friendly friendly friendly …" or
"The sentence should be rephrased to: "The sentence should be rephrased to: …". Perplexity
*rewards* such text, so loops need their own rule, here on strings and on tokens
(`third_copy_tokens`); the decoding guards that keep replies out of them are processors in
`steer.generation.processors`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

_WORD = re.compile(r"\w+(?:'\w+)?")
MIN_TRIGRAMS = 4  # a distinct-3-gram ratio says nothing about shorter texts
DISTINCT_TRIGRAM_FLOOR = 0.6


def words(text: str) -> list[str]:
    """Lower-cased words (letters, digits, inner apostrophes); punctuation is ignored."""
    return _WORD.findall(text.lower())


def has_loop(text: str | None) -> bool:
    """A text loops when a word occurs three times in a row ("friendly friendly friendly"), or when
    it has at least `MIN_TRIGRAMS` word 3-grams and fewer than `DISTINCT_TRIGRAM_FLOOR` of them are
    distinct (a phrase repeated three times or more)."""
    w = words(text or "")
    if any(w[i] == w[i + 1] == w[i + 2] for i in range(len(w) - 2)):
        return True
    grams = [tuple(w[i : i + 3]) for i in range(len(w) - 2)]
    return len(grams) >= MIN_TRIGRAMS and len(set(grams)) / len(grams) < DISTINCT_TRIGRAM_FLOOR


def loop_point(text: str) -> int | None:
    """Index (in `_WORD` matches) of the first word at which the text so far becomes a loop."""
    seen: dict[tuple[str, str, str], int] = {}
    w: list[str] = []
    grams = 0
    for k, match in enumerate(_WORD.finditer(text.lower())):
        w.append(match.group())
        if len(w) >= 3:
            gram = (w[-3], w[-2], w[-1])
            seen[gram] = seen.get(gram, 0) + 1
            grams += 1
            if w[-1] == w[-2] == w[-3]:
                return k
            if grams >= MIN_TRIGRAMS and len(seen) / grams < DISTINCT_TRIGRAM_FLOOR:
                return k
    return None


def trim_loop(text: str) -> str:
    """The text cut just before it starts to loop (unchanged when it does not loop).

    The cut falls after the last sentence end (. ! ?) before the first word at which `has_loop`
    turns true, or else after the word before it; the result never loops. Because the cut depends
    only on the text up to that word, a row stopped there (`LoopStoppingCriteria`) and a row decoded to the
    limit are trimmed to the same output.
    """
    point = loop_point(text)
    if point is None:
        return text
    starts = [m for m in _WORD.finditer(text)]
    loop_start = starts[point].start()
    head = text[:loop_start]
    sentence_end = max(head.rfind("."), head.rfind("!"), head.rfind("?"))
    if sentence_end > 0 and words(head[: sentence_end + 1]):
        cut = head[: sentence_end + 1]
    else:
        cut = text[: starts[point - 1].end()] if point > 0 else ""
    cut = cut.strip()
    while has_loop(cut):  # the sentence kept may itself repeat: back off word by word
        cut = cut[: list(_WORD.finditer(cut))[-1].start()].rstrip(" ,;:-")
    return cut


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
