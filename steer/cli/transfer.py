"""`steer transfer`: rewrite texts with a recipe (plain, steered or reranked), resumable and shardable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from steer.cli.app import (
    OUTPUT_FILE,
    SectionedCommand,
    cli,
    processes_option,
    recipe_options,
    relaunched,
    show_progress,
    steering_options,
)
from steer.cli.running import RayOptions, ray_options
from steer.cli.transfer_steps import (
    blocks_of,
    check_before_loading,
    check_output_options,
    print_comparison,
    read_items,
    transfer_recipe,
)
from steer.errors import SteerError
from steer.ladder import RERANK_OPTIONS, RerankSettings
from steer.settings import DEFAULT_PRESET, PRESETS

# `steer transfer --help`, by purpose (every option of the command is in one section: a test checks)
TRANSFER_SECTIONS = (
    ("Input and output", ("input_source", "output", "force", "resume", "compare", "as_json", "quiet")),
    ("Profile and model", ("profile_path", "source", "target", "model_spec", "dtype", "device", "device_map")),
    ("Recipe", ("preset", "settings_file", "prompts_file", "mode", "top_k", "method", "positions", "edit_layers",
                "strength", "amplify_factor", "guidance", "instruction_contrast", "neutral", "alpha", "keep_words",
                "examples", "prompt", "opening")),
    ("Rerank (--preset rerank)", ("ladder", "length_weight", "style_exponent", "rung_weights", "usable_first",
                                  "keep_candidates")),
    ("Instruction push and refusal (measured by steer instruct)", ("push", "push_top_k", "push_gate", "push_schedule",
                                                                   "refusal")),
    ("Contrastive decoding", ("contrast", "contrast_layers", "beta", "contrast_dtype")),
    ("Decoding", ("max_new_tokens", "min_new_tokens", "max_input_tokens", "batch_size", "temperature", "top_p",
                  "seed", "no_repeat_ngram", "loop_guard", "echo_guard", "clean")),
    ("Scale", ("processes", "engine", "ray_address", "workers", "gpus_per_worker", "block_size")),
)  # fmt: skip


@cli.command(cls=SectionedCommand, sections=TRANSFER_SECTIONS)
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
    type=OUTPUT_FILE,
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
@recipe_options(RERANK_OPTIONS, settings_class=RerankSettings)
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
@click.option(
    "--json", "as_json", is_flag=True, help="Print each rewrite's record as JSON Lines (what -o FILE.jsonl holds)."
)
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
    as_json: bool,
    force: bool,
    quiet: bool,
    ladder: str | None,
    length_weight: float | None,
    style_exponent: float | None,
    rung_weights: str | None,
    usable_first: bool | None,
    keep_candidates: bool,
    processes: int,
    device_map: str | None,
    resume: bool,
    ray: RayOptions,
    **fields_given: Any,
) -> None:
    """Rewrite texts from one style to another, steering the profile's neurons while decoding."""
    from steer.generation.steerer import TransferResult
    from steer.profiling.corpus import source_file
    from steer.rewriting.opened import OpenedProfile
    from steer.rewriting.service import RewriteJob, RewriteService

    # the file -i reads, its :FIELD or :COLUMN selector stripped (`-i in.jsonl:text -o in.jsonl` is the input)
    if as_json and (output is not None or compare):
        other = "-o FILE (a .jsonl file holds the same records)" if output is not None else "--compare"
        raise SteerError(f"--json prints records to stdout; it does not combine with {other}")
    read = source_file(input_source) if input_source is not None else None
    inputs = {"the input (-i)": read, "the --settings file": settings_file, "the --prompts file": prompts_file,
              "the model (--model)": model_spec if model_spec and Path(model_spec).exists() else None}  # fmt: skip
    check_output_options(
        output, profile_path, inputs, force=force, processes=processes, resume=resume, ray=ray,
        compare=compare, keep_candidates=keep_candidates, device=device, as_json=as_json,
    )  # fmt: skip
    opened = OpenedProfile.open(profile_path)  # read and hashed once for the whole run
    settings, rerank_settings = transfer_recipe(
        opened, preset, fields_given, settings_file, source, target, quiet=quiet,
        keep_candidates=keep_candidates, ladder=ladder, length_weight=length_weight, style_exponent=style_exponent,
        rung_weights=rung_weights, usable_first=usable_first,
    )  # fmt: skip
    blocked = blocks_of(input_source, ray) if output is not None and not texts else None
    lines, items = read_items(texts, input_source) if blocked is None else ([], [])
    check_before_loading(opened, source, target, settings, prompts_file, rerank_settings is not None)
    if output is not None and model_spec is None and Path(opened.profile.model_id).is_dir():
        from steer.files import check_not_an_input

        check_not_an_input(output, {"the profile's model": opened.profile.model_id})
    if relaunched(processes):
        return
    job = RewriteJob.of(
        opened, source, target, settings, rerank=rerank_settings, keep_candidates=keep_candidates,
        prompts_file=str(prompts_file) if prompts_file is not None else None, model_spec=model_spec, dtype=dtype,
        device=device, device_map=device_map,
    )  # fmt: skip
    show_progress(quiet)
    if ray.on:  # the workers load the model; this process sends blocks (of texts, or of where they lie in -i FILE)
        assert output is not None  # checked above: the Ray engine writes through -o
        _transfer_on_ray(job, blocked or (items, lines), output, ray, resume=resume, force=force, quiet=quiet)
        return
    service = RewriteService(job, opened=opened, progress=not quiet)

    def decode_here(indices: list[int], partial: Any, need_blank: bool) -> Any:
        def save(rows: list[int], results: list[TransferResult]) -> None:
            partial.append([(indices[r], service.record(x)) for r, x in zip(rows, results, strict=True)])

        service.results([items[i] for i in indices], save)
        return service.blank_record() if need_blank else None

    records: list[Any] | None
    if output is None or compare:
        done = iter(service.results(list(items)))
        results = [next(done) if t else TransferResult(t, "", "", False, {"blank_input": True}) for t in lines]
        records = [service.record(r) for r in results]
    else:
        from steer.rewriting.output import decode_to_file

        records = decode_to_file(
            output, items, lines, decode_here, job.key(), resume, force, _resuming, batch_size=job.settings.batch_size
        )
        if records is None:  # a helper process: the main process writes the output
            return
        results = []
    if compare:
        print_comparison(service, results, items, lines, rerank_settings, quiet)
    elif output is None and as_json:
        for record in records:
            click.echo(record.to_json())
    elif output is None:
        for r in results:
            click.echo(r.output.replace("\n", " "))
    if output is not None:
        _write_output(output, records, quiet, force)
    _warn_emptied(records, output)


