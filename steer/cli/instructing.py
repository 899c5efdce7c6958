"""`steer instruct`: measure what a direction's instruction does to the profile's neurons (the push
recipe) and the model's refusal direction (the refusal recipe)."""

from __future__ import annotations

from pathlib import Path

import click

from steer.cli.app import DEVICE, DTYPE_HELP, cli, show_progress
from steer.errors import SteerError
from steer.model.names import DTYPES


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=click.Path(path_type=Path))
@click.option("--from", "sources", multiple=True, help="Source style of a direction to measure (repeatable).")
@click.option("--to", "targets", multiple=True, help="Its target style (one --to per --from).")
@click.option("--refusal", is_flag=True, help="Also measure the model's refusal direction (for --refusal recipes).")
@click.option("--limit", type=int, default=None, help="Training texts of the source style per direction [default: 64].")
@click.option(
    "--neutral",
    default="paraphrase",
    show_default=True,
    help="The instruction the direction's instruction is compared with: paraphrase or repeat.",
)
@click.option(
    "--model", "model_spec", default=None, help="Model to load instead of the profile's (fingerprint checked)."
)
@click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, help=DTYPE_HELP)
@click.option("--device", type=DEVICE, default="cpu", show_default=True)
@click.option(
    "--force", is_flag=True, help="Measure a direction (or the refusal direction) the file already holds again."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def instruct(
    profile_path: Path,
    sources: tuple[str, ...],
    targets: tuple[str, ...],
    refusal: bool,
    limit: int | None,
    neutral: str,
    model_spec: str | None,
    dtype: str,
    device: str,
    force: bool,
    quiet: bool,
) -> None:
    """Measure what each direction's instruction does to the profile's neurons (for --push), and the
    model's refusal direction (--refusal), and save it beside the profile as .instruct.safetensors."""
    from steer.rewriting.instruct import INSTRUCT_LIMIT, measure_instructions

    if len(sources) != len(targets):
        raise SteerError(f"{len(sources)} --from but {len(targets)} --to; give one --to per --from")
    show_progress(quiet)
    measured = measure_instructions(
        profile_path,
        list(zip(sources, targets, strict=True)),
        refusal=refusal,
        limit=INSTRUCT_LIMIT if limit is None else limit,
        neutral=neutral,
        model_spec=model_spec,
        dtype=dtype,
        device=device,
        force=force,
        progress=not quiet,
    )
    for direction, (texts, size) in measured.directions.items():
        click.echo(f"{direction}: instruction shift measured on {texts} texts (mean |shift| {size:.4f})")
    if measured.refusal_pairs:
        click.echo(f"refusal direction measured on {measured.refusal_pairs} matched requests")
    click.echo(f"wrote {measured.path}")
