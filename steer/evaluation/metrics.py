"""Phase 3: score rewrites — BLEU/chrF against references, self-BLEU and copy rate against the
source, style accuracy with a judge, fluency (perplexity), content similarity, degeneracy
(loops, length, empty outputs) and the joint score J.

Every metric is a plain function of strings (and, for the model-based ones, a scorer object),
so `steer eval`, `steer run` and the tests share one implementation.

J (Logacheva et al., ACL 2022, ParaDetox) is the mean over sentences of
accuracy_i × similarity_i × fluency_i: the judge's probability of the target style, the cosine
of output and source clipped at 0 under the *evaluation* encoder (all-mpnet-base-v2, which
nothing that selects uses), and `sentence_fluency` calibrated on the median source (rerank
calibrates per source), 0 for an empty or looping output.

Faithfulness (`steer.scoring.faithfulness`): `meta` (talks about the task or echoes the
instruction), `near-loop`, `junk` (mostly non-words), `content` (source content words kept,
output content words invented, and the rates of invented/dropped content), `chrf-src` (chrF
against the source) and `usable`: judged target style, evaluation similarity ≥
`USABLE_SIMILARITY`, and neither empty, meta, near-loop nor junk.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from steer.distributed import map_sharded
from steer.errors import SteerError
from steer.files import json_lines
from steer.scoring import faithfulness as faith
from steer.scoring.encoders import SELECTION_ENCODER, USABLE_SIMILARITY, Embedder
from steer.scoring.fluency import _perplexity, sentence_fluency, token_nll
from steer.scoring.loops import has_loop

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
    "meta",
    "near-loop",
    "junk",
    "content",
    "chrf-src",
    "usable",
)
# usable: an evaluation-encoder (mpnet) cosine to the source of at least this. Most human rewrites on
# dev clear it on ParaDetox but far fewer on Shakespeare → modern: a bar for "meaning kept", stricter on
# free paraphrase (README, "Faithfulness").
FAITHFULNESS = ("meta", "near-loop", "junk", "content", "chrf-src", "usable")


def parse_metrics(spec: str | Sequence[str] | None) -> list[str]:
    """Metric names from `"bleu,copy"` or a list; all metrics when None."""
    names = list(METRICS) if spec is None else [m.strip() for m in (spec.split(",") if isinstance(spec, str) else spec)]
    unknown = [m for m in names if m not in METRICS]
    if unknown and unknown[0].startswith("llm-"):  # the LLM judge's rates come with --judge llm, not as metrics
        raise SteerError(
            f"{unknown[0]!r} is one of the LLM judge's rates, not a metric name; add `llm_judge` llm and it is "
            f"reported with the metrics; metrics: {', '.join(METRICS)}"
        )
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


def _check_lengths(outputs: Sequence[Any], other: Sequence[Any], what: str) -> None:
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
    return Score(metric.corpus_score(hyps, _streams(refs)).score, str(metric.get_signature()))


def chrf(outputs: Sequence[str], references: Sequence[Sequence[str | None]]) -> Score:
    """sacrebleu corpus chrF against one or more reference streams."""
    from sacrebleu.metrics import CHRF

    metric = CHRF()
    hyps, refs = _with_references(outputs, references)
    return Score(metric.corpus_score(hyps, _streams(refs)).score, str(metric.get_signature()))


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


def _streams(references: list[list[str | None]]) -> Sequence[Sequence[str]]:
    """Reference streams as sacrebleu types them: it takes None for a reference a row lacks."""
    return cast(Sequence[Sequence[str]], references)


def self_bleu(outputs: Sequence[str], sources: Sequence[str]) -> Score:
    """BLEU of the outputs against their own sources: high means little was changed."""
    return bleu(outputs, [list(sources)])


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


@dataclass
class Scorers:
    """The model-based scorers, built once and shared across many evaluations."""

    classifier: Any = None  # the judge that accuracy and J report with
    fluency_lm: Any = None
    embedder: Embedder | None = None  # similarity's encoder: the evaluation encoder (mpnet)
    # evaluation refuses to grade with the encoder rerank and tuning select with, unless asked
    allow_selection_encoder: bool = False
    # where the per-text model passes run (`run_pass`: "nll", "similarity"): None here, on this
    # machine's processes when there are several; else an object whose `many([(op, items), …])`
    # returns each pass's results, e.g. `steer.lab.ray_passes.RayPasses` on workers holding their own
    # copies of the same models
    engine: Any = None
    # an `LLMJudge` (`steer.evaluation.llm_judge`): llm-style, llm-meaning, llm-fluency and llm-usable
    llm_judge: Any = None

    def per_text_many(self, requests: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        """`run_pass(self, op, items)` for each (op, items): on the engine, all in one pass (its
        workers load their models once), or here, each shared by this machine's processes."""
        if not requests:
            return []
        if self.engine is not None:
            return [list(r) for r in self.engine.many(requests)]
        return [
            map_sharded(functools.partial(run_pass, self, op), items, size=_PASS_SIZE.get(op, len))
            for op, items in requests
        ]


