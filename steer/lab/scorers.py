"""The scorers a run grades and tunes with, built up front and once: evaluation's (the judge it
reports with, the unedited model for fluency, the evaluation encoder, the config's LLM judge) and
tuning's selection side (a different judge and the selection encoder — what chooses among outputs
never grades them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from steer.evaluation.metrics import Scorers
from steer.lab.experiment import Experiment
from steer.model.loading import LoadedModel
from steer.scoring.encoders import EVALUATION_ENCODER, SELECTION_ENCODER, shared_embedder
from steer.scoring.judges import build_judge


@dataclass(frozen=True)
class RunScorers:
    """Evaluation's scorers, tuning's selection scorers, and the held-out accuracy of each trained judge."""

    evaluation: Scorers
    selection: Scorers
    judge_accuracies: dict[str, float]


def build_scorers(
    exp: Experiment, lm: LoadedModel, engine: Callable[[str], Any], log: Callable[[str], None]
) -> RunScorers:
    """Both sides' scorers for `exp` on `lm`. The evaluation judge is the more accurate on held-out
    train texts (or the config's `judge`); the selection judge is another one (the auto judge's
    runner-up, else tf-idf — or MiniLM when evaluation's is tf-idf); `engine(encoder)`: where each
    side's per-text passes run (None: here; `steer.lab.ray_passes.RayPasses` on Ray workers)."""
    selection_encoder = shared_embedder(SELECTION_ENCODER)  # the minilm judge's features
    judge, accuracies = build_judge(dict(exp.train), exp.judge, embedder=selection_encoder)
    grader = llm_judge(exp, lm, log)
    evaluating = shared_embedder(EVALUATION_ENCODER)
    evaluation = Scorers(judge, lm, evaluating, engine=engine(EVALUATION_ENCODER), llm_judge=grader)
    log(f"judge: {judge.name} (held-out accuracy " + ", ".join(f"{k} {v:.3f}" for k, v in accuracies.items()) + ")")
    trained = list(getattr(judge, "others", ()))
    if trained:
        selector = trained[0]
    else:
        other = "tfidf" if judge.name != "tfidf" else "minilm"
        selector, _ = build_judge(dict(exp.train), other, embedder=selection_encoder)
    selection = replace(
        evaluation,
        classifier=selector,
        embedder=selection_encoder,
        allow_selection_encoder=True,
        engine=engine(SELECTION_ENCODER),
        llm_judge=None,  # the LLM judge grades; it never selects
    )
    return RunScorers(evaluation, selection, dict(accuracies))


def llm_judge(exp: Experiment, lm: LoadedModel, log: Callable[[str], None]) -> Any:
    """The config's LLM judge (None without `llm_judge`), refused when its weights are the
    decoding model's unless `allow_same_model`."""
    if exp.llm_judge is None:
        return None
    from steer.evaluation.llm_judge import LLMJudge, check_not_decoder
    from steer.model.embedded import cache_folder
    from steer.model.loading import load_model

    judge_lm = lm if exp.llm_judge == exp.model else load_model(exp.llm_judge, progress=False)
    records = [{"model_id": lm.model_id, "fingerprint": lm.fingerprint}]
    check_not_decoder(judge_lm.fingerprint, records, allow_same_model=exp.allow_same_model)
    log(f"LLM judge: {judge_lm.model_id}" + (" (the decoding model itself)" if judge_lm is lm else ""))
    return LLMJudge(judge_lm, cache_dir=cache_folder("judge"))
