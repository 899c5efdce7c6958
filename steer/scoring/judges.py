"""Style judges: classifiers that say which style a text is in (TF-IDF, logistic regression on
sentence embeddings, or a Hugging Face classifier), each with its held-out accuracy.

Evaluation reports accuracy with one judge; tuning selects with another (`others`), and rerank
selects with the model's own style probe (`steer.profiling.probe`), so no judge grades what it picked.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from steer.errors import SteerError
from steer.scoring.encoders import Embedder

MIN_HELDOUT_ROWS = 20  # fewer labelled texts than this are too few to hold any out and measure


def heldout_cut(rows: int, heldout: float) -> int:
    """How many of `rows` shuffled labelled texts to hold out: the share `heldout`, at least one,
    none for fewer than `MIN_HELDOUT_ROWS` texts (too few to measure) or `heldout` 0. The judges
    and the probe both split by it, so their held-out accuracies are comparable."""
    return max(1, int(rows * heldout)) if rows >= MIN_HELDOUT_ROWS and heldout > 0 else 0


def _split(corpora: Mapping[str, Sequence[str]], seed: int, heldout: float) -> tuple[list, list]:
    """One shuffled (held-out, train) split of labelled texts, shared by every judge so their
    held-out accuracies are comparable."""
    if len(corpora) < 2:
        raise SteerError("a style judge needs texts of at least two styles")
    rows = [(t, s) for s, texts in corpora.items() for t in texts if t.strip()]
    random.Random(seed).shuffle(rows)
    cut = heldout_cut(len(rows), heldout)
    return rows[:cut], rows[cut:]


class _Judge:
    """What every style judge offers: labels, per-text target probabilities and accuracy."""

    name = "judge"
    styles: list[str]
    heldout_accuracy: float = float("nan")
    others: tuple[_Judge, ...] = ()  # the judges `build_judge` trained beside this one (set per judge)

    def probabilities(self, texts: Sequence[str]) -> torch.Tensor:  # [n, styles]
        raise NotImplementedError

    def _check(self, target: str) -> int:
        if target not in self.styles:
            raise SteerError(f"the {self.name} judge knows styles {', '.join(self.styles)}, not {target!r}")
        return self.styles.index(target)

    def predict(self, texts: Sequence[str]) -> list[str]:
        if not texts:
            return []
        return [self.styles[i] for i in self.probabilities(texts).argmax(-1).tolist()]

    def judgements(self, texts: Sequence[str], target: str) -> list[tuple[float, bool]]:
        """(P(target style), whether `target` is the most probable style) per text; an empty text
        gets (0, False). One pass gives both accuracy and J's style term."""
        column = self._check(target)
        keep = [i for i, t in enumerate(texts) if t and t.strip()]
        out = [(0.0, False)] * len(texts)
        if keep:
            probs = self.probabilities([texts[i] for i in keep])
            for i, row in zip(keep, probs, strict=True):
                out[i] = (float(row[column]), int(row.argmax()) == column)
        return out

    def accuracy(self, outputs: Sequence[str], target: str) -> float:
        """Share of outputs whose most probable style is `target` (empty outputs count as misses)."""
        return sum(hit for _, hit in self.judgements(outputs, target)) / max(len(outputs), 1)

    def _score_heldout(self, test: list[tuple[str, str]]) -> None:
        self.heldout_size = len(test)
        if test:
            predictions = self.predict([t for t, _ in test])
            self.heldout_accuracy = float(sum(p == s for p, (_, s) in zip(predictions, test, strict=True)) / len(test))


