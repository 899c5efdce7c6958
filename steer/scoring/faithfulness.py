"""Faithfulness rules on strings: what a rewrite did to its source, judged without a model.

Does a rewrite talk about the task (`meta`), nearly loop (`near_loop`), consist of non-words
(`junk`), keep the source's content or invent its own?

Rules, not models, so they are cheap, deterministic and readable; each is documented in the
README ("Faithfulness") and tested on hand-made strings. Words are lower-cased runs of letters
(an apostrophe may join them: "don't", "n't"); a *content word* is a word that is not in
scikit-learn's English stop-word list, with a plural "s" dropped ("cats" = "cat").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")
# Words that name the task itself: a rewrite of a sentence does not say "rewrite" unless its source did.
_TASK_WORD = re.compile(r"\b(?:re-?writ\w*|re-?phras\w*|paraphras\w*|re-?word\w*|translat\w*)\b")
# Talk about the text or its style: "this sentence", "the original text", "a formal tone", "its meaning".
# Not "request", "review" or "statement", nor after "your", "my", "that" or "new": an apology that is
# the rewrite ("we're unable to accommodate your request") and human sentences say them (leaving
# them out lowered the rule's hits on the corpora's human sentences).
_TEXT_NOUNS = r"(?:sentences?|text|verse|phrase|passage|wording)"
_TASK_PHRASES = (
    re.compile(rf"\b(?:the|this|original|following|given|above)\s+(?:\w+\s+)?{_TEXT_NOUNS}\b"),
    re.compile(
        r"\b(?:formal|informal|casual|polite|impolite|blunt|courteous|neutral|positive|negative|modern|archaic|"
        r"shakespearean|toxic|offensive|friendly|conversational)\s+(?:style|tone|register|version|language|manner|"
        r"sentiment|wording|english)\b"
    ),
    re.compile(r"\b(?:keep|keeps|keeping|kept|preserv\w*)\s+(?:its|the|their)\s+(?:original\s+)?meaning\b"),
)
ECHO_NGRAM = 4  # a word 4-gram of the instruction that the source does not contain is an echo
ECHO_LIST = 3  # a run of this many one-word comma-separated items …
ECHO_LIST_TOLD = 2  # … of which this many are instruction words the source lacks is an echoed word list
NEAR_LOOP_NGRAM = 3  # any word 3-gram said twice is a near-loop
INVENTED_LENGTH = 2.0  # invented: at least twice the source's words …
INVENTED_SHARE = 0.5  # … and more than half of its content words not in the source
DROPPED_SHARE = 0.4  # dropped: fewer than 40% of the source's content words kept
JUNK_SHARE = 0.5  # junk: more than half of the words (of three or more) are non-words
JUNK_ZIPF = 3.0  # a non-word: wordfreq Zipf frequency below 3 (rarer than ~1 per million words) …
# … or a one- or two-letter token that is not one of these English words
_SHORT_WORDS = frozenset(
    "a i am an as at be by do go he hi if in is it me my no of oh ok on or so to up us we ya yo ye ah uh eh "
    "ha tv mr ms dr st vs pm id".split()
)


# what "can't", "won't", "shan't" leave once "n't" goes, and tokenised text's "ca n't": stop words
_CLITIC_STEMS = frozenset({"ca", "wo", "sha"})


def words(text: str | None) -> list[str]:
    """Lower-cased words; a token that starts with an apostrophe joins the word before ("it 's")."""
    return _WORD.findall(re.sub(r"\s+'", "'", (text or "").lower()))


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def content_words(text: str | None) -> set[str]:
    """The set of content words: no stop words, no "'s"/"n't" endings, a plural "s" dropped."""
    stop = _stop_words()
    out = set()
    for word in words(text):
        word = re.sub(r"(?:n't|'s|'re|'ve|'ll|'d|'m|')$", "", word)  # "don't" → "do", "it's" → "it"
        if word in stop or word in _CLITIC_STEMS:  # before the plural "s" goes: "this" is not "thi"
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        if word and word not in stop and len(word) > 1:
            out.add(word)
    return out


def content_kept(output: str | None, source: str) -> float | None:
    """Share of the source's content words that the output keeps (None: the source has none)."""
    src = content_words(source)
    return len(src & content_words(output)) / len(src) if src else None


def invented_share(output: str | None, source: str) -> float:
    """Share of the output's content words that are not in the source (0 for no content words)."""
    out = content_words(output)
    return len(out - content_words(source)) / len(out) if out else 0.0


def invented(output: str | None, source: str) -> bool:
    """Invents content: twice the source's words or more, most of its content words new."""
    n_out, n_src = len(words(output)), len(words(source))
    return n_src > 0 and n_out >= INVENTED_LENGTH * n_src and invented_share(output, source) > INVENTED_SHARE


def dropped(output: str | None, source: str) -> bool:
    """Drops the source's content: fewer than 40% of its content words kept (an empty output drops all)."""
    kept = content_kept(output, source)
    return kept is not None and kept < DROPPED_SHARE


def _ngrams(seq: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)}


