"""`steer eval --judge llm[:MODEL]`'s options: which model judges, checked before anything loads,
and the refusal of a judge that decoded the rewrites it would grade; and `--pairwise`, which asks
the judge which of two files' rewrites of each source is the better."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
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


# what `steer eval --pairwise` reads; every other option is for scoring, and given with it is refused
PAIRWISE_OPTIONS = ("outputs_path", "pairwise_path", "llm_judge", "allow_same_model", "as_json", "device")


def check_pairwise_options(ctx: click.Context, model: str | None) -> None:
    """`--pairwise` asks the LLM judge and nothing else: without `--judge llm`, or with a scoring
    option (`--metrics`, `--ref`, ...), it is one line."""
    if model is None:
        raise SteerError("--pairwise asks the LLM judge which rewrite is the better: add --judge llm[:MODEL]")
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name or "")
        if param.name not in PAIRWISE_OPTIONS and source == click.core.ParameterSource.COMMANDLINE:
            raise SteerError(
                f"--pairwise compares two files' rewrites with the LLM judge only; {param.opts[0]} scores one "
                "file: drop it (or drop --pairwise)"
            )


def _shown(text: str) -> str:
    """A text in a message: quoted, cut to 60 characters."""
    return repr(text if len(text) <= 60 else text[:59] + "…")


def pairwise_items(
    sides: list[list[dict[str, Any]]], paths: tuple[Path, Path], line_of: Callable[[Path, int], int]
) -> list[tuple[Any, Any]]:
    """Each source's two rewrites (A from the first file, B from the second) as a pair of
    `JudgeItem`s: the files must hold the same sources, between the same styles, in the same order
    — one line naming the first record that does not (`line_of`: a record's line in its file)."""
    from steer.evaluation.llm_judge import JudgeItem

    (a, b), (path_a, path_b) = sides, paths
    for side, path in zip(sides, paths, strict=True):
        for index, record in enumerate(side):
            missing = [f for f in ("source_text", "source_style", "target_style") if not isinstance(record.get(f), str)]
            if missing:
                raise SteerError(
                    f"{path}: line {line_of(path, index)} has no {missing[0]!r}; --pairwise reads each source and "
                    "its styles: compare steer transfer's JSONL records"
                )
    pairs = []
    for index in range(max(len(a), len(b))):
        if index >= len(a) or index >= len(b):
            longer, shorter = (path_a, path_b) if len(a) > len(b) else (path_b, path_a)
            raise SteerError(
                f"{longer}: line {line_of(longer, index)} has no counterpart in {shorter} ({len(a)} records beside "
                f"{len(b)}); --pairwise needs both files to hold the same sources in the same order"
            )
        x, y = a[index], b[index]
        styles = [(r["source_style"], r["target_style"]) for r in (x, y)]
        if x["source_text"] != y["source_text"] or styles[0] != styles[1]:
            what = (
                f"sources {_shown(x['source_text'])} and {_shown(y['source_text'])}"
                if x["source_text"] != y["source_text"]
                else f"directions {x['source_style']} → {x['target_style']} and {y['source_style']} → "
                f"{y['target_style']}"
            )
            raise SteerError(
                f"{path_a}: line {line_of(path_a, index)} and {path_b}: line {line_of(path_b, index)} differ "
                f"({what}); --pairwise needs both files to hold the same sources in the same order"
            )
        a_item, b_item = (JudgeItem(r["source_text"], r["output"] or "", *styles[0]) for r in (x, y))
        pairs.append((a_item, b_item))
    return pairs


def run_pairwise(
    pairs: list[tuple[Any, Any]],
    sides: list[list[dict[str, Any]]],
    paths: tuple[Path, Path],
    model: str,
    *,
    allow_same: bool,
    as_json: bool,
    device: str,
) -> None:
    """Ask the judge which rewrite of each pair is the better and print, per direction, how many
    pairs prefer A (the first file), B, or neither (|log-odds| < `TIE_MARGIN`); nothing is recorded."""
    import json

    from steer.evaluation.judge_prompt import check_judge_prompt, load_judge_prompt, pairwise_table
    from steer.evaluation.pairwise import TIE_MARGIN, preference_counts
    from steer.rewriting.records import strict_json

    records = [*sides[0], *sides[1]]
    check_judge_inputs(records, model, [p[0].source for p in pairs], pairs[0][0].target_style, allow_same)
    pairwise_table(check_judge_prompt(load_judge_prompt()))  # a prompt without the table: before the model loads
    judge = load_llm_judge(model, records, device, allow_same)
    preferences = judge.prefer(pairs)
    directions: dict[str, list[float]] = {}
    for (a, _), value in zip(pairs, preferences, strict=True):
        directions.setdefault(f"{a.source_style}->{a.target_style}", []).append(value)
    counts = {d: preference_counts(values, TIE_MARGIN) for d, values in directions.items()}
    name = judge.name + (" (the decoding model itself)" if allow_same else "")
    if as_json:
        result = {"llm judge": name, "a": str(paths[0]), "b": str(paths[1]), "tie_margin": TIE_MARGIN}
        result |= {"directions": counts, "log_odds": preferences}
        click.echo(json.dumps(strict_json(result), indent=2, allow_nan=False))
        return
    click.echo(f"{'llm judge':<26}{name}\n{'A':<26}{paths[0]}\n{'B':<26}{paths[1]}")
    click.echo(f"{'direction':<26}{'n':>6}{'A preferred':>13}{'B preferred':>13}{'ties':>7}")
    for direction, c in counts.items():
        click.echo(f"{direction:<26}{c['n']:>6}{c['a_preferred']:>13}{c['b_preferred']:>13}{c['ties']:>7}")
    click.echo(f"(a tie: |log-odds that A is the better| < {TIE_MARGIN})")