# how map_sharded balances a pass's items over processes: by the length of the text scored
_PASS_SIZE: dict[str, Any] = {"similarity": lambda pair: len(pair[0])}


def run_pass(scorers: Scorers, op: str, items: Sequence[Any]) -> list[Any]:
    """One per-text model pass: "nll" — (summed NLL, tokens) of each text under the fluency model;
    "similarity" — the encoder's cosine of each (output, source) pair."""
    if op == "nll":
        return token_nll(scorers.fluency_lm, list(items))
    if op == "similarity":
        if scorers.embedder is None:
            raise ValueError("the similarity pass needs an embedder")
        return scorers.embedder.similarities([o for o, _ in items], [s for _, s in items])
    raise ValueError(f"unknown scoring pass {op!r}; known: nll, similarity")


def evaluate(
    outputs: Sequence[str | None],
    *,
    sources: Sequence[str] | None = None,
    references: Sequence[Sequence[str | None]] | None = None,
    target: str | None = None,
    metrics: Sequence[str] = METRICS,
    scorers: Scorers | None = None,
    per_sentence: bool = False,
    instruction: str = "",
    source_style: str | None = None,
) -> dict[str, Any]:
    """Every requested metric that the given inputs and scorers allow; the others are left out.

    `outputs` may hold None (a missing output): it counts as empty everywhere. `instruction` is
    the rewrite instruction the outputs were prompted with (`faithfulness.instruction_text`), for
    `meta`'s echo rule. With `per_sentence`, the result also has `sentences`: accuracy_i,
    similarity_i, fluency_i, loop_i and each faithfulness rule's verdict. With `scorers.llm_judge`,
    sources, `target` and `source_style`, the LLM judge's rates (and, per sentence, its P(Yes)s).
    """
    if not outputs:
        raise SteerError("no outputs to evaluate")
    scorers = scorers or Scorers()
    _refuse_selection_encoder(scorers)
    texts = [o if isinstance(o, str) else "" for o in outputs]
    loops = [has_loop(t) for t in texts]
    result, signatures = _string_metrics(texts, sources, references, metrics, loops)
    sentences: dict[str, list[Any]] = {"loop": loops}
    judged = _model_metrics(texts, sources, target, metrics, scorers, per_sentence, result, sentences)
    if sources is not None and (per_sentence or any(m in metrics for m in FAITHFULNESS)):
        _faithfulness(
            texts, sources, instruction, metrics, result, sentences, judged if "accuracy" in sentences else None
        )
    if scorers.llm_judge is not None and sources is not None and target is not None and source_style is not None:
        _llm_judged(texts, sources, source_style, target, scorers.llm_judge, result, sentences)
    if signatures:
        result["signatures"] = signatures
    if per_sentence:
        result["sentences"] = sentences
    return result


