"""The `steer` command line: parse options, call the library, print. Nothing else lives here."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import click

from steer import __version__
from steer.config import ProfileSettings, SteerError
from steer.files import write_text
from steer.models import DEFAULT_MODEL, DTYPES
from steer.profile import distributed_state
from steer.transfer import DEFAULT_PRESET, PRESETS


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
    _show_library_warnings()


class _EchoWarnings(logging.Handler):
    """The library's log on the current stderr: warnings as 'steer: warning: …' (also under -q),
    progress messages (INFO) as they are, shown only while the library's level allows them."""

    def emit(self, record: logging.LogRecord) -> None:
        prefix = "steer: warning: " if record.levelno >= logging.WARNING else ""
        click.echo(f"{prefix}{record.getMessage()}", err=True)


def _show_library_warnings() -> None:
    library = logging.getLogger("steer")
    if not any(isinstance(h, _EchoWarnings) for h in library.handlers):
        library.addHandler(_EchoWarnings(logging.INFO))
        library.propagate = False
    library.setLevel(logging.WARNING)  # each command raises it to INFO when it shows progress


def _show_progress(quiet: bool) -> None:
    """Progress messages of the library (INFO) unless -q; warnings are shown either way."""
    logging.getLogger("steer").setLevel(logging.WARNING if quiet else logging.INFO)


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
@click.option(
    "--processes",
    type=int,
    default=1,
    show_default=True,
    help="Shard the corpora over N processes (via 'accelerate launch'); the counts are summed exactly.",
)
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
    batch_size: int,
    max_length: int,
    limit: int | None,
    dedupe: bool,
    force: bool,
    processes: int,
    device_map: str | None,
    quiet: bool,
) -> None:
    """Count how often each MLP neuron fires on each style's texts and save a profile."""
    from steer.corpus import load_styles
    from steer.models import load_model
    from steer.profile import profile_styles

    if output.exists() and not force:
        raise SteerError(f"{output} exists; pass --force to overwrite it")
    if processes > 1:
        _relaunch_with_accelerate(processes)
        return
    settings = ProfileSettings(batch_size=batch_size, max_length=max_length, dtype=dtype, dedupe=dedupe, limit=limit)
    if any(spec.endswith("=-") for spec in styles) and distributed_state() is not None:
        raise SteerError("stdin ('-') cannot be shared between processes; pass a file")
    corpora = load_styles(styles, limit=limit, dedupe=dedupe)
    _show_progress(quiet)
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
@click.option("--force", is_flag=True, help="Overwrite an existing --plot file.")
def inspect(
    profile_path: Path,
    source: str | None,
    target: str | None,
    top_k: str,
    method: str,
    plot: Path | None,
    force: bool,
) -> None:
    """Show a profile's model, styles and where the style-specific neurons sit, layer by layer."""
    from steer.neurons import StyleProfile

    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise SteerError(f"--plot {plot} must end in .png")
        if plot.exists() and plot.resolve() == profile_path.resolve():
            raise SteerError(f"--plot {plot} is the profile itself; pick another file name")
        if plot.exists() and not force:
            raise SteerError(f"{plot} exists; pass --force to overwrite it")
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
    from steer.probe import StyleProbe, probe_path

    if probe_path(profile_path).is_file():
        built = StyleProbe.load(probe_path(profile_path))
        judges = ", ".join(f"{k} {v:.3f}" for k, v in built.judges_heldout_accuracy.items())
        click.echo(
            f"\nstyle probe {probe_path(profile_path).name}: {built.neurons.numel()} neurons, held-out accuracy "
            f"{built.heldout_accuracy:.3f} (text judges on the same {built.heldout_size} texts: {judges})"
        )
    else:
        click.echo(f"\nno style probe yet (for --preset rerank): steer probe {profile_path}")
    if plot is not None:
        from steer.plots import grouped_bars

        layers = [str(i) for i in range(prof.num_layers)]
        title = f"{prof.model_id}: {method}, top-k {top_k}"
        grouped_bars(
            plot, layers, dict(zip(cols, per_layer, strict=True)), xlabel="layer", ylabel="neurons", title=title
        )
        click.echo(f"wrote {plot}")


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the probe [default: PROFILE with .probe.safetensors].",
)
@click.option("--top", type=int, default=512, show_default=True, help="Neurons whose means differ most across styles.")
@click.option("--limit", type=int, default=1000, show_default=True, help="Texts per style to fit and test on.")
@click.option(
    "--train-style",
    "train_styles",
    multiple=True,
    metavar="NAME=SOURCE",
    help="Texts per style (default: the corpora the profile records).",
)
@click.option("--model", "model_spec", default=None, help="Model to load instead of the profile's.")
@click.option("--force", is_flag=True, help="Overwrite an existing probe.")
@click.option("-q", "--quiet", is_flag=True, help="No progress messages.")
def probe(
    profile_path: Path,
    output: Path | None,
    top: int,
    limit: int,
    train_styles: tuple[str, ...],
    model_spec: str | None,
    force: bool,
    quiet: bool,
) -> None:
    """Fit a style probe on the model's own neurons (for rerank) and save it beside the profile."""
    from steer.probe import build_probe, file_sha256, probe_path

    if top < 1 or limit < 2:
        raise SteerError(f"--top must be ≥ 1 and --limit ≥ 2, got {top} and {limit}")
    target = output or probe_path(profile_path)
    if target.exists() and not force:
        raise SteerError(f"{target} exists; pass --force to overwrite it")
    corpora = _style_corpora(train_styles, profile_path)
    prof, lm = _load_for_profile(profile_path, model_spec, "auto", "cpu", quiet)
    built = build_probe(lm, prof, corpora, profile_sha256=file_sha256(profile_path), top=top, limit=limit)
    built.save(target, force=force)
    judges = ", ".join(f"{k} {v:.3f}" for k, v in built.judges_heldout_accuracy.items())
    click.echo(
        f"wrote {target} ({built.neurons.numel()} neurons; held-out accuracy {built.heldout_accuracy:.3f} "
        f"on {built.heldout_size} texts; text judges on the same texts: {judges})"
    )


