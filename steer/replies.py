"""What a model's reply means: the answer line `clean_output` keeps, and when that line is complete.

The two live together because stop-at-answer must agree with cleaning exactly: a row may stop
decoding as soon as nothing it could generate next would change its cleaned output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch
from transformers import StoppingCriteria

_PREFIX = re.compile(
    r"^\s*(?:sure[,!.]?\s*)?(?:here(?: is|'s| are)[^:\n]{0,80}:|"
    r"(?:the\s+)?(?:rewritten|revised|rephrased|new|modern|formal|informal|polite|impolite|neutral|positive|"
    r"negative|archaic)(?:\s+(?:text|sentence|version|style))*\s*:)\s*",
    re.IGNORECASE,
)
_QUOTES = [('"', '"'), ("“", "”"), ("'", "'"), ("‘", "’"), ("«", "»")]


def _answer_lines(raw: str) -> list[str]:
    """The reply's non-empty lines after a leading 'Here is the rewritten sentence:' is removed."""
    text = _PREFIX.sub("", raw.strip(), count=1).strip()
    return [line.strip() for line in text.splitlines() if line.strip()]


def _chosen_line(lines: Sequence[str]) -> tuple[int, str]:
    """Which line cleaning keeps (index, text without a prefix): the first, or the second when the
    first is only a label such as "…Here's the revised sentence:"."""
    first = _PREFIX.sub("", lines[0], count=1).strip()
    if (not first or first.endswith(":")) and len(lines) > 1:
        return 1, _PREFIX.sub("", lines[1], count=1).strip()
    return 0, first


def clean_output(raw: str) -> str:
    """First non-empty line of the reply, without 'Here is the rewritten sentence:' and quotes."""
    lines = _answer_lines(raw)
    if not lines:
        return ""
    _, first = _chosen_line(lines)
    for left, right in _QUOTES:
        if len(first) >= 2 and first.startswith(left) and first.endswith(right):
            first = first[len(left) : -len(right)].strip()
            break
    return first


def answer_complete(raw: str) -> bool:
    """True once the line `clean_output` keeps has ended with a newline, so that no continuation
    of `raw` can change `clean_output(raw + continuation)`."""
    head, newline, _ = raw.rpartition("\n")
    if not newline:
        return False
    lines = _answer_lines(head)
    if not lines:
        return False
    index, line = _chosen_line(lines)
    return index == 1 or (bool(line) and not line.endswith(":"))


class StopAtAnswer(StoppingCriteria):
    """Per-row stopping: a row is done once its reply's answer line is complete (`answer_complete`).

    Only rows whose newest token contains a newline are decoded and checked, so the cost per step
    is a dictionary look-up per row. transformers pads finished rows and ends the batch when every
    row is done; the cleaned outputs are exactly those of decoding to the token limit.
    """

    def __init__(self, decode: Callable[[list[int]], str], prompt_length: int) -> None:
        self.decode, self.prompt_length = decode, prompt_length
        self._has_newline: dict[int, bool] = {}
        self.done: torch.Tensor | None = None

    def _newline(self, token: int) -> bool:
        if token not in self._has_newline:
            self._has_newline[token] = "\n" in self.decode([token])
        return self._has_newline[token]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        if self.done is None or self.done.shape[0] != input_ids.shape[0]:
            self.done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if not self.done[row] and self._newline(token):
                self.done[row] = answer_complete(self.decode(input_ids[row, self.prompt_length :].tolist()))
        return self.done.to(input_ids.device).clone()