def _repeats(w: Sequence[str]) -> set[tuple[str, ...]]:
    """Phrases of ≥ 2 words said twice in a row, and word 3-grams said twice anywhere."""
    found = set()
    for n in range(2, len(w) // 2 + 1):
        for i in range(len(w) - 2 * n + 1):
            if w[i : i + n] == w[i + n : i + 2 * n]:
                found.add(tuple(w[i : i + n]))
    grams = Counter(tuple(w[i : i + NEAR_LOOP_NGRAM]) for i in range(len(w) - NEAR_LOOP_NGRAM + 1))
    return found | {g for g, c in grams.items() if c > 1}


def near_loop(text: str | None, source: str = "") -> bool:
    """A phrase of two or more words said twice in a row ("very real very real"), or any word
    3-gram said twice anywhere — unless the source repeats it too (a faithful copy is no loop).
    Stricter than the `repetition` metric (a third copy)."""
    found = _repeats(words(text))
    return bool(found - _repeats(words(source))) if found and source else bool(found)


def instruction_text(template: str, source: str, target: str) -> str:
    """The instruction a prompt template gives, without the text to rewrite."""
    try:
        return template.format(text="", source=source, target=target)
    except (KeyError, IndexError, ValueError):
        return template.replace("{text}", "")


def meta(output: str | None, source: str, instruction: str = "") -> bool:
    """The output talks about the task or echoes the instruction, in words its source does not use:
    a task word (rewrite, rephrase, paraphrase, reword, translate), a phrase about the text or its
    style ("this sentence", "a formal tone", "keep its meaning"), a word 4-gram of the
    instruction, or the instruction's example words as a list ("Thou, thou, dost, hath." from
    "… in the style of Shakespeare's plays (thou, thee, doth, hath)": `listed_echo`)."""
    text = " ".join(words(output))
    if not text:
        return False
    src = " ".join(words(source))
    for pattern in (_TASK_WORD, *_TASK_PHRASES):
        for match in pattern.finditer(text):
            if match.group(0) not in src:
                return True
    if instruction:
        echo = _grams_of(instruction) - _grams_of(source)
        if echo & _ngrams(words(output), ECHO_NGRAM):
            return True
        if listed_echo(output, source, instruction):
            return True
    return False


def listed_echo(output: str | None, source: str, instruction: str) -> bool:
    """A run of ≥ 3 comma-separated one-word items of which ≥ 2 (repeats count) are words of the
    instruction that the source lacks: the model listing the instruction's example words ("Thou,
    thou, dost, hath sent seven of my servants"). A sentence's own lists ("red, green and blue")
    rarely repeat the instruction's words."""
    if not output or not any(c in output for c in ",;"):  # no list: `meta` asks this at every answer line
        return False
    told = _told(instruction, source)
    if not told:
        return False
    run: list[str] = []
    for part in [*re.split(r"[,;]", output), "end of the list"]:
        item = words(part)
        if len(item) == 1:
            run.append(item[0])
            continue
        if len(run) >= ECHO_LIST and sum(w in told for w in run) >= ECHO_LIST_TOLD:
            return True
        run = []
    return False


@lru_cache(maxsize=4096)
def _told(instruction: str, source: str) -> frozenset[str]:
    """The instruction's words that the source lacks, cached like `_grams_of`."""
    return frozenset(words(instruction)) - frozenset(words(source))


@lru_cache(maxsize=4096)
def _grams_of(text: str) -> frozenset[tuple[str, ...]]:
    """A text's word 4-grams, cached: stop-at-answer asks `meta` about the same instruction and
    source at every answer line of every row."""
    return frozenset(_ngrams(words(text), ECHO_NGRAM))


@lru_cache(maxsize=1)
def _frequencies() -> dict[str, float]:
    from wordfreq import get_frequency_dict

    return get_frequency_dict("en")


def _zipf(word: str) -> float:
    import math

    freq = _frequencies().get(word, 0.0)
    return math.log10(freq) + 9 if freq > 0 else 0.0


def non_word(word: str) -> bool:
    """Rarer than Zipf 3 in wordfreq's English list, or a short token that is not an English word."""
    word = re.sub(r"'s$", "", word)  # a possessive is its word ("count's")
    if len(word) <= 2:
        return word not in _SHORT_WORDS
    return _zipf(word) < JUNK_ZIPF


def junk(text: str | None) -> bool:
    """Mostly non-words: of three or more words, more than half are non-words ("The R Us R Us S R")."""
    w = words(text)
    return len(w) >= 3 and sum(non_word(x) for x in w) > JUNK_SHARE * len(w)


@dataclass(frozen=True)
class Flags:
    """The faithfulness rules' verdicts on one output."""

    empty: bool
    meta: bool
    near_loop: bool
    junk: bool
    invented: bool
    dropped: bool

    @property
    def unusable(self) -> bool:
        """Flagged by a rule that makes a rewrite unusable as it is (empty, meta, near-loop, junk)."""
        return self.empty or self.meta or self.near_loop or self.junk

    @property
    def any(self) -> bool:
        """Flagged by any rule (invented or dropped content included)."""
        return self.unusable or self.invented or self.dropped

    def names(self) -> list[str]:
        return [k for k in ("empty", "meta", "near_loop", "junk", "invented", "dropped") if getattr(self, k)]


def flags(output: str | None, source: str, instruction: str = "") -> Flags:
    """Every rule's verdict on one output."""
    empty = not (output and output.strip())
    return Flags(
        empty=empty,
        meta=meta(output, source, instruction),
        near_loop=near_loop(output, source),
        junk=junk(output),
        invented=invented(output, source),
        dropped=dropped(output, source),
    )