def _steering_options(fn: Any) -> Any:
    """Options shared by `transfer` and `export`: which neurons, and how to edit them."""
    from steer.transfer import MODES

    options = [
        click.option(
            "-p",
            "--profile",
            "profile_path",
            type=click.Path(path_type=Path),
            required=True,
            help="Profile from 'steer profile'.",
        ),
        click.option("--from", "source", required=True, help="Style of the input texts (a style in the profile)."),
        click.option("--to", "target", required=True, help="Style to rewrite into (a style in the profile)."),
        click.option(
            "--model",
            "model_spec",
            default=None,
            help="Model to load instead of the profile's (its fingerprint must match).",
        ),
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True),
        click.option("--device", default="cpu", show_default=True),
        click.option(
            "--mode",
            type=click.Choice(MODES),
            default=None,
            help="prompt: instruction only, no edits. deactivate: zero the source-only neurons (the paper). "
            "amplify: multiply the target-only neurons by --amplify-factor. deactivate+amplify: both. "
            "shift: add --strength × (target − source mean activation) to the top-k most different neurons. "
            "[default: the preset's]",
        ),
        click.option("--top-k", default=None, help="Neurons per style: a count, '1%' or 0.01. [default: the preset's]"),
        click.option(
            "--method",
            type=click.Choice(["paper", "diff", "lape"]),
            default=None,
            help="Neuron selection (see 'steer inspect'). [default: paper]",
        ),
        click.option("--amplify-factor", type=float, default=None, help="[default: 2]"),
        click.option("--strength", type=float, default=None, help="λ for --mode shift. [default: the preset's]"),
        click.option(
            "--edit-layers",
            default=None,
            help="Keep only the edits in these blocks: '20-29', '24,26' or 'last:10'. [default: all]",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _load_for_profile(profile_path: Path, model_spec: str | None, dtype: str, device: str, quiet: bool) -> Any:
    from steer.models import load_model
    from steer.neurons import StyleProfile

    _show_progress(quiet)
    prof = StyleProfile.load(profile_path)
    lm = load_model(
        model_spec or prof.model_id,
        dtype=dtype,
        device=device,
        progress=not quiet,
        activation_path=prof.settings.get("activation") if model_spec is None else None,
    )
    prof.check_model(lm.model_type, lm.num_layers, lm.num_neurons, lm.fingerprint, lm.model_id)
    return prof, lm


@cli.command()
@_steering_options
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
    "prompt (no steering) or rerank (guided at each --ladder strength, λ = 0 the plain prompt, in one batch; "
    "the style probe beside the profile, similarity and fluency pick per text). Options override its fields. "
    f"[default: {DEFAULT_PRESET}; with --mode and no --preset, that mode's bare settings]",
)
@click.option("--ladder", default="0,1,2,3", show_default=True, help="rerank: strengths λ to try (0 = plain prompt).")
@click.option(
    "--length-weight",
    type=float,
    default=0.0,
    show_default=True,
    help="rerank: penalise candidates whose length strays from the source's (0 = off).",
)
@click.option("--keep-candidates", is_flag=True, help="rerank: write every candidate and its scores into -o x.jsonl.")
@click.option(
    "--positions",
    type=click.Choice(["all", "generated"]),
    default=None,
    help="Edit every position (the paper) or only those that predict new tokens. [default: the preset's]",
)
@click.option(
    "--guidance",
    type=float,
    default=None,
    help="γ: decode each text unedited and edited in one batch and follow log p + γ·(log p_edited − log p) "
    "inside the unedited model's plausible tokens (--alpha); 0 turns it off. [default: the preset's]",
)
@click.option(
    "--contrast/--no-contrast",
    default=None,
    help="Contrastive layer decoding (the paper's DoLa variant). [default: the preset's]",
)
@click.option(
    "--contrast-layers", default=None, help="Candidate layers, e.g. '24-28' (default: the 4 before the last)."
)
@click.option("--alpha", type=float, default=None, help="Relative-top filter in (0, 1] (contrast, guidance). [0.1]")
@click.option("--beta", type=float, default=None, help="Contrast strength (1 is the paper). [default: the preset's]")
@click.option(
    "--contrast-dtype",
    type=click.Choice(["auto", "float32", "bfloat16"]),
    default="auto",
    show_default=True,
    help="Precision of the early-exit LM-head product (auto: bfloat16 where the hardware has fast bf16).",
)
@click.option("--prompt", "prompt_template", default=None, help="Instruction template with {text}, {source}, {target}.")
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(path_type=Path),
    default=None,
    help="TOML of templates per direction (default: the packaged steer/data/prompts.toml).",
)
@click.option("--max-new-tokens", type=int, default=64, show_default=True)
@click.option(
    "--no-repeat-ngram",
    type=int,
    default=0,
    show_default=True,
    help="Forbid the reply from repeating its own n-grams of this size (source phrases stay allowed); 0 is off.",
)
@click.option(
    "--loop-guard/--no-loop-guard",
    default=True,
    show_default=True,
    help="Forbid the reply from starting a third consecutive copy of what it just said twice.",
)
@click.option("--max-input-tokens", type=int, default=512, show_default=True, help="Longer inputs are cut (warned).")
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True, help="0 is greedy decoding.")
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--clean/--no-clean",
    default=True,
    show_default=True,
    help="Keep the first line and strip quotes and 'Here is the rewritten…:' prefixes.",
)
@click.option(
    "--settings",
    "settings_file",
    type=click.Path(path_type=Path),
    default=None,
    help="tuned.json from 'steer tune': its recipe for this direction replaces --preset; options given here win.",
)
@click.option("--compare", is_flag=True, help="Also run --mode prompt and print source / prompt / steered.")
@click.option("--force", is_flag=True, help="Overwrite an existing --output.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def transfer(
    profile_path: Path,
    source: str,
    target: str,
    model_spec: str | None,
    dtype: str,
    device: str,
    mode: str | None,
    top_k: str | None,
    method: str | None,
    amplify_factor: float | None,
    strength: float | None,
    edit_layers: str | None,
    texts: tuple[str, ...],
    input_source: str | None,
    output: Path | None,
    preset: str,
    positions: str | None,
    guidance: float | None,
    contrast: bool | None,
    contrast_layers: str | None,
    alpha: float | None,
    beta: float | None,
    contrast_dtype: str,
    prompt_template: str | None,
    prompts_file: Path | None,
    max_new_tokens: int,
    no_repeat_ngram: int,
    max_input_tokens: int,
    batch_size: int,
    temperature: float,
    top_p: float,
    seed: int,
    clean: bool,
    settings_file: Path | None,
    compare: bool,
    force: bool,
    quiet: bool,
    ladder: str,
    length_weight: float,
    keep_candidates: bool,
    loop_guard: bool,
) -> None:
    """Rewrite texts from one style to another, steering the profile's neurons while decoding."""
    import hashlib

    from steer.corpus import read_texts
    from steer.transfer import Steerer, TransferResult, TransferSettings, describe, load_prompts

    if output is not None and output.exists() and not force:
        raise SteerError(f"{output} exists; pass --force to overwrite it")
    reranking = preset == "rerank"
    if keep_candidates and not reranking:
        raise SteerError("--keep-candidates keeps rerank candidates; add --preset rerank")
    if reranking and mode is not None:
        raise SteerError("--preset rerank varies the guided recipe's λ; drop --mode")
    tuned = _tuned_for(settings_file, source, target) if settings_file is not None else None
    given = {
        "mode": mode,
        "top_k": top_k,
        "method": method,
        "amplify_factor": amplify_factor,
        "strength": strength,
        "edit_layers": edit_layers,
        "positions": positions,
        "guidance": guidance,
        "contrast": contrast,
        "contrast_layers": contrast_layers,
        "alpha": alpha,
        "beta": beta,
    }
    settings = TransferSettings.resolve(
        "guided" if reranking else preset,
        tuned,
        **given,
        contrast_dtype=contrast_dtype,
        max_new_tokens=max_new_tokens,
        no_repeat_ngram=no_repeat_ngram,
        loop_guard=loop_guard,
        max_input_tokens=max_input_tokens,
        batch_size=batch_size,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        clean=clean,
        prompt=prompt_template,
    )
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
    prompts = load_prompts(prompts_file) if prompts_file is not None else None  # checked before the model loads
    if settings.edit_layers is not None:
        from steer.contrast import parse_layers

        parse_layers(settings.edit_layers, 10**6, option="--edit-layers", last_allowed=True)  # syntax only
    rerank_settings = None
    if reranking:
        from steer.probe import probe_path
        from steer.rerank import RerankSettings, parse_ladder

        rerank_settings = RerankSettings(parse_ladder(ladder), settings, length_weight)
        if not probe_path(profile_path).is_file():
            raise SteerError(
                f"--preset rerank needs the profile's style probe; build it with: steer probe {profile_path}"
            )
    prof, lm = _load_for_profile(profile_path, model_spec, dtype, device, quiet)
    steerer = Steerer(lm, prof)
    if prompts is not None:
        steerer.prompts = prompts
    if rerank_settings is not None:
        from steer.probe import load_probe_for
        from steer.rerank import Reranker

        reranker = Reranker(steerer, load_probe_for(profile_path, lm))
        done = iter(reranker.transfer(items, source, target, rerank_settings, progress=not quiet))
    else:
        done = iter(steerer.transfer(items, source, target, settings, progress=not quiet))
    results = [next(done) if t else TransferResult(t, "", "", False, {"blank_input": True}) for t in lines]
    if compare and rerank_settings is not None:  # the plain prompt is candidate λ = 0: no second run
        for r in results:
            click.echo(f"source:   {r.text}")
            chosen = r.info.get("rerank", {}).get("chosen")
            for k, c in enumerate(r.info.get("rerank", {}).get("candidates", [])):
                mark = "→" if k == chosen else " "
                click.echo(
                    f" {mark} λ={c['strength']:<4g} score {c['score']:.3f} = style {c['style']:.2f} × sim "
                    f"{c['similarity']:.2f} × fluency {c['fluency']:.2f}: {c['output']}"
                )
            click.echo("")
        if output is None:
            return
    elif compare:
        from dataclasses import replace

        plain = iter(
            steerer.transfer(
                items, source, target, replace(settings, mode="prompt", contrast=False), progress=not quiet
            )
        )
        baseline = [next(plain) if t else TransferResult(t, "", "", False, {}) for t in lines]
        label = "steered"
        for base, steered in zip(baseline, results, strict=True):
            click.echo(f"source:   {base.text}\nprompt:   {base.output}\n{label + ':':<9} {steered.output}\n")
        if output is None:
            return
    if output is None:
        for r in results:
            click.echo(r.output.replace("\n", " "))
        return
    digest = hashlib.sha256(profile_path.read_bytes()).hexdigest()
    from steer.transfer import prompt_template as template_for

    prompt_template_used = template_for(source, target, settings, steerer.prompts)
    if output.suffix == ".jsonl":
        from steer.records import TransferRecord, write_transfer_records

        recipe = describe(settings) if not reranking else f"rerank λ ∈ {{{ladder}}} of {describe(settings)}"
        write_transfer_records(
            output,
            [
                TransferRecord(
                    source_text=r.text,
                    output=r.output,
                    raw_output=r.raw_output,
                    truncated=r.truncated,
                    source_style=source,
                    target_style=target,
                    mode="rerank" if reranking else settings.mode,
                    recipe=recipe,
                    settings=settings.to_dict(),
                    rerank=_rerank_record(r, keep_candidates) if reranking else None,
                    ladder=ladder if reranking else None,
                    length_weight=length_weight if reranking else None,
                    model_id=lm.model_id,
                    fingerprint=lm.fingerprint,
                    profile=str(profile_path),
                    profile_sha256=digest,
                    prompt_template=prompt_template_used,
                    seed=seed,
                    steer_version=__version__,
                )
                for r in results
            ],
        )
    else:
        write_text(output, "\n".join(r.output.replace("\n", " ") for r in results) + "\n")
    if not quiet:
        click.echo(f"wrote {len(results)} rewrites to {output}", err=True)


