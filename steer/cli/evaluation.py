"""`steer eval`: score rewrites (rules, judges, similarity, fluency, the LLM judge) and print the table."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import click

from steer.cli.app import (
    DEVICE,
    PROFILE,
    as_options,
    cli,
    processes_option,
    relaunched,
)
from steer.cli.judging import (
    check_judge_inputs,
    check_pairwise_options,
    judge_model_of,
    load_llm_judge,
    pairwise_items,
    run_pairwise,
)
from steer.distributed import is_main_process
from steer.errors import SteerError
from steer.model.names import EMBEDDED_ALIAS


@cli.command(name="eval")
@click.argument("outputs_path", metavar="OUTPUTS", type=click.Path(path_type=Path))
@click.option(
    "--ref", "refs", multiple=True, help="Reference file (one per line, aligned); repeat for multi-reference."
)
@click.option("--src", "src", default=None, help="Source texts (default: the JSONL records' source_text).")
@click.option("--target", default=None, help="Target style for accuracy (default: the records' target_style).")
@click.option(
    "--metrics",
    default=None,
    help="Comma-separated subset of: bleu,chrf,self-bleu,copy,accuracy,ppl,similarity,repetition,length,empty,j,"
    "meta,near-loop,junk,content,chrf-src,usable.",
)
@click.option(
    "--classifier",
    default="auto",
    show_default=True,
    help="The judge for accuracy and J: 'auto' (the more accurate on held-out texts of tfidf and minilm), "
    "'tfidf', 'minilm' (logistic regression on MiniLM embeddings), or a Hugging Face classifier.",
)
@click.option("--label", "labels", multiple=True, metavar="LABEL=STYLE", help="Map a HF classifier label to a style.")
@click.option(
    "--train-style",
    "train_styles",
    multiple=True,
    metavar="NAME=SOURCE",
    help="Corpora for the tfidf classifier (default: the profile's own corpora).",
)
@click.option(
    "-p",
    "--profile",
    "profile_path",
    type=PROFILE,
    default=None,
    help="Profile whose corpora train the classifier, or hf:OWNER/NAME[@REV] (default: the records' profile).",
)
@click.option("--fluency-model", default=None, help="LM for perplexity (default: the records' model); 'none' to skip.")
@click.option(
    "--embedder",
    default="all-mpnet-base-v2",
    show_default=True,
    help="Sentence encoder for similarity (and usable, J); 'none' to skip. all-minilm-l6-v2 is rerank's own "
    "encoder and is refused unless --allow-selection-encoder.",
)
@click.option(
    "--allow-selection-encoder",
    is_flag=True,
    help="Let --embedder be all-minilm-l6-v2, the encoder rerank selects with (its scores then grade themselves).",
)
@click.option(
    "--judge",
    "llm_judge",
    default="none",
    show_default=True,
    metavar="none|llm[:MODEL]",
    help="Also ask a local instruct model (default qwen2.5-coder-1.5b) whether each rewrite is in the target style, "
    "keeps the meaning and is fluent: llm-style, llm-meaning, llm-fluency, llm-usable (answers cached).",
)
@click.option(
    "--pairwise",
    "pairwise_path",
    type=click.Path(path_type=Path),
    default=None,
    metavar="OTHER",
    help="With --judge llm, score nothing: ask which of two rewrites of each source is the better, OUTPUTS' (A) "
    "or OTHER's (B; the same sources in the same order), both shown first and second; print per direction how "
    "many pairs prefer A, B, neither.",
)
@click.option(
    "--allow-same-model",
    is_flag=True,
    help="Let the LLM judge be the model that decoded the rewrites (it then grades its own outputs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table (with --judge: per sentence too).")
@click.option(
    "--device", type=DEVICE, default="cpu", show_default=True, help="torch device of the models that score, e.g. cuda."
)
@processes_option("Score perplexity, similarity and the judge")
def eval_command(
    outputs_path: Path,
    refs: tuple[str, ...],
    src: str | None,
    target: str | None,
    metrics: str | None,
    classifier: str,
    labels: tuple[str, ...],
    train_styles: tuple[str, ...],
    profile_path: Path | None,
    fluency_model: str | None,
    embedder: str,
    allow_selection_encoder: bool,
    llm_judge: str,
    pairwise_path: Path | None,
    allow_same_model: bool,
    as_json: bool,
    device: str,
    processes: int,
) -> None:
    """Score rewrites: BLEU/chrF vs references, self-BLEU and copy rate vs sources, accuracy, PPL, similarity,
    loops, length, empty outputs, the joint score J, and faithfulness: meta, near-loop, junk, content kept and
    invented, chrF vs the source, usable."""
    import json

    from steer.evaluation import metrics as ev
    from steer.scoring.encoders import SELECTION_ENCODER

    names = ev.parse_metrics(metrics)
    judge_model = judge_model_of(llm_judge)
    if pairwise_path is not None:  # the judge's preference between two files' rewrites, nothing else
        check_pairwise_options(click.get_current_context(), judge_model)
        paths, sides = (
            (outputs_path, pairwise_path),
            [_eval_inputs(p, None, ())[0] for p in (outputs_path, pairwise_path)],
        )
        pairs = pairwise_items(sides, paths, _line_of)
        run_pairwise(pairs, sides, paths, str(judge_model), allow_same=allow_same_model, as_json=as_json, device=device)
        return
    records, outputs, sources, references = _eval_inputs(outputs_path, src, refs)
    if target is None:
        _check_one_direction(records, outputs_path)
    target = target or records[0].get("target_style")
    if processes > 1 and src == "-":
        raise SteerError("stdin ('--src -') cannot be shared between processes; pass a file or drop --processes")
    if embedder == SELECTION_ENCODER and not allow_selection_encoder:
        raise SteerError(
            f"--embedder {SELECTION_ENCODER} is the encoder rerank selects with, so it would grade its own choices; "
            "use all-mpnet-base-v2 (the default) or add --allow-selection-encoder"
        )
    instruction = _instruction(records[0], target)
    if judge_model is not None:
        check_judge_inputs(records, judge_model, sources, target, allow_same_model)
    if relaunched(processes):
        return
    scorers, info, notes = _eval_scorers(
        records[0], names, target, asked=metrics is not None, classifier=classifier, labels=labels,
        train_styles=train_styles, profile_path=profile_path, outputs_path=outputs_path, embedder=embedder,
        fluency_model=fluency_model, device=device, allow_selection_encoder=allow_selection_encoder,
    )  # fmt: skip
    if judge_model is not None:
        scorers.llm_judge = load_llm_judge(judge_model, records, device, allow_same_model)
        info["llm judge"] = scorers.llm_judge.name + (" (the decoding model itself)" if allow_same_model else "")
    result = ev.evaluate(
        outputs,
        sources=sources,
        references=references,
        target=target,
        metrics=names,
        scorers=scorers,
        instruction=instruction,
        source_style=records[0].get("source_style"),
        per_sentence=as_json and judge_model is not None,
    )
    result.update(info)
    missing = {m: why for m, why in _unscorable(names, result, sources, references, target).items()}
    if missing and metrics is not None:  # asked for by name: an error, not a silent gap
        name, why = next(iter(missing.items()))
        raise SteerError(f"metric {name!r} cannot be computed: {why}")
    if not is_main_process():  # every process scored its share; the main one prints
        return
    for note in notes:
        click.echo(f"note: {note}", err=True)
    for name, why in missing.items():
        click.echo(f"note: {name} not computed ({why})", err=True)
    if as_json:
        from steer.rewriting.records import strict_json

        click.echo(json.dumps(strict_json(result), indent=2, allow_nan=False))  # NaN (not measured) as null
    else:
        _print_scores(result, info, target)


def _eval_inputs(
    outputs_path: Path, src: str | None, refs: tuple[str, ...]
) -> tuple[list[dict[str, Any]], list[str], list[str] | None, list[list[str | None]] | None]:
    """The records, their outputs (a null output counts as empty; any other non-string is refused),
    the sources (--src, else the records' source_text: all of them strings, or none) and the
    references of `steer eval`."""
    from steer.evaluation import metrics as ev
    from steer.profiling.corpus import read_texts

    if outputs_path.is_dir():  # before read_outputs, which would call it missing
        raise SteerError(f"outputs {outputs_path} is a directory; pass the file 'steer transfer -o' wrote")
    from steer.rewriting.records import check_record_version

    records = ev.read_outputs(outputs_path)
    for index, record in enumerate(records):
        if record["output"] is not None:
            _check_string(record, "output", outputs_path, index)
        for field in ("source_style", "target_style", "profile", "model_id"):  # names and paths steer reads
            if record.get(field) is not None:
                _check_string(record, field, outputs_path, index)
        check_record_version(record, outputs_path, "write it again with 'steer transfer -o FILE.jsonl'")
    outputs = [r["output"] or "" for r in records]
    sources = read_texts(src, keep_empty=True) if src else _record_sources(records, outputs_path)
    if sources is not None and len(sources) != len(outputs):
        raise SteerError(f"--src has {len(sources)} lines but {outputs_path} has {len(outputs)} outputs; align them")
    references = [[x or None for x in read_texts(r, keep_empty=True)] for r in refs] or None
    return records, outputs, sources, references


def _record_sources(records: list[dict[str, Any]], path: Path) -> list[str] | None:
    """The records' source_text, None when no record has one. Where some have it, every one must,
    as a string: a record without its source would shift every later source onto the wrong
    output, and a number is no text — each is one line naming the record's line and the field."""
    having = [i for i, r in enumerate(records) if "source_text" in r]
    if not having:
        return None
    for index, record in enumerate(records):
        if "source_text" not in record:
            raise SteerError(
                f"{path}: line {_line_of(path, index)} has no 'source_text' field, which line "
                f"{_line_of(path, having[0])} has; give every record its source_text, or pass the sources with --src"
            )
        _check_string(record, "source_text", path, index)
    return [r["source_text"] for r in records]


def _check_string(record: dict[str, Any], field: str, path: Path, index: int) -> None:
    """A record's `field` must be a string (`"output": 5` is no rewrite, `"source_text": 12` no source)."""
    value = record[field]
    if not isinstance(value, str):
        shown = "null" if value is None else type(value).__name__
        raise SteerError(
            f"{path}: line {_line_of(path, index)}'s field {field!r} is {shown}, not a string; "
            "give every text as a string"
        )


def _check_one_direction(records: list[dict[str, Any]], path: Path) -> None:
    """Records of several directions (two files concatenated) would all be graded against the first
    record's target style and instruction: refuse them, naming the first line that differs."""
    first = (records[0].get("source_style"), records[0].get("target_style"))
    for index, record in enumerate(records):
        here = (record.get("source_style"), record.get("target_style"))
        if here != first:
            raise SteerError(
                f"{path}: line {_line_of(path, index)} is a {here[0]} → {here[1]} rewrite but line "
                f"{_line_of(path, 0)} is {first[0]} → {first[1]}; steer eval grades one direction at a time: "
                "split the file per direction (or pass --target to grade every line against one style)"
            )


def _line_of(path: Path, index: int) -> int:
    """The file line of record `index` (0-based), for messages: `read_outputs` skips a JSONL file's
    blank lines, so the index alone would name the wrong line. Read again only to report an error."""
    if path.suffix != ".jsonl":
        return index + 1
    text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
    return [n for n, line in enumerate(text.splitlines(), start=1) if line.strip()][index]


def _eval_scorers(
    first: dict[str, Any],
    names: list[str],
    target: str | None,
    *,
    asked: bool,
    classifier: str,
    labels: tuple[str, ...],
    train_styles: tuple[str, ...],
    profile_path: Path | None,
    outputs_path: Path,
    embedder: str,
    fluency_model: str | None,
    device: str,
    allow_selection_encoder: bool,
) -> tuple[Any, dict[str, Any], list[str]]:
    """The judge, encoder and fluency model the requested metrics need (defaults from the first
    record), what was used (`info`), and notes on what was left out."""
    from steer.evaluation import metrics as ev
    from steer.profiling.profile import style_corpora
    from steer.scoring.encoders import SELECTION_ENCODER, Embedder
    from steer.scoring.judges import judge_for

    scorers = ev.Scorers(allow_selection_encoder=allow_selection_encoder)
    info: dict[str, Any] = {}
    notes: list[str] = []
    if ("accuracy" in names or "j" in names or "usable" in names) and target:
        recorded = first.get("profile")
        try:
            if profile_path is None and recorded and not train_styles and classifier in ("auto", "tfidf", "minilm"):
                from steer.rewriting.records import check_recorded_profile

                recorded = check_recorded_profile(Path(recorded), first.get("profile_sha256"), outputs_path)
            judge_embedder = Embedder(SELECTION_ENCODER) if classifier in ("auto", "minilm") else None
            corpora = partial(style_corpora, train_styles, profile_path or recorded)
            scorers.classifier, held = judge_for(classifier, labels, corpora, judge_embedder)
            info.update({f"judge {k} held-out": v for k, v in held.items()})
        except SteerError as exc:
            if asked:  # asked for by name: the reason is the error
                raise
            notes.append(f"no judge, so accuracy, J and usable are left out: {as_options(str(exc), eval_command)}")
    if any(m in names for m in ("similarity", "j", "usable")) and embedder.lower() != "none":
        scorers.embedder = Embedder(embedder)
        info["embedder"] = embedder
    if ("ppl" in names or "j" in names) and (fluency_model or "").lower() != "none":
        from steer.model.loading import load_model

        scorers.fluency_lm = load_model(
            fluency_model or first.get("model_id") or EMBEDDED_ALIAS, device=device, progress=False
        )
        info["fluency_model"] = scorers.fluency_lm.model_id
    return scorers, info, notes


_LABELS = {
    "bleu": "BLEU",
    "chrf": "chrF",
    "self_bleu": "self-BLEU",
    "copy_rate": "copy rate",
    "accuracy": "accuracy ({target})",
    "ppl": "perplexity",
    "similarity": "similarity",
    "repetition": "repetition (loops)",
    "length": "length (out/src words)",
    "empty": "empty",
    "j": "J (acc×sim×fluency)",
    "meta": "meta (talks about task)",
    "near_loop": "near-loop",
    "junk": "junk (non-words)",
    "content_kept": "content kept",
    "invented_share": "content invented",
    "invented": "invents (2×, mostly new)",
    "dropped": "drops (<40% kept)",
    "chrf_src": "chrF vs source",
    "usable": "usable",
    "judge": "judge",
    "llm_style": "llm-style",
    "llm_meaning": "llm-meaning",
    "llm_fluency": "llm-fluency",
    "llm_usable": "llm-usable",
}


def _print_scores(result: dict[str, Any], info: dict[str, Any], target: str | None) -> None:
    """`steer eval`'s table: one line per metric, then what scored them and sacrebleu's signatures."""
    click.echo(f"{'outputs':<26}{result['n']}")
    for key, label in _LABELS.items():
        label = label.format(target=target)
        if key in result:
            value = result[key]
            if isinstance(value, str):
                click.echo(f"{label:<26}{value}")
            elif key in ("bleu", "chrf", "self_bleu", "ppl", "chrf_src"):
                click.echo(f"{label:<26}{value:.2f}")
            else:
                click.echo(f"{label:<26}{value:.4f}")
    for key, value in info.items():
        if isinstance(value, float) and math.isnan(value):  # too few training texts to hold any out
            value = "n/a (too few training texts to hold any out: its accuracy is not measured)"
        click.echo(f"{key:<26}{value if isinstance(value, str) else f'{value:.4f}'}")
    for name, sig in result.get("signatures", {}).items():
        click.echo(f"sacrebleu {name}: {sig}")


_RESULT_KEYS = {
    "self-bleu": "self_bleu",
    "copy": "copy_rate",
    "near-loop": "near_loop",
    "content": "content_kept",
    "chrf-src": "chrf_src",
}


def _instruction(record: dict[str, Any], target: str | None) -> str:
    """The instruction the outputs were prompted with (for `meta`'s echo rule): the record's
    template, else the packaged one for its direction; empty when neither is known."""
    from steer.prompts import load_prompts
    from steer.scoring.faithfulness import instruction_text

    source = record.get("source_style")
    template = record.get("prompt_template")
    if not template and source and target:
        prompts = load_prompts()
        template = prompts.get(f"{source}->{target}", prompts["default"])
    return instruction_text(template, source or "", target or "") if template else ""


def _unscorable(
    names: list[str], result: dict[str, Any], sources: Any, references: Any, target: str | None
) -> dict[str, str]:
    """Requested metrics missing from `result`, each with what it needs."""
    needs = {
        "bleu": "it needs --ref",
        "chrf": "it needs --ref",
        "accuracy": "it needs a target style (--target) and a judge",
        "ppl": "it needs a fluency model (--fluency-model)",
        "j": "it needs sources, a target style, a judge, the fluency model and the embedder",
        "usable": "it needs sources, a target style, a judge and the embedder",
    }
    out = {}
    for name in names:
        if _RESULT_KEYS.get(name, name) not in result:
            out[name] = needs.get(name, "it needs the source texts (--src or JSONL records with source_text)")
    return out
