"""Style markers: the content words that mark one style against another, which keep-words lowers.

Found in texts of both styles by their salience (Li, Jia, He and Liang 2018, "Delete, Retrieve,
Generate"); keep-words does not keep them and, where the source has them, lowers them.

Why: keep-words favours the source's content words so that strong steering keeps the source's
content. But some of a source's words *are* its style — "shit" in a toxic comment, "horrible" in
a negative review, "thou" in a line of Shakespeare — and favouring them pulls the rewrite back
into the source style (toxic → neutral: a keep-words rung was judged neutral far more often on
the tuning texts once markers were not favoured).

A word's salience for style `a` against `b` is the share of `a`'s texts that contain it over the
share of `b`'s texts that do, each count plus one (`SMOOTHING`); a word in at least `MIN_TEXTS` of
`a`'s texts with salience ≥ `SALIENCE` (chosen on the tuning texts) marks `a`. Words are the
faithfulness rules' content words, so a marker is what `kept` would count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from steer.errors import SteerError
from steer.scoring.faithfulness import content_words

SALIENCE = 5.0  # chosen on the tuning texts among 5 and 10 (docs/decisions.md)
SMOOTHING = 1.0
MIN_TEXTS = 2


def document_counts(texts: Sequence[str]) -> Counter[str]:
    """In how many of `texts` each content word occurs."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(content_words(text))
    return counts


def style_markers(
    source: Sequence[str], target: Sequence[str], *, salience: float = SALIENCE, min_texts: int = MIN_TEXTS
) -> frozenset[str]:
    """The content words that mark the `source` texts' style against the `target` texts'."""
    if not source or not target:
        raise SteerError("style markers need texts of both styles; give at least one text of each")
    return _salient((document_counts(source), len(source)), (document_counts(target), len(target)), salience, min_texts)


def _salient(
    ours: tuple[Counter[str], int], theirs: tuple[Counter[str], int], salience: float, min_texts: int
) -> frozenset[str]:
    """The words of `ours` (document counts, number of texts) salient against `theirs`."""
    (counts, n), (other, m) = ours, theirs
    return frozenset(
        word
        for word, count in counts.items()
        if count >= min_texts and ((count + SMOOTHING) / n) / ((other.get(word, 0) + SMOOTHING) / m) >= salience
    )


class StyleMarkers:
    """The markers of every direction between the styles of `texts` (style → its texts), computed
    once per direction from each style's document counts, counted once per style:
    `markers(source, target)`."""

    def __init__(self, texts: Mapping[str, Sequence[str]]) -> None:
        self._texts = dict(texts)
        self._counts: dict[str, tuple[Counter[str], int]] = {}
        self._cache: dict[tuple[str, str], frozenset[str]] = {}

    def _counted(self, style: str) -> tuple[Counter[str], int]:
        if style not in self._counts:
            if not self._texts[style]:
                raise SteerError(f"no texts of style {style!r} to find style markers in; give at least one")
            self._counts[style] = document_counts(self._texts[style]), len(self._texts[style])
        return self._counts[style]

    def __call__(self, source: str, target: str) -> frozenset[str]:
        for style in (source, target):
            if style not in self._texts:
                known = ", ".join(sorted(self._texts)) or "none"
                raise SteerError(f"no texts of style {style!r} to find style markers in (have: {known})")
        if (source, target) not in self._cache:
            self._cache[(source, target)] = _salient(self._counted(source), self._counted(target), SALIENCE, MIN_TEXTS)
        return self._cache[(source, target)]