@cli.command()
@_steering_options
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="New Hugging Face model directory.",
)
@click.option("--force", is_flag=True, help="Replace an existing output directory.")
@click.option("-q", "--quiet", is_flag=True)
def export(
    profile_path: Path,
    source: str,
    target: str,
    model_spec: str | None,
    dtype: str,
    device: str,
    mode: str | None,
    top_k: str | None,
    method: str | None,
    amplify_factor: float | None,
    strength: float | None,
    edit_layers: str | None,
    output: Path,
    force: bool,
    quiet: bool,
) -> None:
    """Bake a scaling edit into the weights: a plain HF model directory any server can load.

    Only per-neuron scaling (deactivate, amplify, both) can live in the weights; shift and
    guidance need hooks at run time, so use 'steer transfer' for those.
    """
    from steer.export import check_export_target, export_model
    from steer.transfer import Steerer, TransferSettings, describe

    check_export_target(output, force=force)
    given = {
        "mode": mode or "deactivate",
        "top_k": top_k,
        "method": method,
        "amplify_factor": amplify_factor,
        "strength": strength,
        "edit_layers": edit_layers,
    }
    settings = TransferSettings(**{k: v for k, v in given.items() if v is not None})
    if settings.mode == "prompt":
        raise SteerError("--mode prompt has no edit to export; use deactivate, amplify or deactivate+amplify")
    prof, lm = _load_for_profile(profile_path, model_spec, dtype, device, quiet)
    prof.check_style(source)
    prof.check_style(target)
    edit = Steerer(lm, prof).build_edit(source, target, settings)
    description = {
        "model_id": lm.model_id,
        "fingerprint": lm.fingerprint,
        "source": source,
        "target": target,
        "recipe": describe(settings),
        "settings": {k: v for k, v in settings.to_dict().items() if k in given},
        "profile": str(profile_path),
    }
    export_model(lm, edit, output, description=description, force=force)
    click.echo(f"wrote {output} ({len(edit)} neurons edited: {describe(settings)}, {source} → {target})")


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
    help="Comma-separated subset of: bleu,chrf,self-bleu,copy,accuracy,ppl,similarity,repetition,length,empty,j.",
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
    type=click.Path(path_type=Path),
    default=None,
    help="Profile whose corpora train the classifier (default: the records' profile).",
)
@click.option("--fluency-model", default=None, help="LM for perplexity (default: the records' model); 'none' to skip.")
@click.option(
    "--embedder", default="all-minilm-l6-v2", show_default=True, help="Sentence encoder for similarity; 'none' to skip."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
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
    as_json: bool,
) -> None:
    """Score rewrites: BLEU/chrF vs references, self-BLEU and copy rate vs sources, accuracy, PPL, similarity,
    loops, length, empty outputs and the joint score J."""
    import json

    from steer import evaluate as ev
    from steer.corpus import read_texts

    names = ev.parse_metrics(metrics)
    records = ev.read_outputs(outputs_path)
    outputs = [r["output"] if isinstance(r.get("output"), str) else "" for r in records]  # null → empty
    sources = (
        read_texts(src, keep_empty=True)
        if src
        else [r["source_text"] for r in records]
        if "source_text" in records[0]
        else None
    )
    if sources is not None and len(sources) != len(outputs):
        raise SteerError(f"--src has {len(sources)} lines but {outputs_path} has {len(outputs)} outputs; align them")
    references = [[x or None for x in read_texts(r, keep_empty=True)] for r in refs] or None
    target = target or records[0].get("target_style")
    scorers = ev.Scorers()
    info: dict[str, Any] = {}
    if "similarity" in names or "j" in names or ("accuracy" in names and classifier in ("auto", "minilm")):
        if embedder.lower() != "none":
            scorers.embedder = ev.Embedder(embedder)
            info["embedder"] = embedder
    if ("accuracy" in names or "j" in names) and target:
        recorded = records[0].get("profile")
        if profile_path is None and recorded and not train_styles and classifier in ("auto", "tfidf", "minilm"):
            _check_recorded_profile(Path(recorded), records[0].get("profile_sha256"))
        scorers.classifier, held = _classifier(
            classifier, labels, train_styles, profile_path or recorded, scorers.embedder
        )
        info.update({f"judge {k} held-out": v for k, v in held.items()})
    if ("ppl" in names or "j" in names) and (fluency_model or "").lower() != "none":
        from steer.models import load_model

        scorers.fluency_lm = load_model(fluency_model or records[0].get("model_id") or DEFAULT_MODEL, progress=False)
        info["fluency_model"] = scorers.fluency_lm.model_id
    result = ev.evaluate(outputs, sources=sources, references=references, target=target, metrics=names, scorers=scorers)
    result.update(info)
    missing = {m: why for m, why in _unscorable(names, result, sources, references, target).items()}
    if missing and metrics is not None:  # asked for by name: an error, not a silent gap
        name, why = next(iter(missing.items()))
        raise SteerError(f"metric {name!r} cannot be computed: {why}")
    for name, why in missing.items():
        click.echo(f"note: {name} not computed ({why})", err=True)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    labels_ = {
        "bleu": "BLEU",
        "chrf": "chrF",
        "self_bleu": "self-BLEU",
        "copy_rate": "copy rate",
        "accuracy": f"accuracy ({target})",
        "ppl": "perplexity",
        "similarity": "similarity",
        "repetition": "repetition (loops)",
        "length": "length (out/src words)",
        "empty": "empty",
        "j": "J (acc×sim×fluency)",
        "judge": "judge",
    }
    click.echo(f"{'outputs':<26}{result['n']}")
    for key, label in labels_.items():
        if key in result:
            value = result[key]
            if isinstance(value, str):
                click.echo(f"{label:<26}{value}")
            elif key in ("bleu", "chrf", "self_bleu", "ppl"):
                click.echo(f"{label:<26}{value:.2f}")
            else:
                click.echo(f"{label:<26}{value:.4f}")
    for key, value in info.items():
        click.echo(f"{key:<26}{value if isinstance(value, str) else f'{value:.4f}'}")
    for name, sig in result.get("signatures", {}).items():
        click.echo(f"sacrebleu {name}: {sig}")


