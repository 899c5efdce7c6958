"""`steer transfer`: rewrite texts with a recipe (plain, steered or reranked), resumable and shardable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from steer import __version__
from steer.cli.app import FINITE, cli, load_for_profile, processes_option, relaunched, steering_options
from steer.cli.transfer_steps import _check_styles_before_loading, _decode_resumably, _tuned_for
from steer.config import SteerError
from steer.files import write_text
from steer.hooks import POSITIONS
from steer.settings import CONTRAST_DTYPES, DEFAULT_PRESET, PRESETS


@cli.command()
@steering_options
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
    "--positions",
    type=click.Choice(POSITIONS),
    default=None,
    help="Edit every position (the paper) or only those that predict new tokens. [default: the preset's]",
)
@click.option(
    "--guidance",
    type=FINITE,
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
@click.option("--alpha", type=FINITE, default=None, help="Relative-top filter in (0, 1] (contrast, guidance). [0.1]")
@click.option("--beta", type=FINITE, default=None, help="Contrast strength (1 is the paper). [default: the preset's]")
@click.option(
    "--contrast-dtype",
    type=click.Choice(CONTRAST_DTYPES),
    default="auto",
    show_default=True,
    help="Precision of the early-exit LM-head product (auto: bfloat16 where the hardware has fast bf16).",
)
@click.option("--prompt", "prompt_template", default=None, help="Instruction template with {text}, {source}, {target}.")
@click.option(
    "--opening",
    default=None,
    help="Text the reply is primed with (the start of the model's turn; may use {source}, {target}); "
    "'' for none. Default: the packaged opening of the direction.",
)
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
@click.option(
    "--echo-guard/--no-echo-guard",
    default=True,
    show_default=True,
    help="Forbid the reply from starting with the instruction's first word or copying 3 tokens of it "
    "(words the source uses stay allowed).",
)
@click.option("--max-input-tokens", type=int, default=512, show_default=True, help="Longer inputs are cut (warned).")
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option("--temperature", type=FINITE, default=0.0, show_default=True, help="0 is greedy decoding.")
@click.option("--top-p", type=FINITE, default=1.0, show_default=True)
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
    opening: str | None,
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
    style_exponent: float,
    keep_candidates: bool,
    loop_guard: bool,
    echo_guard: bool,
    processes: int,
    device_map: str | None,
    resume: bool,
) -> None:
    """Rewrite texts from one style to another, steering the profile's neurons while decoding."""
    import hashlib

    from steer.corpus import read_texts
    from steer.distributed import distributed_state
    from steer.records import PartialRecords
    from steer.transfer import Steerer, TransferResult, TransferSettings, describe, load_openings, load_prompts

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
    if (processes > 1 or resume or distributed_state() is not None) and (output is None or compare):
        why = "add -o FILE" if output is None else "drop --compare"
        raise SteerError(f"--processes and --resume write through -o FILE; {why}")
    if keep_candidates and (output is None or output.suffix != ".jsonl"):
        raise SteerError("--keep-candidates writes the candidates into the records: add -o FILE.jsonl")
    leftover = PartialRecords.files(output) if output is not None and not (compare or resume or force) else []
    if leftover:
        raise SteerError(
            f"{leftover[0]} holds rewrites of an interrupted run; add --resume to continue it or --force to start over"
        )
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
        echo_guard=echo_guard,
        max_input_tokens=max_input_tokens,
        batch_size=batch_size,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        clean=clean,
        prompt=prompt_template,
        opening=opening,
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
    openings = load_openings(prompts_file) if prompts_file is not None else None
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
    prof, lm = load_for_profile(profile_path, model_spec, dtype, device, quiet, device_map)
    steerer = Steerer(lm, prof)
    if prompts is not None:
        steerer.prompts = prompts
    if openings is not None:
        steerer.openings = openings
    reranker = None
    if rerank_settings is not None:
        from steer.probe import load_probe_for
        from steer.rerank import Reranker

        reranker = Reranker(steerer, load_probe_for(profile_path, lm))

    def decode(indices: list[int], on_batch: Any = None) -> list[TransferResult]:
        chosen = [items[i] for i in indices]
        if not chosen:
            return []
        if reranker is not None:
            return reranker.transfer(chosen, source, target, rerank_settings, progress=not quiet, on_batch=on_batch)
        return steerer.transfer(chosen, source, target, settings, progress=not quiet, on_batch=on_batch)

    digest = hashlib.sha256(profile_path.read_bytes()).hexdigest()
    from steer.records import TransferRecord, write_transfer_records
    from steer.rerank import rerank_summary
    from steer.transfer import prompt_template as template_for

    prompt_template_used = template_for(source, target, settings, steerer.prompts)
    recipe = describe(settings) if not reranking else f"rerank λ ∈ {{{ladder}}} of {describe(settings)}"

    def record(r: TransferResult) -> TransferRecord:
        return TransferRecord.of(
            r,
            source,
            target,
            "rerank" if reranking else settings.mode,
            lm,
            truncated=r.truncated,
            recipe=recipe,
            settings=settings.to_dict(),
            rerank=rerank_summary(r.info, keep_candidates) if reranking else None,
            ladder=ladder if reranking else None,
            length_weight=length_weight if reranking else None,
            style_exponent=style_exponent if reranking else None,
            profile=str(profile_path),
            profile_sha256=digest,
            prompt_template=prompt_template_used,
            seed=seed,
            steer_version=__version__,
        )

    if output is None or compare:
        done = iter(decode(list(range(len(items)))))
        results = [next(done) if t else TransferResult(t, "", "", False, {"blank_input": True}) for t in lines]
        records = [record(r) for r in results]
    else:
        # the batch size changes no output (tested), so a resume may use another one
        decided = {k: v for k, v in settings.to_dict().items() if k != "batch_size"}
        recipe_key = [recipe, decided, ladder, length_weight, style_exponent, keep_candidates]
        recipe_key += [source, target, digest]
        records = _decode_resumably(output, items, lines, decode, record, [*recipe_key, lm.fingerprint], resume, force)
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
    if output.suffix == ".jsonl":
        write_transfer_records(output, records)
    else:
        write_text(output, "\n".join(r.output.replace("\n", " ") for r in records) + "\n")
    PartialRecords.remove_all(output)
    if not quiet:
        click.echo(f"wrote {len(records)} rewrites to {output}", err=True)