def _llm_judged(
    texts: list[str],
    sources: Sequence[str],
    source_style: str,
    target: str,
    judge: Any,
    result: dict[str, Any],
    sentences: dict[str, list[Any]],
) -> None:
    """The LLM judge's three answers per rewrite (shared over this machine's processes) and rates."""
    from steer.evaluation.llm_judge import QUESTIONS, JudgeItem, judge_rates

    _check_lengths(texts, sources, "sources")
    items = [JudgeItem(s, t, source_style, target) for t, s in zip(texts, sources, strict=True)]
    verdicts = map_sharded(judge.verdicts, items, size=lambda item: len(item.source) + len(item.rewrite))
    result.update(judge_rates(verdicts))
    result["llm_judge"] = judge.name
    for question in QUESTIONS:
        sentences[f"llm_{question}"] = [getattr(v, question) for v in verdicts]
    sentences["llm_usable"] = [v.usable for v in verdicts]


def _refuse_selection_encoder(scorers: Scorers) -> None:
    """What selects never grades: the selection encoder is refused as evaluation's similarity."""
    if (
        scorers.embedder is not None
        and getattr(scorers.embedder, "name", None) == SELECTION_ENCODER
        and not scorers.allow_selection_encoder
    ):
        raise SteerError(
            f"`embedder` {SELECTION_ENCODER} is the encoder rerank and tuning select with, so it would grade "
            "its own choices; use all-mpnet-base-v2 (the default) or set `allow_selection_encoder`"
        )