_RESULT_KEYS = {"self-bleu": "self_bleu", "copy": "copy_rate"}


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
    }
    out = {}
    for name in names:
        if _RESULT_KEYS.get(name, name) not in result:
            out[name] = needs.get(name, "it needs the source texts (--src or JSONL records with source_text)")
    return out


def _rerank_record(result: Any, keep_candidates: bool) -> dict[str, Any]:
    """What a JSONL record keeps of a rerank: the winner's λ, and every candidate if asked."""
    info = result.info.get("rerank")
    if not info:
        return {}
    kept = {"chosen": info["chosen"], "strength": info["strength"]}
    if keep_candidates:
        kept["candidates"] = info["candidates"]
    return kept


def _check_recorded_profile(path: Path, digest: str | None) -> None:
    """The profile a transfer record names must still be the file the rewrites were made with."""
    import hashlib

    if not path.is_file():
        raise SteerError(f"the records name profile {path}, which does not exist; pass -p PROFILE or --train-style")
    if digest and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise SteerError(
            f"profile {path} has changed since these rewrites were made (sha256 differs); pass -p PROFILE "
            "or --train-style NAME=SOURCE"
        )


def _classifier(
    kind: str, labels: tuple[str, ...], train_styles: tuple[str, ...], profile: Any, embedder: Any
) -> tuple[Any, dict[str, float]]:
    """The evaluation judge and the held-out accuracy of every judge trained for the choice."""
    from steer import evaluate as ev

    if kind not in ev.JUDGES:
        mapping = dict(item.split("=", 1) for item in labels if "=" in item)
        return ev.HFClassifier(kind, mapping), {}
    if not train_styles and not profile:
        raise SteerError("accuracy needs classifier corpora: pass --train-style NAME=SOURCE (twice) or -p PROFILE")
    corpora = _style_corpora(train_styles, profile)
    if kind in ("auto", "minilm") and embedder is None:
        embedder = ev.Embedder()
    return ev.build_judge(corpora, kind, embedder=embedder)


