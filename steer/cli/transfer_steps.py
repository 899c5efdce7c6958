"""What `steer transfer` does around decoding: its options checked before any model loads (output,
recipe, styles against the profile and its probe), the recipe chosen (preset, --settings file,
rerank), the inputs read and the --compare printout (resumable decoding into `-o FILE` is
`steer.rewriting.output.decode_to_file`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from steer.errors import SteerError


def _tuned_for(path: Path, source: str, target: str) -> dict[str, Any]:
    """The settings `steer tune` chose for one direction."""
    from steer.rewriting.records import TuneResult

    return TuneResult.read(path).settings_for(f"{source}-{target}", path)


def check_output_options(
    output: Path | None,
    profile_path: Path,
    inputs: dict[str, Any],
    *,
    force: bool,
    processes: int,
    resume: bool,
    ray: Any,
    compare: bool,
    keep_candidates: bool,
    device: str,
    as_json: bool = False,
) -> None:
    """-o FILE against its inputs, --force, leftovers of an interrupted run, and the options that
    need -o (--processes, --engine ray, --resume, --keep-candidates)."""
    from steer.distributed import distributed_state
    from steer.rewriting.partial import PartialRecords

    if output is not None:
        from steer.files import check_not_an_input
        from steer.profiling.defaults import defaults_path
        from steer.profiling.probe import probe_path

        beside = {"the profile's probe": probe_path(profile_path)}
        beside["the profile's read defaults"] = defaults_path(profile_path)
        check_not_an_input(output, {"the profile": profile_path, **beside, **inputs})
    if output is not None and os.path.lexists(output) and resume and not force:
        # an interrupted --force run: its rewrites wait in the partial file, the old output is still there
        if PartialRecords.leftovers(output):
            raise SteerError(
                f"{output} exists, and --resume never replaces a file: to finish an interrupted --force run, move "
                f"{output} away (its rewrites are kept in the partial file), then run again with --resume"
            )
        raise SteerError(
            f"{output} exists and no interrupted run of it is waiting to resume; pass --force (without --resume) "
            "to overwrite it, or choose another -o"
        )
    if output is not None and os.path.lexists(output) and not force:  # a dangling link too
        raise SteerError(f"{output} exists; pass --force to overwrite it")
    if processes < 1:
        raise SteerError(f"--processes must be at least 1, got {processes}")  # before the -o check below
    if (processes > 1 or resume or ray.on or distributed_state() is not None) and (output is None or compare):
        why = "add -o FILE" if output is None else "drop --compare"
        raise SteerError(f"--processes, --engine ray and --resume write through -o FILE; {why}")
    ray.check(processes, device)
    if keep_candidates and not as_json and (output is None or output.suffix != ".jsonl"):
        raise SteerError("--keep-candidates writes the candidates into the records: add -o FILE.jsonl or --json")
    if resume and force:
        raise SteerError("--resume continues an interrupted run and --force starts over; give one of them, not both")
    if output is None or compare:
        return
    foreign = PartialRecords.foreign(output, processes, blocks=ray.on)
    if foreign:
        raise SteerError(
            f"{foreign[0]} is not a steer partial file, and this run would write its own under that name; "
            "move it away or pick another -o"
        )
    PartialRecords.check_free(output)
    leftover = PartialRecords.leftovers(output) if not (resume or force) else []
    if leftover:
        raise SteerError(
            f"{leftover[0]} holds rewrites of an interrupted run; add --resume to continue it or --force to start over"
        )


def transfer_recipe(
    opened: Any,
    preset: str | None,
    fields_given: dict[str, Any],
    settings_file: Path | None,
    source: str,
    target: str,
    *,
    quiet: bool,
    keep_candidates: bool,
    ladder: str | None = None,
    length_weight: float | None = None,
    style_exponent: float | None = None,
    rung_weights: str | None = None,
    usable_first: bool | None = None,
) -> tuple[Any, Any]:
    """The recipe (`TransferSettings`) and, under rerank, its `RerankSettings` (else None), as
    `steer.rewriting.recipe.recipe_for` chooses them for every caller (on the opened profile); its note
    printed here."""
    from steer.rewriting.recipe import RerankOptions, recipe_for

    tuned = _tuned_for(settings_file, source, target) if settings_file is not None else None
    options = RerankOptions(ladder, length_weight, style_exponent, rung_weights, usable_first)
    recipe = recipe_for(
        opened, source, target, preset=preset, tuned=tuned, rerank=options, keep_candidates=keep_candidates,
        **fields_given,
    )  # fmt: skip
    if recipe.note is not None and not quiet:
        click.echo(f"steer: note: {recipe.note}", err=True)
    return recipe.settings, recipe.rerank


def blocks_of(input_source: str | None, ray: Any) -> Any:
    """Under --engine ray, a .txt/.jsonl/.parquet -i FILE cut into blocks of --block-size lines
    (`BlockedInput`: one pass that checks every line and hashes the file; the texts stay on disk
    until a worker reads its block); None for every other input, which `read_items` reads."""
    from steer.profiling.corpus import BlockedInput, reads_in_blocks

    if not ray.on or input_source is None or not reads_in_blocks(input_source):
        return None
    blocked = BlockedInput.scan(input_source, ray.block_size)
    if not blocked.texts:
        raise SteerError("no texts to transfer; pass TEXT arguments, -i FILE or lines on stdin")
    return blocked


def read_items(texts: tuple[str, ...], input_source: str | None) -> tuple[list[str], list[str]]:
    """(every input line, blank ones kept so the output aligns with the input; the texts to rewrite)."""
    from steer.profiling.corpus import read_texts, visible

    if texts and input_source:
        raise SteerError("give texts either as arguments or with -i, not both")
    for number, text in enumerate(texts, start=1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # bytes the terminal's locale could not decode (a lone surrogate)
            raise SteerError(f"TEXT argument {number} is not valid UTF-8; pass UTF-8 text") from None
        if not visible(text):
            what = "empty" if not text.strip() else "empty (only zero-width or invisible characters)"
            raise SteerError(f"TEXT argument {number} is {what}; pass the text to rewrite")
    lines = [visible(t) for t in texts] if texts else read_texts(input_source or "-", keep_empty=True)
    items = [t for t in lines if t]
    if not items:
        raise SteerError("no texts to transfer; pass TEXT arguments, -i FILE or lines on stdin")
    return lines, items


def check_before_loading(
    opened: Any, source: str, target: str, settings: Any, prompts_file: Path | None, reranking: bool
) -> None:
    """What can be checked without the model: the prompts file, the direction, the syntax of
    --edit-layers, --contrast-layers and --top-k, the styles against the profile (and the probe
    under rerank), then the blocks and the count against the profile's model (the profile records
    its block count, so `--edit-layers 30` on a 30-block model fails in a second, not after
    loading). `steer export` checks its edit with it too."""
    from steer.generation.contrast import check_layer_syntax, parse_layers
    from steer.profiling.neurons import parse_top_k
    from steer.profiling.profile import check_direction
    from steer.prompts import check_pair, load_openings

    check_direction(source, target)
    if prompts_file is not None:
        check_pair(prompts_file, source, target)
        load_openings(prompts_file)
    check_layer_syntax(  # the syntax first, before the profile is read
        {
            "edit_layers": settings.edit_layers,
            "contrast_layers": settings.contrast_layers if settings.contrast else None,
        },
        {"edit_layers": "--edit-layers", "contrast_layers": "--contrast-layers"},
    )
    if settings.mode != "prompt":
        try:  # the syntax first, before the profile is read
            parse_top_k(settings.top_k, 10**12)
        except SteerError:
            raise SteerError(
                f"--top-k {settings.top_k!r} is not valid; give a count, a percentage below 100% like '1%' or a "
                "fraction in (0, 1)"
            ) from None
    opened.check_styles(source, target, reranking=reranking)
    prof = opened.profile
    if settings.mode != "prompt":  # then a count against the profile's model: every neuron would edit none
        parse_top_k(settings.top_k, prof.num_layers * prof.num_neurons)
    if settings.edit_layers:  # then the blocks against the profile's model (the loaded one has the same)
        parse_layers(settings.edit_layers, prof.num_layers, option="--edit-layers", last_allowed=True)
    if settings.contrast and settings.contrast_layers:
        parse_layers(settings.contrast_layers, prof.num_layers, option="--contrast-layers")
    if settings.mode == "trained":  # the trained file beside the profile, and the direction in it
        opened.trained().edit(source, target, path=opened.path or "PROFILE")
    if settings.push > 0 or settings.refusal > 0:  # the instruction file beside the profile, and what it holds
        found = opened.instructions()
        if settings.push > 0:
            found.shift(source, target, path=opened.path)
            parse_top_k(settings.push_top_k, prof.num_layers * prof.num_neurons, "push_top_k")
        if settings.refusal > 0 and found.refusal is None:
            raise SteerError(
                f"--refusal needs the model's refusal direction; run: steer instruct {opened.path} --refusal"
            )


def print_comparison(
    service: Any, results: list[Any], items: list[str], lines: list[str], rerank: Any, quiet: bool
) -> None:
    """--compare: under rerank every candidate with its scores (the plain prompt is candidate λ = 0,
    so nothing is decoded again); else source / plain prompt / steered, the prompt decoded here."""
    from steer.generation.steerer import TransferResult, TransferSettings

    if rerank is not None:
        for r in results:
            click.echo(f"source:   {r.text}")
            chosen = r.info.get("rerank", {}).get("chosen")
            for k, c in enumerate(r.info.get("rerank", {}).get("candidates", [])):
                mark = "→" if k == chosen else " "
                style = f"style {c['style']:.2f}^{rerank.style_exponent:g}"
                weight = f" × weight {c['weight']:g}" if c.get("weight", 1.0) != 1.0 else ""
                tags = [*c.get("flags", []), *(["likely usable"] if c.get("likely_usable") else [])]
                click.echo(
                    f" {mark} λ={c['rung']:<4} score {c['score']:.3f} = {style} "
                    f"× sim {c['similarity']:.2f} × fluency {c['fluency']:.2f}{weight}"
                    f"{' [' + ', '.join(tags) + ']' if tags else ''}: {c['output']}"
                )
            click.echo("")
        return
    job = service.job
    plain = iter(
        service.steerer.transfer(
            items, job.source, job.target, TransferSettings.resolve("prompt", base=job.settings), progress=not quiet
        )
    )
    baseline = [next(plain) if t else TransferResult(t, "", "", False, {}) for t in lines]
    for base, steered in zip(baseline, results, strict=True):
        click.echo(f"source:   {base.text}\nprompt:   {base.output}\nsteered:  {steered.output}\n")
