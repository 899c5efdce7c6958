"""Few-shot examples: for each source text, the k texts of the target style nearest to it by the
selection encoder, taken from a corpus of that style (the profile's own training texts).

Why: a 135M model told to "rewrite in an informal style" often does not know what the style looks
like for *this* sentence; a handful of real target-style sentences on the same topic shows it. The
corpora steer profiles are non-parallel, so the examples are sentences of the target style, not
rewrite pairs. Nearness comes from the *selection* encoder (MiniLM), never from the evaluation
encoder, so choosing examples does not bias the similarity that evaluation reports.

`ExamplePool(texts, embedder).nearest(sources, k)` → k examples per source, most similar last (the
one nearest the instruction is the closest). A text identical to its source (after stripping and
case-folding) is never its own example.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from steer.errors import SteerError
from steer.profiling.corpus import corpus_hash

logger = logging.getLogger(__name__)
MAX_POOL = 20_000  # texts per style kept for retrieval (the profiling corpora hold 2–6k)


class Encoder(Protocol):
    def encode(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor: ...


class ExamplePool:
    """Texts of one style with their (normalised) embeddings, for nearest-neighbour examples."""

    def __init__(self, texts: Sequence[str], encoder: Encoder, *, limit: int = MAX_POOL) -> None:
        unique = list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))
        if not unique:
            raise SteerError("the example corpus holds no texts; give one text of the target style per line")
        if len(unique) > limit:
            logger.info("example pool: keeping the first %d of %d texts", limit, len(unique))
            unique = unique[:limit]
        self.texts = unique
        self.sha256 = corpus_hash(unique)  # identifies the pool in cache keys and records
        self.encoder = encoder
        self.vectors = encoder.encode(unique)

    def nearest(self, sources: Sequence[str], k: int) -> list[list[str]]:
        """The k pool texts closest to each source (cosine), least similar first; never the source itself."""
        if k < 1 or not sources:
            return [[] for _ in sources]
        queries = self.encoder.encode(list(sources))
        sims = queries @ self.vectors.T  # both normalised: cosine
        own = {t.casefold(): j for j, t in enumerate(self.texts)}
        out = []
        for i, source in enumerate(sources):
            row = sims[i].tolist()
            j = own.get(source.strip().casefold())
            if j is not None:
                row[j] = -float("inf")
            take = min(k, len(self.texts) - (j is not None))
            # ties break towards the earlier pool text, so the choice does not depend on the device's sort
            order = sorted(range(len(row)), key=lambda m: (-row[m], m))[:take]
            out.append([self.texts[m] for m in reversed(order)])
        return out


class ExampleSource:
    """Example pools per style, built lazily from texts per style (a run's training texts, or a file)."""

    def __init__(self, texts: Mapping[str, Sequence[str]], encoder: Encoder) -> None:
        self._texts, self._encoder = dict(texts), encoder
        self._pools: dict[str, ExamplePool] = {}

    def pool(self, style: str) -> ExamplePool:
        if style not in self._texts:
            known = ", ".join(sorted(self._texts)) or "none"
            raise SteerError(f"no example texts for style {style!r} (have: {known}); give texts of that style")
        if style not in self._pools:
            self._pools[style] = ExamplePool(self._texts[style], self._encoder)
        return self._pools[style]

    def __call__(self, style: str, sources: Sequence[str], k: int) -> list[list[str]]:
        return self.pool(style).nearest(sources, k)
