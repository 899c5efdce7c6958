"""What a model's reply means: the answer `clean_output` keeps, and when that answer is complete.

The two live together because stop-at-answer must agree with cleaning exactly: a row may stop
decoding as soon as nothing it could generate next would change its cleaned output.

The answer is the first line of the reply that gives one: a "Here is the rewritten sentence:"
label is removed; a line that opens a quote mark (" “ ‘ «) answers with the quoted text once
the quote closes (what follows it on the line is commentary); a line left empty by that, or
ending with ":", is only a label; and a line that `reject` refuses — an echo of the instruction
or talk about the task, `steer.scoring.faithfulness.meta` — is no answer either (unless what
follows its last colon is an acceptable answer: 'Rewrite it as: "yo"' → "yo"), so decoding goes
on to the next line. A reply with no answer line cleans to "".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from steer.scoring.faithfulness import meta
from steer.scoring.loops import trim_loop

if TYPE_CHECKING:
    from steer.settings import TransferSettings

_PREFIX = re.compile(
    r"^\s*(?:sure[,!.]?\s*)?(?:here(?: is|'s| are)[^:\n]{0,80}:|"
    r"(?:the\s+)?(?:rewritten|revised|rephrased|new|modern|formal|informal|polite|impolite|neutral|positive|"
    r"negative|archaic|shakespearean)(?:\s+(?:text|sentence|version|style))*\s*:)\s*",
    re.IGNORECASE,
)
_QUOTES = [('"', '"'), ("“", "”"), ("'", "'"), ("‘", "’"), ("«", "»")]
OPENING_QUOTES = {'"': '"', "“": "”", "‘": "’", "«": "»"}  # not "'": an apostrophe may open a line
Reject = Callable[[str], bool]


def _closed_quote(text: str) -> str | None:
    """The quoted text when `text` opens a quote mark and closes it, else None."""
    if not text or text[0] not in OPENING_QUOTES:
        return None
    end = text.find(OPENING_QUOTES[text[0]], 1)
    return text[1:end].strip() if end > 0 else None


def _line_answer(line: str) -> str | None:
    """The answer one line gives, or None for a label-only line."""
    text = _PREFIX.sub("", line.strip(), count=1).strip()
    quoted = _closed_quote(text)
    if quoted is not None:
        return quoted or None
    if not text or text.endswith(":"):
        return None
    for left, right in _QUOTES:
        if len(text) >= 2 and text.startswith(left) and text.endswith(right):
            return text[len(left) : -len(right)].strip() or None
    if text[0] in OPENING_QUOTES:  # a quote opened and never closed on its line
        return text[1:].strip() or None
    return text


def _pick(lines: Sequence[str], reject: Reject | None) -> str | None:
    """The first line's answer that is not a label and that `reject` does not refuse. A refused
    line may still carry the rewrite after its last colon ('The sentence should be rephrased
    to: "More hay, Trigger?"'): that part is the line's answer when it is not refused itself."""
    for line in lines:
        answer = _line_answer(line)
        if answer is None or reject is None:
            if answer is not None:
                return answer
            continue
        if not reject(answer):
            return answer
        head, colon, tail = line.rpartition(":")
        salvaged = _line_answer(tail) if colon and head.strip() else None
        if salvaged is not None and not reject(salvaged):
            return salvaged
    return None


def clean_output(raw: str, reject: Reject | None = None) -> str:
    """The reply's answer (see the module's docstring); "" when no line gives one."""
    return _pick(raw.strip().splitlines(), reject) or ""


def answer_complete(raw: str, reject: Reject | None = None) -> bool:
    """True once no continuation of `raw` can change `clean_output(raw + continuation, reject)`:
    an answer line has ended with a newline, or the line being written has closed its quote."""
    head, newline, tail = raw.rpartition("\n")
    if newline and _pick(head.splitlines(), reject) is not None:
        return True
    quoted = _closed_quote(_PREFIX.sub("", tail.strip(), count=1).strip()) if tail.strip() else None
    return quoted is not None and bool(quoted) and not (reject is not None and reject(quoted))


def echo_ngrams(encode: Callable[[str], list[int]], instruction: str, source: str, size: int) -> set[tuple[int, ...]]:
    """Token `size`-grams of the instruction (tokenised alone and after a space, as it would appear
    mid-reply) that the source text does not contain."""

    def grams(text: str) -> set[tuple[int, ...]]:
        out: set[tuple[int, ...]] = set()
        for variant in (text, " " + text):
            ids = encode(variant)
            out.update(tuple(ids[i : i + size]) for i in range(len(ids) - size + 1))
        return out

    return grams(instruction) - grams(source) if instruction.strip() else set()


def first_word_tokens(encode: Callable[[str], list[int]], instruction: str, source: str) -> set[int]:
    """The first token of the instruction's first word (alone and after a space), unless the source
    starts with that word too: a reply that starts there is an echo of the instruction."""
    words = instruction.split()
    if not words or source.strip().lower().startswith(words[0].lower()):
        return set()
    return {ids[0] for ids in (encode(words[0]), encode(" " + words[0])) if ids}


def finish_output(raw: str, settings: TransferSettings, reject: Reject | None = None) -> str:
    """The output a raw reply (primed opening included) gives under `settings`: cleaned (the
    first answer line that `reject` — an `echo_filter` — does not refuse, no label or quotes)
    and, with the loop guard, cut before any loop (`trim_loop`); raw when not cleaning.
    `steer run` re-applies it to cached raw replies, so cached outputs follow the current rules."""
    if not settings.clean:
        return raw.strip()
    out = clean_output(raw, reject)
    return trim_loop(out) if settings.loop_guard else out


def echo_filter(text: str, instruction: str) -> Reject:
    """What cleaning refuses as the answer to `text`: a line that echoes the instruction or talks
    about the task (`faithfulness.meta`), so stop-at-answer never takes one for the rewrite."""
    return lambda answer: meta(answer, text, instruction)


def cleaner(opening: str, reject: Reject | None) -> Callable[[str], str]:
    """How `LoopStoppingCriteria` sees a row's answer: the generated text after the opening, cleaned."""
    return lambda generated: clean_output(opening + generated, reject)