def _string_metrics(
    texts: list[str],
    sources: Sequence[str] | None,
    references: Sequence[Sequence[str | None]] | None,
    metrics: Sequence[str],
    loops: list[bool],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The metrics on strings alone (BLEU, chrF, self-BLEU, copy, loops, empty, length) and
    sacrebleu's signatures."""
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
    if "repetition" in metrics:
        result["repetition"] = sum(loops) / len(texts)
    if "empty" in metrics:
        result["empty"] = empty_rate(texts)
    if sources is not None and "length" in metrics:
        result["length"] = length_ratio(texts, sources)
    return result, signatures


def _model_metrics(
    texts: list[str],
    sources: Sequence[str] | None,
    target: str | None,
    metrics: Sequence[str],
    scorers: Scorers,
    per_sentence: bool,
    result: dict[str, Any],
    sentences: dict[str, list[Any]],
) -> list[tuple[float, bool]]:
    """The metrics that need a model — accuracy (the judge), perplexity and fluency (the LM),
    similarity (the encoder) and J — into `result`, their per-text values into `sentences`; returns
    the judge's (probability, hit) per text ([] without a judge)."""
    want_j = "j" in metrics and sources is not None and target is not None
    judge, lm, embedder = scorers.classifier, scorers.fluency_lm, scorers.embedder
    # the model-based passes are per text: under several processes each scores its share (map_sharded)
    judged: list[tuple[float, bool]] = []
    wants_judge = "accuracy" in metrics or want_j or per_sentence or "usable" in metrics
    if target is not None and judge is not None and wants_judge:
        judged = map_sharded(lambda part: judge.judgements(part, target), texts)
        sentences["accuracy"] = [p for p, _ in judged]
        if "accuracy" in metrics:
            result["accuracy"] = sum(hit for _, hit in judged) / len(texts)
        result["judge"] = judge.name
    wants_nll = lm is not None and ("ppl" in metrics or want_j or per_sentence)
    wants_similarity = "similarity" in metrics or want_j or per_sentence or "usable" in metrics
    wants_similarity = wants_similarity and sources is not None and embedder is not None
    requests: list[tuple[str, list[Any]]] = []  # the per-text model passes, asked for at once
    if wants_nll:
        requests += [("nll", texts)] + ([("nll", list(sources))] if sources is not None else [])
    if wants_similarity:
        _check_lengths(texts, sources or [], "sources")
        requests.append(("similarity", list(zip(texts, sources or [], strict=True))))
    passes = iter(scorers.per_text_many(requests))
    if wants_nll:
        nll = next(passes)
        if "ppl" in metrics:
            result["ppl"] = _perplexity(nll)
        source_nll = next(passes) if sources is not None else []
        if any(n for _, n in source_nll):  # no source of two tokens: nothing to calibrate fluency (and J) on
            sentences["fluency"] = sentence_fluency(texts, nll, source_nll)
    if wants_similarity:
        sims = next(passes)
        sentences["similarity"] = sims
        if "similarity" in metrics:
            result["similarity"] = sum(sims) / len(sims)
    if want_j and all(k in sentences for k in ("accuracy", "similarity", "fluency")):
        result["j"] = joint_score(sentences["accuracy"], sentences["similarity"], sentences["fluency"])
    return judged


def _faithfulness(
    texts: list[str],
    sources: Sequence[str],
    instruction: str,
    metrics: Sequence[str],
    result: dict[str, Any],
    sentences: dict[str, list[Any]],
    judged: list[tuple[float, bool]] | None,
) -> None:
    """The faithfulness rates (and `usable` when the judge and similarity were computed)."""
    _check_lengths(texts, sources, "sources")
    flags = [faith.flags(o, s, instruction) for o, s in zip(texts, sources, strict=True)]
    n = len(texts)
    for key in ("meta", "near_loop", "junk", "invented", "dropped"):
        sentences[key] = [getattr(f, key) for f in flags]
    if "meta" in metrics:
        result["meta"] = sum(f.meta for f in flags) / n
    if "near-loop" in metrics:
        result["near_loop"] = sum(f.near_loop for f in flags) / n
    if "junk" in metrics:
        result["junk"] = sum(f.junk for f in flags) / n
    if "content" in metrics:
        kept = [k for k in (faith.content_kept(o, s) for o, s in zip(texts, sources, strict=True)) if k is not None]
        result["content_kept"] = sum(kept) / len(kept) if kept else float("nan")
        result["invented_share"] = sum(faith.invented_share(o, s) for o, s in zip(texts, sources, strict=True)) / n
        result["invented"] = sum(f.invented for f in flags) / n
        result["dropped"] = sum(f.dropped for f in flags) / n
    if "chrf-src" in metrics:
        result["chrf_src"] = chrf(texts, [list(sources)]).value
    if "usable" in metrics and judged is not None and "similarity" in sentences:
        usable = [
            hit and sim >= USABLE_SIMILARITY and not f.unusable
            for (_, hit), sim, f in zip(judged, sentences["similarity"], flags, strict=True)
        ]
        sentences["usable"] = usable
        result["usable"] = sum(usable) / n


def read_outputs(path: str | Path) -> list[dict[str, Any]]:
    """Records of a `steer transfer -o x.jsonl` file, or `{"output": line}` per line of a text file."""
    path = Path(path)
    if path.is_dir():
        raise SteerError(f"outputs {path} is a directory; pass the file 'steer transfer -o' wrote")
    if path.exists() and not path.is_file():
        raise SteerError(
            f"outputs {path} is not a regular file (a device, FIFO or socket); pass the file 'steer transfer -o' wrote"
        )
    if not path.is_file():
        raise SteerError(f"outputs file {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8").removeprefix("\ufeff")  # a byte-order mark is no text
    except UnicodeDecodeError as exc:
        where = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise SteerError(f"{path}: line {where} is not valid UTF-8; re-encode the file as UTF-8") from None
    if path.suffix == ".jsonl":
        records = []
        for number, record in json_lines(text.splitlines(), path):
            if "output" not in record:
                raise SteerError(f"{path}: line {number} has no 'output' field")
            records.append(record)
    else:
        records = [{"output": line} for line in text.split("\n")]
        while records and not records[-1]["output"]:
            records.pop()
    if not records:
        raise SteerError(f"{path} is empty")
    return records
