"""`steer train`: learn a direction's edit on the profile's selected neurons from (source, rewrite)
pairs, and save it beside the profile for `--mode trained`."""

from __future__ import annotations

from pathlib import Path

import click

from steer.cli.app import DEVICE, cli, show_progress
from steer.settings import METHODS


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=click.Path(path_type=Path))
@click.option("--from", "source", required=True, help="Source style.")
@click.option("--to", "target", required=True, help="Target style.")
@click.option(
    "--pairs",
    "pairs_path",
    required=True,
    type=click.Path(path_type=Path),
    help="TSV of (source text, rewrite) rows whose first line names the styles (e.g. ParaDetox's train.tsv).",
)
@click.option("--limit", type=int, default=None, help="Pairs sampled from the file, a tenth held out [default: 200].")
@click.option(
    "--epochs",
    type=int,
    default=2,
    show_default=True,
    help="Passes over the pairs; the best on held-out pairs is kept.",
)
@click.option("--lr", type=float, default=5e-3, show_default=True, help="Adam's learning rate.")
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option("--top-k", default="1%", show_default=True, help="Neurons per style the profile selects.")
@click.option(
    "--method", type=click.Choice(METHODS), default="diff", show_default=True, help="How the profile selects them."
)
@click.option("--layers", default=None, help="Blocks whose neurons learn, e.g. '14-27' [default: the upper half].")
@click.option(
    "--params",
    type=click.Choice(["scale+shift", "scale", "shift"]),
    default="scale+shift",
    show_default=True,
    help="What each neuron learns; a scale alone can be baked into weights by steer export.",
)
@click.option(
    "--objective",
    type=click.Choice(["likelihood", "preference"]),
    default="preference",
    show_default=True,
    help="preference: each rewrite's likelihood, and the rewrite preferred over a copy of its source; "
    "likelihood: the first alone (read blind, it taught the edit to copy).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Which pairs are sampled and held out, and their order."
)
@click.option(
    "--model", "model_spec", default=None, help="Model to load instead of the profile's (fingerprint checked)."
)
@click.option(
    "--dtype",
    type=click.Choice(["auto", "float32"]),
    default="auto",
    show_default=True,
    help="Training runs in float32 (auto: float32; in 16 bits small learned scales would round away).",
)
@click.option("--device", type=DEVICE, default="cpu", show_default=True)
@click.option(
    "--force",
    is_flag=True,
    help="Train a direction the file already holds again (or replace another training's checkpoint).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def train(
    profile_path: Path,
    source: str,
    target: str,
    pairs_path: Path,
    limit: int | None,
    epochs: int,
    lr: float,
    batch_size: int,
    top_k: str,
    method: str,
    layers: str | None,
    params: str,
    objective: str,
    seed: int,
    model_spec: str | None,
    dtype: str,
    device: str,
    force: bool,
    quiet: bool,
) -> None:
    """Learn a scale and shift per selected neuron for one direction, with the model frozen, from
    (source, rewrite) pairs under the plain prompt; save it beside the profile as .trained.safetensors
    (use it with: steer transfer --mode trained). An interrupted training resumes from its last epoch."""
    from steer.rewriting.train import TRAIN_LIMIT, train_direction

    show_progress(quiet)
    done = train_direction(
        profile_path, source, target, pairs_path, limit=TRAIN_LIMIT if limit is None else limit, epochs=epochs,
        lr=lr, batch_size=batch_size, top_k=top_k, method=method, layers=layers, params=params, objective=objective,
        seed=seed, model_spec=model_spec, dtype=dtype, device=device, force=force, progress=not quiet,
    )  # fmt: skip
    click.echo(
        f"{source} → {target}: {done.neurons} neurons learned from {done.pairs} pairs in {done.seconds:.0f} s; "
        f"held-out loss {done.loss_before:.3f} → {done.loss_after:.3f} (epoch {done.best_epoch}, {done.held} pairs)"
    )
    if done.best_epoch == 0:
        click.echo(
            "note: no epoch lowered the held-out loss: the saved edit changes nothing (try --lr or --limit)", err=True
        )
    click.echo(f"wrote {done.path}")
