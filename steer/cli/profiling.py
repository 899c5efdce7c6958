"""`steer profile`, `steer inspect`, `steer probe`, `steer models`: count style neurons, show them, fit the
style probe, list the embedded models."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from steer.cli.app import (
    DEVICE,
    DTYPE_HELP,
    FINITE,
    OUTPUT_FILE,
    PROFILE,
    cli,
    load_profile_and_model,
    model_options,
    processes_option,
    recipe_options,
    relaunched,
    show_progress,
)
from steer.distributed import distributed_state
from steer.errors import SteerError
from steer.model.names import DTYPES
from steer.probe_fit import PROBE_C, PROBE_LIMIT, PROBE_TOP, probe_fit
from steer.settings import METHODS, ProfileSettings

# `steer profile`'s counting options, generated from their `ProfileSettings` fields
PROFILE_OPTIONS = ("batch_size", "max_length", "limit", "dedupe")


def profile_texts_options(fn: Any) -> Any:
    """--train-style and --model, for the commands that read a profile's texts through its model
    (steer probe, steer calibrate)."""
    fn = click.option("--model", "model_spec", default=None, help="Model to load instead of the profile's.")(fn)
    return click.option(
        "--train-style",
        "train_styles",
        multiple=True,
        metavar="NAME=SOURCE",
        help="Texts per style (default: the corpora the profile records).",
    )(fn)


@cli.command()
@model_options
@click.option(
    "--style",
    "styles",
    multiple=True,
    required=True,
    metavar="NAME=SOURCE",
    help="A style corpus; repeat for each style. SOURCE: file.txt, file.jsonl[:FIELD], file.csv[:COL], "
    "file.tsv[:COL], hf:NAME[:CONFIG]:SPLIT:COLUMN, or - for stdin.",
)
@click.option("-o", "--output", type=OUTPUT_FILE, required=True)
@recipe_options(PROFILE_OPTIONS, settings_class=ProfileSettings)
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option(
    "--calibrate/--no-calibrate",
    default=True,
    show_default=True,
    help="Measure what one unit of steering strength is on this model (steer calibrate) and record it.",
)
@processes_option("Count the corpora (summed exactly)")
@click.option("--device-map", default=None, help="e.g. 'auto' to spread a large model over devices.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def profile(
    model_spec: str,
    dtype: str,
    device: str,
    mlp_activation_path: str | None,
    trust_remote_code: bool,
    styles: tuple[str, ...],
    output: Path,
    batch_size: int | None,
    max_length: int | None,
    limit: int | None,
    dedupe: bool | None,
    force: bool,
    calibrate: bool,
    processes: int,
    device_map: str | None,
    quiet: bool,
) -> None:
    """Count how often each MLP neuron fires on each style's texts and save a profile."""
    from steer.files import check_not_an_input
    from steer.model.loading import load_model
    from steer.profiling.corpus import load_styles, source_file
    from steer.profiling.profile import profile_styles

    inputs: dict[str, str | Path | None] = {
        f"the {spec.partition('=')[0]!r} corpus": source_file(spec.partition("=")[2]) for spec in styles
    }
    inputs["the model"] = model_spec if model_spec and Path(model_spec).exists() else None
    check_not_an_input(output, inputs)
    if os.path.lexists(output) and not force:
        raise SteerError(f"{output} exists; pass --force to overwrite it")
    if relaunched(processes):
        return
    from steer.model.loading import resolve_dtype

    dtype = resolve_dtype(model_spec, dtype, device, device_map)  # the profile records what really ran
    given: dict[str, Any] = {"batch_size": batch_size, "max_length": max_length, "limit": limit, "dedupe": dedupe}
    settings = ProfileSettings(dtype=dtype, **{k: v for k, v in given.items() if v is not None})
    if any(spec.endswith("=-") for spec in styles) and distributed_state() is not None:
        raise SteerError("stdin ('-') cannot be shared between processes; pass a file")
    corpora = load_styles(styles, limit=settings.limit, dedupe=settings.dedupe)
    show_progress(quiet)
    lm = load_model(
        model_spec,
        dtype=dtype,
        device=device,
        device_map=device_map,
        trust_remote_code=trust_remote_code,
        activation_path=mlp_activation_path,
        progress=not quiet,
    )
    start = time.perf_counter()
    result = profile_styles(lm, corpora, settings, progress=not quiet)
    seconds = time.perf_counter() - start
    state = distributed_state()
    if state is not None and not state.is_main_process:
        return
    if calibrate:
        from dataclasses import replace

        from steer.generation.calibration import calibrate as measure

        try:
            units = measure(lm, result, {c.name: c.texts for c in corpora}, progress=not quiet)
        except SteerError as err:  # the counts are kept: saved uncalibrated, with the way back
            retry = f"steer calibrate {output} --force retries, --no-calibrate skips it"
            click.echo(
                f"steer: warning: calibration failed ({err}); the profile is saved uncalibrated ({retry})", err=True
            )
            units = {}
        result = replace(result, calibration=units)
    result.save(output, force=force)
    tokens = sum(c.num_tokens for c in result.counts.values())
    summary = ", ".join(f"{s}: {c.num_texts} texts / {c.num_tokens} tokens" for s, c in result.counts.items())
    click.echo(f"wrote {output} ({summary}; {tokens / max(seconds, 1e-9):.0f} tokens/s)")


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=PROFILE)
@click.option("--from", "source", default=None, help="Source style (default: the profile's first style).")
@click.option("--to", "target", default=None, help="Target style (default: the profile's second style).")
@click.option("--top-k", default="1%", show_default=True, help="Neurons per style: a count, '1%' or a fraction.")
@click.option("--method", type=click.Choice(METHODS), default="paper", show_default=True)
@click.option("--plot", type=OUTPUT_FILE, default=None, help="Write a PNG per layer.")
@click.option("--json", "as_json", is_flag=True, help="Print what the profile holds as one JSON object.")
@click.option("--force", is_flag=True, help="Overwrite an existing --plot file.")
def inspect(
    profile_path: Path,
    source: str | None,
    target: str | None,
    top_k: str,
    method: str,
    plot: Path | None,
    as_json: bool,
    force: bool,
) -> None:
    """Show a profile's model, styles and where the style-specific neurons sit, layer by layer."""
    from steer.profiling.profile import StyleProfile
    from steer.profiling.summary import summarize

    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise SteerError(f"--plot {plot} must end in .png")
        from steer.files import check_not_an_input

        check_not_an_input(plot, {"the profile": profile_path}, "--plot")
        if os.path.lexists(plot) and not force:
            raise SteerError(f"{plot} exists; pass --force to overwrite it")
    prof = StyleProfile.load(profile_path)
    info = summarize(prof, profile_path, source, target, top_k, method)
    if as_json:
        click.echo(json.dumps(info, ensure_ascii=False))
    else:
        _print_summary(info, profile_path)
    if plot is not None:
        from steer.plots import grouped_bars

        per_layer = info["selection"]["per_layer"]
        cols = [name.replace("_only", "-only") for name in per_layer]
        layers = [str(i) for i in range(prof.num_layers)]
        title = f"{prof.model_id}: {method}, top-k {top_k}"
        grouped_bars(
            plot,
            layers,
            dict(zip(cols, per_layer.values(), strict=True)),
            xlabel="layer",
            ylabel="neurons",
            title=title,
        )
        click.echo(f"wrote {plot}", err=as_json)


