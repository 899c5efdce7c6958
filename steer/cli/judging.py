"""`steer eval --judge llm[:MODEL]`'s options: which model judges, checked before anything loads,
and the refusal of a judge that decoded the rewrites it would grade."""

from __future__ import annotations

from typing import Any

import click

from steer.errors import SteerError


def judge_model_of(spec: str) -> str | None:
    """The LLM judge's model from `--judge` (None for none), checked before anything loads."""
    from steer.evaluation.llm_judge import DEFAULT_JUDGE_MODEL

    kind, _, model = spec.partition(":")
    if kind.strip().lower() == "none" and not model:
        return None
    if kind.strip().lower() != "llm" or (_ and not model.strip()):
        raise click.BadParameter(
            f"{spec!r} is not a judge; use none, llm (the {DEFAULT_JUDGE_MODEL}) or llm:MODEL", param_hint="--judge"
        )
    return model.strip() or DEFAULT_JUDGE_MODEL


def check_judge_inputs(
    records: list[dict[str, Any]], model: str, sources: list[str] | None, target: str | None, allow_same: bool
) -> None:
    """The LLM judge reads sources, styles and rewrites; and it never grades its own outputs by name."""
    if sources is None or target is None or not records[0].get("source_style"):
        raise SteerError(
            "--judge llm reads each source, its style and the target style: judge steer transfer's JSONL records"
        )
    decoders = {str(r.get("model_id")) for r in records}
    if model in decoders and not allow_same:
        raise SteerError(
            f"--judge llm:{model} is the model that decoded these rewrites, so it would grade its own outputs; "
            "choose another with --judge llm:MODEL, or pass --allow-same-model (the results then say so)"
        )


def load_llm_judge(model: str, records: list[dict[str, Any]], device: str, allow_same: bool) -> Any:
    """The LLM judge on `model`, refused when its weights are a decoding model's (by fingerprint)."""
    from steer.evaluation.llm_judge import LLMJudge, check_not_decoder
    from steer.model.embedded import cache_folder
    from steer.model.loading import load_model

    cache = cache_folder("judge")  # an unwritable STEER_CACHE is refused before the judge loads
    lm = load_model(model, device=device, progress=False)
    check_not_decoder(lm.fingerprint, records, allow_same_model=allow_same)
    return LLMJudge(lm, cache_dir=cache)
