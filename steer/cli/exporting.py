"""Sharing what steer made: `steer export` bakes a scaling edit into the weights (a plain Hugging Face
model directory with a card), `steer push` puts a profile, its probe and a card on the Hub."""

from __future__ import annotations

from pathlib import Path

import click

from steer.cli.app import EDIT_FIELDS, cli, recipe_options, show_progress, steering_options
from steer.cli.transfer_steps import check_before_loading
from steer.errors import SteerError
from steer.model.names import LIGHT_FORMATS


@cli.command()
@steering_options
@recipe_options(EDIT_FIELDS)
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

    Only per-neuron scaling (deactivate, amplify, both, or an edit `steer train --params scale`
    learned: --mode trained) can live in the weights; shift and guidance need hooks at run time, so
    use 'steer transfer' for those.
    """
    from steer.generation.export import check_export_target, export_model
    from steer.generation.steerer import Steerer, TransferSettings, describe

    if dtype in LIGHT_FORMATS:
        raise click.BadParameter(
            f"{dtype!r}: an export writes float weights; use --dtype auto, float32, bfloat16 or float16",
            param_hint="--dtype",
        )
    check_export_target(output, force=force, inputs={"the profile": profile_path})
    given = {
        "mode": mode or "deactivate",
        "top_k": top_k,
        "method": method,
        "amplify_factor": amplify_factor,
        "strength": strength,
        "edit_layers": edit_layers,
    }
    settings = TransferSettings.bare(**given)
    if settings.mode == "prompt":
        raise SteerError("--mode prompt has no edit to export; use deactivate, amplify or deactivate+amplify")
    # --from/--to against the profile's styles, --edit-layers and --top-k: read from the files, before the model
    from steer.rewriting.opened import OpenedProfile

    opened = OpenedProfile.open(profile_path)
    check_before_loading(opened, source, target, settings, None, reranking=False)
    if settings.mode == "trained":  # a learned shift cannot live in the weights: refused before the model loads
        learned = opened.trained()
        if bool(learned.edit(source, target).shift.any()):
            raise SteerError(
                f"the trained edit for {source} → {target} adds shifts, which cannot be baked into weights; train "
                f"scales only: steer train {profile_path} --from {source} --to {target} --params scale --force …"
            )
    show_progress(quiet)
    prof, lm = opened.profile, opened.load_model(model_spec, dtype=dtype, device=device, progress=not quiet)
    edit = Steerer(lm, prof, trained=lambda: opened.trained_for(lm)).build_edit(source, target, settings)
    if len(edit) == 0:  # an unedited copy of the model under a steered name
        raise SteerError(
            f"the edit changes no neuron ({describe(settings)}, {source} → {target}): nothing to bake in; "
            "choose another --top-k or --method"
        )
    description = {
        "model_id": lm.model_id,
        "fingerprint": lm.fingerprint,
        "source": source,
        "target": target,
        "recipe": describe(settings),
        "settings": {k: v for k, v in settings.to_dict().items() if k in given},
        "profile": str(profile_path),
    }
    from steer.profiling.hub import file_digest

    description["profile_sha256"] = file_digest(Path(profile_path))["sha256"]
    description["corpora"] = {s: m.get("sha256") for s, m in prof.corpora.items()}
    if settings.mode == "trained":  # what the baked scales were learned from
        from steer.profiling.trained import trained_path

        info = opened.trained().info(source, target)
        description["trained"] = {"sha256": file_digest(trained_path(profile_path))["sha256"], **info}
    export_model(lm, edit, output, description=description, force=force)
    click.echo(f"wrote {output} ({len(edit)} neurons edited: {describe(settings)}, {source} → {target})")


@cli.command()
@click.argument("profile_path", metavar="PROFILE", type=click.Path(path_type=Path))
@click.argument("repo_id", metavar="REPO_ID")
@click.option("--revision", default=None, help="Branch to push to (default: the repo's default branch).")
@click.option("--private", is_flag=True, help="Create the repo as private (when it does not exist yet).")
@click.option("-m", "--message", default=None, help="Commit message.")
def push(profile_path: Path, repo_id: str, revision: str | None, private: bool, message: str | None) -> None:
    """Share a profile on the Hugging Face Hub: the profile, its style probe and a model card.

    The card (README.md) names the base model, the styles, the corpora's sha256s and sizes, the
    probe's held-out accuracy and the sha256 of every file; 'steer transfer -p hf:REPO_ID[@REV]'
    downloads and checks them. Log in first ('hf auth login' or HF_TOKEN).
    """
    from steer.profiling.hub import push as push_profile

    url = push_profile(profile_path, repo_id, revision=revision, private=private, message=message)
    click.echo(f"pushed {profile_path} to {repo_id}: {url}")
