"""`steer transfer`: rewrite texts with a recipe (plain, steered or reranked), resumable and shardable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from steer.cli.app import (
    FINITE,
    RayOptions,
    cli,
    processes_option,
    ray_options,
    recipe_options,
    relaunched,
    show_progress,
    steering_options,
)
from steer.cli.transfer_steps import _check_styles_before_loading, _decode_resumably, _tuned_for
from steer.config import SteerError
from steer.files import write_text
from steer.settings import DEFAULT_PRESET, PRESETS


@cli.command()
@steering_options
@recipe_options()
@click.argument("texts", nargs=-1)
@click.option(
    "-i",
    "--input",
    "input_source",
    default=None,
    help="Corpus to rewrite: file.txt, file.jsonl[:FIELD], file.tsv[:COL], … or - for stdin.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here (.jsonl: one record per input; otherwise one line per input). Default: stdout.",
)
@click.option(
    "--preset",
    type=click.Choice([*PRESETS, "rerank"]),
    default=None,
    help="Recipe to start from: guided (shift + guidance), paper (sNeuron-TST: deactivate + layer contrast), "
    "prompt (no steering) or rerank (every --ladder rung in one batch, λ = 0 the plain prompt; "
    "the style probe beside the profile, similarity and fluency pick per text). Options override its fields. "
    "[default: rerank when the profile has a style probe (steer probe PROFILE), else "
    f"{DEFAULT_PRESET}; with --mode and no --preset, that mode's bare settings]",
)
@click.option(
    "--ladder",
    default="0,u0.5,1,3",
    show_default=True,
    help="rerank: the rungs to try: 0 = the plain prompt, λ = the guided recipe at strength λ (two decoded rows "
    "per text), uλ = the same shift without guidance (one row; bolder, wrecks text above λ ≈ 1).",
)
@click.option(
    "--length-weight",
    type=FINITE,
    default=0.0,
    show_default=True,
    help="rerank: penalise candidates whose length strays from the source's (0 = off).",
)
@click.option(
    "--style-exponent",
    type=FINITE,
    default=0.5,
    show_default=True,
    help="rerank: temper the style probe's probability (P^e, 0 < e ≤ 1) so similarity counts more.",
)
@click.option("--keep-candidates", is_flag=True, help="rerank: write every candidate and its scores into -o x.jsonl.")
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(path_type=Path),
    default=None,
    help="TOML of templates per direction (default: the packaged steer/data/prompts.toml).",
)
@click.option(
    "--settings",
    "settings_file",
    type=click.Path(path_type=Path),
    default=None,
    help="tuned.json from 'steer tune': its recipe for this direction replaces --preset; options given here win.",
)
@click.option("--compare", is_flag=True, help="Also run --mode prompt and print source / prompt / steered.")
@processes_option("Decode (needs -o; the same records as one process)")
@click.option(
    "--device-map",
    default=None,
    help="e.g. 'auto' to spread a large model over the visible devices.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue an interrupted -o FILE run from FILE.partial (written after every batch) instead of starting over.",
)
@ray_options("needs -o")
@click.option("--force", is_flag=True, help="Overwrite an existing --output.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def transfer(
    profile_path: Path,
    source: str,
    target: str,
    model_spec: str | None,
    dtype: str,
    device: str,
    texts: tuple[str, ...],
    input_source: str | None,
    output: Path | None,
    preset: str,
    prompts_file: Path | None,
    settings_file: Path | None,
    compare: bool,
    force: bool,
    quiet: bool,
    ladder: str,
    length_weight: float,
    style_exponent: float,
    keep_candidates: bool,
    processes: int,
    device_map: str | None,
    resume: bool,
    ray: RayOptions,
    **fields_given: Any,
) -> None:
    """Rewrite texts from one style to another, steering the profile's neurons while decoding."""

    from steer.corpus import read_texts
    from steer.distributed import distributed_state
    from steer.records import PartialRecords
    from steer.transfer import TransferResult, TransferSettings, load_openings, load_prompts

    if output is not None:
        from steer.files import check_not_an_input
        from steer.probe import probe_path as probe_file

        check_not_an_input(
            output,
            {
                "the profile": profile_path,
                "the profile's probe": probe_file(profile_path),
                "the input (-i)": input_source,
                "the --settings file": settings_file,
                "the --prompts file": prompts_file,
            },
        )
    if output is not None and output.exists() and not force:
        raise SteerError(f"{output} exists; pass --force to overwrite it")
    if processes < 1:
        raise SteerError(f"--processes must be at least 1, got {processes}")  # before the -o check below
    if (processes > 1 or resume or ray.on or distributed_state() is not None) and (output is None or compare):
        why = "add -o FILE" if output is None else "drop --compare"
        raise SteerError(f"--processes, --engine ray and --resume write through -o FILE; {why}")
    ray.check(processes, device)
    if keep_candidates and (output is None or output.suffix != ".jsonl"):
        raise SteerError("--keep-candidates writes the candidates into the records: add -o FILE.jsonl")
    leftover = PartialRecords.files(output) if output is not None and not (compare or resume or force) else []
    if leftover:
        raise SteerError(
            f"{leftover[0]} holds rewrites of an interrupted run; add --resume to continue it or --force to start over"
        )
    mode, strength = fields_given.get("mode"), fields_given.get("strength")
    if preset is None and mode is None and settings_file is None:
        from steer.probe import probe_path

        if probe_path(profile_path).is_file():
            preset = "rerank"
        else:
            preset = DEFAULT_PRESET
            if not quiet:
                click.echo(
                    f"steer: note: {profile_path} has no style probe, so the recipe is --preset {DEFAULT_PRESET}; "
                    f"'steer probe {profile_path}' builds one and makes steer-and-rerank the default",
                    err=True,
                )
    reranking = preset == "rerank"
    if keep_candidates and not reranking:
        raise SteerError("--keep-candidates keeps rerank candidates; add --preset rerank")
    if reranking and mode is not None:
        raise SteerError("--preset rerank varies the guided recipe's λ; drop --mode")
    if reranking and strength is not None:
        raise SteerError(
            f"--strength {strength:g} has no effect under rerank, which tries each --ladder rung; "
            "use --ladder (e.g. 0,u0.5,1,3) or --preset guided"
        )
    tuned = _tuned_for(settings_file, source, target) if settings_file is not None else None
    # every recipe option (generated from the settings' fields); one not given is None: the preset's
    settings = TransferSettings.resolve("guided" if reranking else preset, tuned, **fields_given)
    if texts and input_source:
        raise SteerError("give texts either as arguments or with -i, not both")
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            raise SteerError(f"TEXT argument {number} is empty; pass the text to rewrite")
    # Blank input lines stay blank output lines, so the output aligns line by line with the input.
    lines = list(texts) if texts else read_texts(input_source or "-", keep_empty=True)
    items = [t for t in lines if t]
    if not items:
        raise SteerError("no texts to transfer; pass TEXT arguments, -i FILE or lines on stdin")
    if prompts_file is not None:  # checked before the model loads
        load_prompts(prompts_file), load_openings(prompts_file)
    from steer.profile import check_direction

    check_direction(source, target)
    if settings.edit_layers is not None:
        from steer.contrast import parse_layers

        parse_layers(settings.edit_layers, 10**6, option="--edit-layers", last_allowed=True)  # syntax only
    if settings.mode != "prompt":
        from steer.neurons import parse_top_k

        try:  # syntax only; a count is checked against the model's size once it is loaded
            parse_top_k(settings.top_k, 10**12)
        except SteerError:
            raise SteerError(
                f"--top-k {settings.top_k!r} is not valid; give a count, a percentage like '1%' or a fraction in (0, 1)"
            ) from None
    rerank_settings = None
    if reranking:
        from steer.probe import probe_path
        from steer.rerank import RerankSettings, parse_ladder

        rerank_settings = RerankSettings(parse_ladder(ladder), settings, length_weight, style_exponent)
        ladder = rerank_settings.label  # as recorded: "0, 1" and "0,1" are one ladder
        if not probe_path(profile_path).is_file():
            raise SteerError(
                f"--preset rerank needs the profile's style probe; build it with: steer probe {profile_path}"
            )
    _check_styles_before_loading(profile_path, source, target, reranking)
    if relaunched(processes):
        return
    from steer.service import RewriteJob, RewriteService

    job = RewriteJob(
        str(profile_path), source, target, settings, rerank_settings, keep_candidates,
        str(prompts_file) if prompts_file is not None else None, model_spec, dtype, device, device_map,
    )  # fmt: skip
    show_progress(quiet)
    if ray.on:  # the workers load the model; this process only sends texts and keeps records
        from steer.raydata import decode_on_ray

        def decode_on_workers(indices: list[int], partial: Any, need_blank: bool) -> Any:
            return decode_on_ray(
                job, items, indices, partial.write_block, need_blank=need_blank, progress=not quiet,
                **(ray.engine_options() or {}),
            )  # fmt: skip

        assert output is not None  # checked above: the Ray engine writes through -o
        records = _decode_resumably(output, items, lines, decode_on_workers, job.key(), resume, force)
        _write_output(output, records or [], quiet)
        return
    service = RewriteService(job, progress=not quiet)
    steerer, record = service.steerer, service.record

    def decode(indices: list[int], on_batch: Any = None) -> list[TransferResult]:
        return service.results([items[i] for i in indices], on_batch)

    def decode_here(indices: list[int], partial: Any, need_blank: bool) -> Any:
        def save(rows: list[int], results: list[TransferResult]) -> None:
            partial.append([(indices[r], record(x)) for r, x in zip(rows, results, strict=True)])

        decode(indices, save)
        return service.blank_record() if need_blank else None

    if output is None or compare:
        done = iter(decode(list(range(len(items)))))
        results = [next(done) if t else TransferResult(t, "", "", False, {"blank_input": True}) for t in lines]
        records = [record(r) for r in results]
    else:
        records = _decode_resumably(output, items, lines, decode_here, job.key(), resume, force)
        if records is None:  # a helper process: the main process writes the output
            return
        results = []
    if compare and rerank_settings is not None:  # the plain prompt is candidate λ = 0: no second run
        for r in results:
            click.echo(f"source:   {r.text}")
            chosen = r.info.get("rerank", {}).get("chosen")
            for k, c in enumerate(r.info.get("rerank", {}).get("candidates", [])):
                mark = "→" if k == chosen else " "
                click.echo(
                    f" {mark} λ={c['rung']:<4} score {c['score']:.3f} = style {c['style']:.2f}^{style_exponent:g} "
                    f"× sim {c['similarity']:.2f} × fluency {c['fluency']:.2f}: {c['output']}"
                )
            click.echo("")
    elif compare:
        plain = iter(
            steerer.transfer(
                items, source, target, TransferSettings.resolve("prompt", base=settings), progress=not quiet
            )
        )
        baseline = [next(plain) if t else TransferResult(t, "", "", False, {}) for t in lines]
        for base, steered in zip(baseline, results, strict=True):
            click.echo(f"source:   {base.text}\nprompt:   {base.output}\nsteered:  {steered.output}\n")
    if output is None:
        if not compare:
            for r in results:
                click.echo(r.output.replace("\n", " "))
        return
    _write_output(output, records, quiet)


def _write_output(output: Path, records: list[Any], quiet: bool) -> None:
    """-o FILE: records as JSONL (.jsonl), else one output per line; then the partial files go."""
    from steer.records import PartialRecords, write_transfer_records

    if output.suffix == ".jsonl":
        write_transfer_records(output, records)
    else:
        write_text(output, "\n".join(r.output.replace("\n", " ") for r in records) + "\n")
    PartialRecords.remove_all(output)
    if not quiet:
        click.echo(f"wrote {len(records)} rewrites to {output}", err=True)