def _style_corpora(train_styles: tuple[str, ...], profile: Any) -> dict[str, tuple[str, ...]]:
    """Texts per style: from --train-style specs, else from the corpora a profile records."""
    from steer.corpus import load_corpus, load_styles

    if train_styles:
        return {c.name: c.texts for c in load_styles(train_styles)}
    from steer.neurons import StyleProfile

    prof = StyleProfile.load(profile)
    corpora = {}
    for style, meta in prof.corpora.items():
        if meta.get("source") in (None, "-"):
            raise SteerError(f"the profile's {style!r} corpus came from stdin; pass --train-style NAME=SOURCE")
        corpora[style] = load_corpus(style, meta["source"]).texts
    return corpora


def _run_options(fn: Any) -> Any:
    options = [
        click.argument("config", type=click.Path(path_type=Path)),
        click.option(
            "-o",
            "--out",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Report directory (default: runs/<config name>).",
        ),
        click.option("--data-dir", default=None, help="Fills {data_dir} in the config's paths."),
        click.option("--limit", type=int, default=None, help="Dev texts per direction (quick runs)."),
        click.option(
            "--modes", default=None, help="Comma-separated modes instead of the config's, e.g. prompt,rerank."
        ),
        click.option("--model", "model_spec", default=None, help="Override the config's model."),
        click.option("-q", "--quiet", is_flag=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _runner(
    config: Path,
    out_dir: Path | None,
    data_dir: str | None,
    limit: int | None,
    modes: str | None,
    model_spec: str | None,
    quiet: bool,
) -> Any:
    from steer.experiment import Runner, load_experiment
    from steer.models import load_model

    if limit is not None and limit < 1:
        raise SteerError(f"--limit must be at least 1, got {limit}")
    _show_progress(quiet)
    chosen = [m.strip() for m in modes.split(",") if m.strip()] if modes else None
    exp = load_experiment(config, data_dir=data_dir, limit=limit, modes=chosen)
    lm = load_model(model_spec or exp.model, progress=not quiet)
    return Runner(exp, out_dir or Path("runs") / exp.name, lm, progress=not quiet)


@cli.command()
@_run_options
@click.option("--tune", "do_tune", is_flag=True, help="Pick a recipe per direction on dev first (see 'steer tune').")
def run(
    config: Path,
    out_dir: Path | None,
    data_dir: str | None,
    limit: int | None,
    modes: str | None,
    model_spec: str | None,
    quiet: bool,
    do_tune: bool,
) -> None:
    """Profile, transfer every direction in every mode, evaluate, and write a report directory."""
    from steer.records import TuneResult

    runner = _runner(config, out_dir, data_dir, limit, modes, model_spec, quiet)
    tuned_file = runner.out / "tuned.json"
    if do_tune:
        tuned = runner.tune()
    elif tuned_file.is_file():
        tuned = TuneResult.read(tuned_file)
        click.echo(f"using tuned settings from {tuned_file}", err=True)
    else:
        tuned = None
    runner.run(tuned)
    click.echo((runner.out / "results.md").read_text())
    click.echo(f"report: {runner.out}/ (results.json, results.md, samples.md, chart.png)")


@cli.command()
@_run_options
def tune(
    config: Path,
    out_dir: Path | None,
    data_dir: str | None,
    limit: int | None,
    modes: str | None,
    model_spec: str | None,
    quiet: bool,
) -> None:
    """Try candidate recipes per direction on dev; keep the best J (or trade-off) per direction in tuned.json."""
    from steer.transfer import describe

    runner = _runner(config, out_dir, data_dir, limit, modes, model_spec, quiet)
    tuned = runner.tune()
    for name, chosen in tuned.chosen.items():
        m, p = chosen.metrics, chosen.prompt_metrics
        click.echo(
            f"{name}: {describe(chosen.settings)} — J {m.get('j', float('nan')):.3f} "
            f"(prompt {p.get('j', float('nan')):.3f}), accuracy {m.get('accuracy', float('nan')):.3f} "
            f"(prompt {p.get('accuracy', float('nan')):.3f}), similarity {m.get('similarity', float('nan')):.3f} "
            f"(prompt {p.get('similarity', float('nan')):.3f})"
        )
    click.echo(f"wrote {runner.out / 'tuned.json'}; 'steer run' in the same directory uses it for mode 'tuned'")


@cli.command()
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("docs/results.md"),
    show_default=True,
    help="The Markdown document to write (its trade-off chart goes beside it as <name>-tradeoff.png).",
)
@click.option(
    "--findings",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Hand-written Markdown placed after the verdict (e.g. docs/findings.md).",
)
@click.option("--force", is_flag=True, help="Replace an earlier 'steer report' document.")
def report(run_dirs: tuple[Path, ...], output: Path, findings: Path | None, force: bool) -> None:
    """Write the results document of several run directories: their tables, the computed verdict
    against prompting (thresholds from each run's tuned.json) and the tuning trade-off."""
    from steer.report import write_report

    path = write_report(run_dirs, output, findings=findings, force=force)
    click.echo(f"wrote {path}")


def _relaunch_with_accelerate(processes: int) -> None:
    """Run this same `steer profile` command under `accelerate launch` with N processes."""
    import os
    import subprocess

    if processes > (os.cpu_count() or 1) * 4:
        raise SteerError(f"--processes {processes} is far more than this machine's {os.cpu_count()} CPUs")
    args = sys.argv[1:]
    cleaned, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--processes":
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        cleaned.append(arg)
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // processes)))
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]
    if not _has_accelerator():
        command.append("--cpu")
    code = subprocess.call([*command, "-m", "steer", *cleaned], env=env)
    if code != 0:
        raise SteerError(f"the {processes} profiling processes failed (exit code {code}); see the messages above")


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available()


def _tuned_for(path: Path, source: str, target: str) -> dict[str, Any]:
    """The settings `steer tune` chose for one direction."""
    from steer.records import TuneResult

    return TuneResult.read(path).settings_for(f"{source}-{target}", path)


def main() -> None:
    """Console-script entry point: warnings of the library on stderr (also with -q, which hides only
    progress), and SIGTERM handled like Ctrl-C so every temporary file is cleaned up."""
    import signal

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        cli(prog_name="steer")
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    main()
    sys.exit(0)