def _warn_emptied(records: list[Any], output: Path | None) -> None:
    """Say how many rewrites came out empty although the model replied: cleaning (the first answer
    line, the meta rule, a quoted echo) removed all of the reply — `steer eval` counts them as Empty%."""
    emptied = sum(1 for r in records if r.source_text and not r.output.strip() and r.raw_output.strip())
    if emptied:
        where = f"raw_output in {output}" if output is not None and output.suffix == ".jsonl" else "-o FILE.jsonl"
        total = sum(1 for r in records if r.source_text)
        click.echo(
            f"steer: warning: {emptied} of {total} rewrites came out empty: cleaning removed all of the model's "
            f"reply (see {where}; --no-clean keeps replies as they are)",
            err=True,
        )


def _transfer_on_ray(
    job: Any, inputs: Any, output: Path, ray: RayOptions, *, resume: bool, force: bool, quiet: bool
) -> None:
    """--engine ray: blocks to the workers, each finished block a shard, then -o FILE. `inputs` is a
    `BlockedInput` (a .txt/.jsonl/.parquet -i FILE: the workers read their blocks themselves and
    FILE is written from the shards, one at a time) or the (texts, lines) this process read."""
    from steer.profiling.corpus import BlockedInput
    from steer.rewriting.on_ray import decode_blocks_on_ray, decode_items_on_ray
    from steer.rewriting.output import decode_blocks_to_file
    from steer.rewriting.partial import PartialRecords

    options = {"progress": not quiet, **(ray.engine_options() or {})}
    if isinstance(inputs, BlockedInput):

        def decode_blocks(blocks: list[Any], write_block: Any) -> None:
            decode_blocks_on_ray(job, inputs, blocks, write_block, **options)

        count = decode_blocks_to_file(
            output, inputs, decode_blocks, job.key(), resume, force, _resuming, batch_size=job.settings.batch_size
        )
        PartialRecords.remove_all(output)
        if not quiet:
            click.echo(f"wrote {count} rewrites to {output}", err=True)
        return
    items, lines = inputs

    def decode_on_workers(indices: list[int], partial: Any, need_blank: bool) -> Any:
        return decode_items_on_ray(job, items, indices, partial.write_block, need_blank=need_blank, **options)

    from steer.rewriting.output import decode_to_file

    records = decode_to_file(
        output, items, lines, decode_on_workers, job.key(), resume, force, _resuming, batch_size=job.settings.batch_size
    )
    _write_output(output, records or [], quiet, force)
    _warn_emptied(records or [], output)


def _write_output(output: Path, records: list[Any], quiet: bool, force: bool) -> None:
    """-o FILE: records as JSONL (.jsonl), else one output per line; then the partial files go.
    Without --force FILE is created exclusively: a file another program made there during the run
    is left as it is, and so are the partial files, so nothing decoded is lost."""
    from steer.rewriting.output import write_output
    from steer.rewriting.partial import PartialRecords

    write_output(output, records, force)
    PartialRecords.remove_all(output)
    if not quiet:
        click.echo(f"wrote {len(records)} rewrites to {output}", err=True)


def _resuming(done: int, total: int) -> None:
    if done == 0:  # --resume with nothing to resume: say so rather than start over silently
        click.echo(
            "steer: note: --resume found no finished rewrites of this recipe and input; starting from the first text",
            err=True,
        )
    else:
        click.echo(f"resuming: {done} of {total} texts already done", err=True)
