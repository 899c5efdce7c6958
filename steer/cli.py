"""The `steer` command line: parse options, call the library, print. Nothing else lives here."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from steer import __version__
from steer.config import ProfileSettings, SteerError
from steer.models import DEFAULT_MODEL, DTYPES


class SteerGroup(click.Group):
    """A click group that turns `SteerError` into one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SteerError as exc:
            click.echo(f"steer: error: {exc}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("steer: interrupted", err=True)
            ctx.exit(130)


def _model_options(fn: Any) -> Any:
    options = [
        click.option(
            "--model",
            "model_spec",
            default=DEFAULT_MODEL,
            show_default=True,
            help="Embedded alias, Hugging Face id, local directory or .gguf file.",
        ),
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True),
        click.option("--device", default="cpu", show_default=True, help="torch device, e.g. cpu or cuda:0."),
        click.option(
            "--mlp-activation-path",
            default=None,
            help="Module whose output is the gated MLP activation, e.g. 'model.layers.{layer}.mlp.act_fn'; "
            "needed only for architectures steer does not know.",
        ),
        click.option("--trust-remote-code", is_flag=True, help="Allow the model repository's own Python code."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.group(cls=SteerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="steer")
def cli() -> None:
    """Rewrite text from one style to another by steering a language model's own neurons."""


@cli.command()
@_model_options
@click.option(
    "--style",
    "styles",
    multiple=True,
    required=True,
    metavar="NAME=SOURCE",
    help="A style corpus; repeat for each style. SOURCE: file.txt, file.jsonl[:FIELD], file.csv[:COL], "
    "file.tsv[:COL], hf:NAME[:CONFIG]:SPLIT:COLUMN, or - for stdin.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--batch-size", type=int, default=16, show_default=True)
@click.option("--max-length", type=int, default=512, show_default=True, help="Tokens per text; longer texts are cut.")
@click.option("--limit", type=int, default=None, help="Use at most this many texts per style.")
@click.option("--dedupe/--no-dedupe", default=False, show_default=True, help="Drop repeated texts within a style.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def profile(
    model_spec: str,
    dtype: str,
    device: str,
    mlp_activation_path: str | None,
    trust_remote_code: bool,
    styles: tuple[str, ...],
    output: Path,
    batch_size: int,
    max_length: int,
    limit: int | None,
    dedupe: bool,
    force: bool,
    quiet: bool,
) -> None:
    """Count how often each MLP neuron fires on each style's texts and save a profile."""
    from steer.corpus import load_styles
    from steer.models import load_model
    from steer.profile import profile_styles

    if output.exists() and not force:
        raise SteerError(f"{output} exists; pass --force to overwrite it")
    settings = ProfileSettings(batch_size=batch_size, max_length=max_length, dtype=dtype, dedupe=dedupe, limit=limit)
    corpora = load_styles(styles, limit=limit, dedupe=dedupe)
    lm = load_model(
        model_spec,
        dtype=dtype,
        device=device,
        trust_remote_code=trust_remote_code,
        activation_path=mlp_activation_path,
        progress=not quiet,
    )
    start = time.perf_counter()
    result = profile_styles(lm, corpora, settings, progress=not quiet)
    seconds = time.perf_counter() - start
    result.save(output, force=force)
    tokens = sum(c.num_tokens for c in result.counts.values())
    summary = ", ".join(f"{s}: {c.num_texts} texts / {c.num_tokens} tokens" for s, c in result.counts.items())
    click.echo(f"wrote {output} ({summary}; {tokens / max(seconds, 1e-9):.0f} tokens/s)")


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=click.Path(path_type=Path))
@click.option("--from", "source", default=None, help="Source style (default: the profile's first style).")
@click.option("--to", "target", default=None, help="Target style (default: the profile's second style).")
@click.option("--top-k", default="1%", show_default=True, help="Neurons per style: a count, '1%' or a fraction.")
@click.option("--method", type=click.Choice(["paper", "diff", "lape"]), default="paper", show_default=True)
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a PNG per layer.")
def inspect(
    profile_path: Path, source: str | None, target: str | None, top_k: str, method: str, plot: Path | None
) -> None:
    """Show a profile's model, styles and where the style-specific neurons sit, layer by layer."""
    from steer.neurons import StyleProfile

    prof = StyleProfile.load(profile_path)
    source = source or prof.styles[0]
    target = target or next(s for s in prof.styles if s != source)
    selection = prof.neurons(source, target, top_k=top_k, method=method)
    click.echo(f"profile  {profile_path} (steer {prof.steer_version})")
    click.echo(
        f"model    {prof.model_id} ({prof.model_type}, {prof.num_layers} layers × {prof.num_neurons} neurons, "
        f"fingerprint {prof.fingerprint})"
    )
    width = max(len(s) for s in prof.styles + ["style"])
    click.echo(f"\n{'style':<{width}}  {'texts':>7}  {'tokens':>9}  {'mean rate':>9}")
    for style, c in prof.counts.items():
        click.echo(f"{style:<{width}}  {c.num_texts:>7}  {c.num_tokens:>9}  {c.rate.mean().item():>9.4f}")
    click.echo(
        f"\nselection: method {method}, top-k {top_k} = {selection.top_k} of {prof.total_neurons} neurons per style"
    )
    cols = [f"{source}-only", f"{target}-only", "shared"]
    w = max(len(c) for c in cols) + 2
    click.echo("layer" + "".join(f"{c:>{w}}" for c in cols))
    per_layer = [selection.source.per_layer(), selection.target.per_layer(), selection.shared.per_layer()]
    for layer in range(prof.num_layers):
        click.echo(f"{layer:>5}" + "".join(f"{col[layer]:>{w}}" for col in per_layer))
    click.echo(f"{'total':>5}" + "".join(f"{sum(col):>{w}}" for col in per_layer))
    if plot is not None:
        _plot_layers(plot, cols, per_layer, f"{prof.model_id}: {method}, top-k {top_k}")
        click.echo(f"wrote {plot}")


def _plot_layers(path: Path, labels: list[str], series: list[list[int]], title: str) -> None:
    import os
    import tempfile

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = range(len(series[0]))
    fig, ax = plt.subplots(figsize=(max(6, len(series[0]) * 0.3), 3.5))
    width = 0.27
    for i, (label, values) in enumerate(zip(labels, series, strict=False)):
        ax.bar([x + (i - 1) * width for x in layers], values, width, label=label)
    ax.set_xlabel("layer")
    ax.set_ylabel("neurons")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="steer")


if __name__ == "__main__":
    main()
    sys.exit(0)