def _print_summary(info: dict[str, Any], profile_path: Path) -> None:
    """`steer inspect`'s text: the model, the styles, the calibration, the selection per layer, the probe."""
    model, selection = info["model"], info["selection"]
    click.echo(f"profile  {profile_path} (steer {info['steer_version']})")
    click.echo(
        f"model    {model['id']} ({model['type']}, {model['layers']} layers × {model['neurons_per_layer']} neurons, "
        f"fingerprint {model['fingerprint']})"
    )
    width = max(len(s["style"]) for s in [*info["styles"], {"style": "style"}])
    click.echo(f"\n{'style':<{width}}  {'texts':>7}  {'tokens':>9}  {'mean rate':>9}  corpus (as recorded)")
    for s in info["styles"]:
        where = (s["corpus"] or "-") + ("" if s["corpus_found"] else " (not found from here)")
        click.echo(f"{s['style']:<{width}}  {s['texts']:>7}  {s['tokens']:>9}  {s['mean_rate']:>9.4f}  {where}")
    click.echo(
        f"\nselection: method {selection['method']}, top-k {selection['top_k']} = {selection['per_style']} of "
        f"{selection['of']} neurons per style"
    )
    if info["calibration"]:
        each = ", ".join(f"{k.replace('>', ' → ')} {v:.4g}" for k, v in info["calibration"]["per_direction"].items())
        click.echo(
            f"strength: 1 unit of λ = {info['calibration']['unit']:.4g} on this model "
            f"(calibrated per direction: {each})"
        )
    else:
        click.echo(f"strength: not calibrated, λ is used as given (steer calibrate {profile_path} --force)")
    per_layer = selection["per_layer"]
    cols = [name.replace("_only", "-only") for name in per_layer]
    w = max(len(c) for c in cols) + 2
    click.echo("layer" + "".join(f"{c:>{w}}" for c in cols))
    for layer in range(model["layers"]):
        click.echo(f"{layer:>5}" + "".join(f"{col[layer]:>{w}}" for col in per_layer.values()))
    click.echo(f"{'total':>5}" + "".join(f"{sum(col):>{w}}" for col in per_layer.values()))
    probe = info["probe"]
    if probe is not None:
        judges = ", ".join(f"{k} {v:.3f}" for k, v in probe["judges_heldout_accuracy"].items())
        measured = (
            f"held-out accuracy {probe['heldout_accuracy']:.3f} (text judges on the same {probe['heldout_size']} "
            f"texts: {judges})"
            if probe["heldout_accuracy"] is not None  # None: no text was held out
            else "held-out accuracy not measured (fitted with --allow-no-heldout on too few texts)"
        )
        click.echo(f"\nstyle probe {probe['file']}: {probe['neurons']} neurons, {measured}")
    elif not all(s["corpus_found"] for s in info["styles"]):
        flags = " ".join(f"--train-style {s['style']}=FILE" for s in info["styles"])
        click.echo(
            f"\nno style probe yet (for --preset rerank); the recorded corpora are not here, so give them: "
            f"steer probe {profile_path} {flags}"
        )
    else:
        click.echo(f"\nno style probe yet (for --preset rerank): steer probe {profile_path}")


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=OUTPUT_FILE,
    default=None,
    help="Where to write the probe [default: PROFILE with .probe.safetensors].",
)
@click.option(
    "--top", type=int, default=PROBE_TOP, show_default=True, help="Neurons whose means differ most across styles."
)
@click.option("--limit", type=int, default=PROBE_LIMIT, show_default=True, help="Texts per style to fit and test on.")
@click.option(
    "--c",
    "c",
    type=FINITE,
    default=PROBE_C,
    show_default=True,
    help="Inverse L2 strength of the probe's logistic regression (smaller: stronger; chosen by cross-validation).",
)
@profile_texts_options
@click.option(
    "--allow-no-heldout",
    is_flag=True,
    help="Fit on too few texts to hold any out (fewer than 20 in all); its accuracy is then not measured.",
)
@click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, help=DTYPE_HELP)
@click.option("--device", type=DEVICE, default="cpu", show_default=True)
@click.option("--force", is_flag=True, help="Overwrite an existing probe.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def probe(
    profile_path: Path,
    output: Path | None,
    top: int,
    limit: int,
    c: float,
    train_styles: tuple[str, ...],
    model_spec: str | None,
    allow_no_heldout: bool,
    dtype: str,
    device: str,
    force: bool,
    quiet: bool,
) -> None:
    """Fit a style probe on the model's own neurons (for rerank) and save it beside the profile."""
    from steer.files import sha256_file
    from steer.profiling.probe import build_probe, probe_path
    from steer.profiling.profile import style_corpora

    probe_fit(top, limit, c)  # a bad value is one line, before the model loads
    from steer.files import check_not_an_input
    from steer.profiling.corpus import source_file

    target = output or probe_path(profile_path)
    inputs: dict[str, str | Path | None] = {"the profile": profile_path}
    inputs.update({f"the {s.partition('=')[0]!r} corpus": source_file(s.partition("=")[2]) for s in train_styles})
    check_not_an_input(target, inputs)
    if os.path.lexists(target) and not force:
        raise SteerError(f"{target} exists; pass --force to overwrite it")
    corpora = style_corpora(train_styles, profile_path)
    if not allow_no_heldout:
        _check_heldout(corpora, limit)
    prof, lm = load_profile_and_model(profile_path, model_spec, dtype, device, quiet)
    built = build_probe(lm, prof, corpora, profile_sha256=sha256_file(profile_path), top=top, limit=limit, c=c)
    built.save(target, force=force)
    if not built.heldout_size:
        click.echo(f"wrote {target} ({built.neurons.numel()} neurons; held-out accuracy not measured: too few texts)")
        return
    judges = ", ".join(f"{k} {v:.3f}" for k, v in built.judges_heldout_accuracy.items())
    click.echo(
        f"wrote {target} ({built.neurons.numel()} neurons; held-out accuracy {built.heldout_accuracy:.3f} "
        f"on {built.heldout_size} texts; text judges on the same texts: {judges})"
    )