class StyleClassifier(_Judge):
    """TF-IDF (word 1–2-grams + char 2–4-grams) + logistic regression, trained on style corpora.

    Small, fast and well known; `heldout_accuracy` (on a 10% split held out of training) tells
    users how far to trust the style accuracy it reports.
    """

    name = "tfidf"

    def __init__(self, corpora: Mapping[str, Sequence[str]], *, seed: int = 0, heldout: float = 0.1) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline, make_union

        test, train = _split(corpora, seed, heldout)
        features = make_union(
            TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, lowercase=True),
            TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), min_df=2, sublinear_tf=True),
        )
        self.pipeline = make_pipeline(features, LogisticRegression(max_iter=2000, C=4.0))
        self.pipeline.fit([t for t, _ in train], [s for _, s in train])
        self.styles = [str(c) for c in self.pipeline.classes_]
        self.train_size = len(train)
        self._score_heldout(test)

    def probabilities(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.tensor(self.pipeline.predict_proba(list(texts)), dtype=torch.float32)


class EmbeddingClassifier(_Judge):
    """Logistic regression on sentence embeddings (the shipped all-MiniLM-L6-v2 by default).

    Embeddings carry meaning beyond surface n-grams, so on small or noisy corpora (politeness,
    formality) this judge generalises better than TF-IDF; both report held-out accuracy on the
    same split, and `build_judge("auto")` keeps the more accurate one.
    """

    name = "minilm"

    def __init__(
        self,
        corpora: Mapping[str, Sequence[str]],
        embedder: Embedder | None = None,
        *,
        seed: int = 0,
        heldout: float = 0.1,
    ) -> None:
        from sklearn.linear_model import LogisticRegression

        test, train = _split(corpora, seed, heldout)
        self.embedder = embedder or Embedder()
        self.model = LogisticRegression(max_iter=3000, C=2.0)
        self.model.fit(self.embedder.encode([t for t, _ in train]).numpy(), [s for _, s in train])
        self.styles = [str(c) for c in self.model.classes_]
        self.train_size = len(train)
        self._score_heldout(test)

    def probabilities(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.tensor(self.model.predict_proba(self.embedder.encode(list(texts)).numpy()), dtype=torch.float32)


class HFClassifier(_Judge):
    """A Hugging Face text-classification model whose labels name the styles (case-insensitive)."""

    def __init__(self, model_id: str, label_map: dict[str, str] | None = None, device: str = "cpu") -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_id)
            self.model = AutoModelForSequenceClassification.from_pretrained(model_id).to(device).eval()
        except OSError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SteerError(f"could not load classifier {model_id!r}: {first} (offline? use `kind` tfidf)") from None
        labels = self.model.config.id2label
        self.label_map = {k.lower(): v.lower() for k, v in (label_map or {}).items()}
        self.styles = [self.label_map.get(labels[i].lower(), labels[i].lower()) for i in range(len(labels))]
        self.name = model_id

    def probabilities(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        out = []
        for start in range(0, len(texts), batch_size):
            enc = self.tokenizer(
                list(texts[start : start + batch_size]), padding=True, truncation=True, return_tensors="pt"
            ).to(self.model.device)
            with torch.inference_mode():
                out.append(self.model(**enc).logits.float().softmax(-1).cpu())
        return torch.cat(out) if out else torch.zeros(0, len(self.styles))

    def _check(self, target: str) -> int:
        if target.lower() not in self.styles:
            raise SteerError(f"classifier labels are {', '.join(self.styles)}; map one to {target!r} with `labels`")
        return self.styles.index(target.lower())


JUDGES = ("auto", "tfidf", "minilm")


def build_judge(
    corpora: Mapping[str, Sequence[str]], kind: str = "auto", *, embedder: Embedder | None = None
) -> tuple[_Judge, dict[str, float]]:
    """The evaluation judge and every trained judge's held-out accuracy (same split).

    `auto` trains TF-IDF and MiniLM judges and keeps the more accurate on the held-out split
    (ties go to TF-IDF, the cheaper). Any other `kind` that is not a built-in name is loaded as a
    Hugging Face classifier.
    """
    if kind not in JUDGES:
        raise SteerError(f"judge {kind!r} is not built in; choose one of {', '.join(JUDGES)}")
    judges: list[_Judge] = []
    if kind in ("auto", "tfidf"):
        judges.append(StyleClassifier(corpora))
    if kind in ("auto", "minilm"):
        judges.append(EmbeddingClassifier(corpora, embedder))
    accuracies = {j.name: j.heldout_accuracy for j in judges}
    best = max(judges, key=lambda j: -1.0 if math.isnan(j.heldout_accuracy) else j.heldout_accuracy)
    best.others = tuple(j for j in judges if j is not best)  # kept, so a selection judge costs no retraining
    return best, accuracies


def judge_for(
    kind: str,
    labels: Sequence[str],
    corpora: Callable[[], dict[str, tuple[str, ...]]],
    embedder: Embedder | None,
) -> tuple[Any, dict[str, float]]:
    """The evaluation judge `kind` (a JUDGES name trained on the texts per style that `corpora`
    returns — asked only then — or a Hugging Face classifier with LABEL=STYLE `labels`) and the
    held-out accuracy of every judge trained for the choice."""
    if kind not in JUDGES:
        mapping = dict(item.split("=", 1) for item in labels if "=" in item)
        return HFClassifier(kind, mapping), {}
    texts = corpora()
    if kind in ("auto", "minilm") and embedder is None:
        embedder = Embedder()
    return build_judge(texts, kind, embedder=embedder)