def _check_heldout(corpora: Mapping[str, Sequence[str]], limit: int) -> None:
    """A probe must hold texts out to measure itself: with too few texts (`heldout_cut`: fewer
    than 20 in all) it would be written with "held-out accuracy nan on 0 texts". Refused before
    the model loads, saying how many texts per style are needed (--allow-no-heldout fits anyway)."""
    from steer.profiling.probe import PROBE_HELDOUT
    from steer.scoring.judges import MIN_HELDOUT_ROWS, heldout_cut

    counts = {style: min(limit, sum(1 for t in texts if t.strip())) for style, texts in corpora.items()}
    if heldout_cut(sum(counts.values()), PROBE_HELDOUT) > 0:
        return
    each = math.ceil(MIN_HELDOUT_ROWS / max(len(counts), 1))
    have = ", ".join(f"{style!r} {n}" for style, n in counts.items())
    raise SteerError(
        f"too few texts to hold any out and measure the probe ({have}; --limit {limit}): it needs at least "
        f"{MIN_HELDOUT_ROWS} in all, {each} per style; give more with --train-style NAME=SOURCE, or pass "
        "--allow-no-heldout to fit on these unmeasured"
    )


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=PROFILE)
@profile_texts_options
@click.option("--force", is_flag=True, help="Rewrite PROFILE with the calibration (its counts are kept as they are).")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def calibrate(
    profile_path: Path, train_styles: tuple[str, ...], model_spec: str | None, force: bool, quiet: bool
) -> None:
    """Record in the profile what one unit of steering strength (λ) is on its model: the shift that
    moves the first reply token as far as the 135M's λ = 1 moved its own (steer profile does this)."""
    from dataclasses import replace

    from steer.generation.calibration import calibrate as measure
    from steer.profiling.profile import StyleProfile, style_corpora

    recorded = StyleProfile.load(profile_path)
    if not force:
        state = f"is calibrated (1 unit = λ {recorded.unit():.4g})" if recorded.calibration else "is not calibrated"
        raise SteerError(f"{profile_path} {state}; pass --force to rewrite it with a new calibration")
    corpora = style_corpora(train_styles, profile_path)
    prof, lm = load_profile_and_model(profile_path, model_spec, "auto", "cpu", quiet)
    from steer.files import sha256_file
    from steer.profiling.defaults import defaults_path, restamp_read_defaults
    from steer.profiling.probe import probe_path, restamp_probe

    units = measure(lm, prof, corpora, progress=not quiet)
    calibrated = replace(prof, calibration=units)
    old = sha256_file(profile_path)
    calibrated.save(profile_path, force=True)
    each = ", ".join(f"{k.replace('>', ' → ')} {v:.4g}" for k, v in units.items())
    click.echo(f"calibrated {profile_path}: 1 unit of λ = {calibrated.unit():.4g} (per direction: {each})")
    if restamp_probe(profile_path, old):
        click.echo(f"kept the probe beside it ({probe_path(profile_path).name}): the counts it reads are unchanged")
    elif probe_path(profile_path).is_file():
        click.echo(f"the probe beside it was built from another file: 'steer probe {profile_path} --force' rebuilds it")
    kept = restamp_read_defaults(profile_path, old)
    if kept:
        click.echo(
            f"kept the read defaults beside it ({defaults_path(profile_path).name}): they choose the plain prompt"
        )
    elif kept is False:
        click.echo(
            f"the read defaults beside it ({defaults_path(profile_path).name}) were read before this calibration and "
            "no longer apply (a steered recipe's strength changed); read the directions again to choose defaults"
        )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per model (JSON Lines).")
def models(as_json: bool) -> None:
    """List the embedded models: installed or not, assembled into the cache or not, how to install."""
    from steer.model.embedded import embedded_states

    for state in embedded_states():
        if as_json:
            click.echo(json.dumps(state, ensure_ascii=False))
        else:
            click.echo(f"{state['alias']:<20} {state['about']}\n{'':<20} {state['state']}")
