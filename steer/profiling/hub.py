"""Sharing on the Hugging Face Hub: a model card that says what a profile is, `push` of a profile
with its probe and card, and a verified read of `hf:REPO_ID[@REVISION]` wherever a profile is read.

The card's YAML front matter follows the Hub's conventions (`library_name: steer`, `base_model`,
`tags`) and carries, under `steer:`, the styles, the corpora's sha256s and sizes, the probe's
held-out accuracy, how the profile was made, and the sha256 and size of every file pushed. A read
downloads only the profile, its probe and the card, checks every file against the card's sha256
before use and loads safetensors only (nothing is unpickled). `steer export` writes the same kind
of card for an edited model (`export_card`).
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

from steer.errors import SteerError
from steer.version import __version__

logger = logging.getLogger(__name__)

HF_PREFIX = "hf:"
PROFILE_FILE = "profile.safetensors"
PROBE_FILE = "profile.probe.safetensors"  # = steer.profiling.probe.probe_path(PROFILE_FILE): the probe sits beside it
# the measurements and trained edits beside it (`steer instruct`, `steer train`), sent when made
INSTRUCT_FILE, TRAINED_FILE = "profile.instruct.safetensors", "profile.trained.safetensors"
CARD_FILE = "README.md"
CARD_FORMAT = "steer-profile-card"
CARD_VERSION = 1
TAGS = ["steer", "text-style-transfer", "style-transfer", "neuron-steering", "sneuron-tst"]
# Hub ids of the embedded models, for the card's `base_model` (the embedded GGUF is a quantised copy of it).
HUB_BASE_MODELS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def is_hub_spec(spec: str | Path) -> bool:
    return str(spec).startswith(HF_PREFIX)


def parse_hub_spec(spec: str) -> tuple[str, str | None]:
    """`hf:owner/name@rev` → ("owner/name", "rev"); no `@` → revision None (the default branch)."""
    body = spec[len(HF_PREFIX) :]
    repo, _, revision = body.partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or (revision == "" and "@" in body):
        raise SteerError(f"{spec!r} is not a Hub profile; write hf:OWNER/NAME or hf:OWNER/NAME@REVISION")
    return repo, revision or None


def file_digest(path: Path) -> dict[str, Any]:
    """sha256 and size of a file, as the card records them."""
    from steer.files import sha256_file

    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def base_model_id(model_id: str) -> str | None:
    """The Hub id a card names as `base_model`: an embedded alias's source, an `owner/name` id as
    it is, none for a local path."""
    if model_id in HUB_BASE_MODELS:
        return HUB_BASE_MODELS[model_id]
    parts = model_id.split("/")
    if len(parts) == 2 and all(parts) and not Path(model_id).exists() and not model_id.endswith(".gguf"):
        return model_id
    return None


def profile_card(profile_path: str | Path, files: dict[str, dict[str, Any]]) -> str:
    """The model card (README.md) for a profile pushed as `files` (name → sha256 and size)."""
    from huggingface_hub import ModelCard, ModelCardData

    from steer.profiling.probe import StyleProbe, probe_path
    from steer.profiling.profile import StyleProfile

    prof = StyleProfile.load(profile_path)
    probe = StyleProbe.load(probe_path(profile_path)) if probe_path(profile_path).is_file() else None
    held_out = None if probe is None else float(probe.heldout_accuracy)
    held_out = round(held_out, 4) if held_out is not None and math.isfinite(held_out) else None
    corpora = {
        style: {
            "sha256": meta.get("sha256"),
            "texts": prof.counts[style].num_texts,
            "tokens": prof.counts[style].num_tokens,
            "source": Path(str(meta.get("source", ""))).name or None,
        }
        for style, meta in prof.corpora.items()
    }
    steer_meta: dict[str, Any] = {
        "format": CARD_FORMAT,
        "version": CARD_VERSION,
        "steer_version": prof.steer_version,
        "pushed_with": __version__,
        "model_id": prof.model_id,
        "model_type": prof.model_type,
        "fingerprint": prof.fingerprint,
        "layers": prof.num_layers,
        "neurons_per_layer": prof.num_neurons,
        "styles": list(prof.styles),
        "corpora": corpora,
        "profiling": prof.settings,
        "probe_heldout_accuracy": held_out,  # None: no probe, or too few texts to hold any out
        "probe_fit": None if probe is None else probe.fit or None,  # top neurons, texts per style, c (None: unrecorded)
        "files": files,
    }
    base = base_model_id(prof.model_id)
    data = ModelCardData(library_name="steer", tags=[*TAGS, *prof.styles], steer=steer_meta)
    if base:
        data.base_model = base
    pair = " ↔ ".join(prof.styles)
    accuracy = "none pushed" if probe is None else f"held-out accuracy {held_out if held_out is not None else 'n/a'}"
    if probe is not None and probe.fit:
        fit = probe.fit
        accuracy += f" (fitted on {fit['top']:g} neurons, ≤ {fit['limit']:g} texts per style, C = {fit['c']:g})"
    a, b = (prof.styles + ["STYLE", "STYLE"])[:2]
    body = "\n".join(
        [
            f"# Style profile: {pair} for `{prof.model_id}`",
            "",
            "MLP neuron activation statistics per style, made by steer (`steer profile`), following "
            "*Style-Specific Neurons for Steering "
            "LLMs in Text Style Transfer* (Lai, Hangya, Fraser, EMNLP 2024). Steer reads them to pick "
            "style-specific neurons and to edit them while the model rewrites text.",
            "",
            f"- Model: `{prof.model_id}` ({prof.model_type}, {prof.num_layers} × {prof.num_neurons} neurons, "
            f"fingerprint `{prof.fingerprint}`)",
            *(
                f"- `{s}`: {c['texts']} texts, {c['tokens']} tokens, corpus sha256 `{c['sha256']}`"
                for s, c in corpora.items()
            ),
            f"- Style probe (`{PROBE_FILE}`): {accuracy}",
            "",
            "## Use",
            "",
            "```bash",
            f"steer transfer -p hf:REPO_ID --from {a} --to {b} 'your text'",
            "```",
            "",
            "Files are safetensors with JSON metadata; steer checks each against the sha256 above before use.",
            "",
        ]
    )
    return ModelCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body).content


def push(
    profile_path: str | Path,
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool = False,
    token: str | None = None,
    message: str | None = None,
) -> str:
    """Upload a profile, its probe, instruction measurements and trained edits (those made) and a card
    to a Hub model repo; returns the commit URL."""
    from huggingface_hub import HfApi

    from steer.model.loading import hub_offline
    from steer.profiling.probe import StyleProbe, probe_path
    from steer.profiling.profile import StyleProfile

    profile_path = Path(profile_path)
    styles = StyleProfile.load(profile_path).styles  # a readable steer profile, or one clear error
    if len(repo_id.split("/")) != 2 or not all(repo_id.split("/")):
        raise SteerError(f"repo id {repo_id!r} is not valid; write OWNER/NAME, e.g. me/formality-smollm2")
    from steer.profiling.instruction import InstructionShifts, instruction_path
    from steer.profiling.trained import TrainedEdits, trained_path

    probe = probe_path(profile_path)
    if probe.is_file():
        StyleProbe.load(probe)  # a probe that is not one is refused before anything is sent
    beside = {INSTRUCT_FILE: instruction_path(profile_path), TRAINED_FILE: trained_path(profile_path)}
    beside = {name: path for name, path in beside.items() if path.is_file()}
    for name, path in beside.items():  # each read once: a file that is not one is refused before sending
        (InstructionShifts if name == INSTRUCT_FILE else TrainedEdits).load(path)
    if hub_offline():
        raise SteerError("HF_HUB_OFFLINE is set, and 'steer push' uploads to the Hub; unset it to push")
    with tempfile.TemporaryDirectory(prefix="steer-push-") as tmp:
        folder = Path(tmp)
        shutil.copyfile(profile_path, folder / PROFILE_FILE)
        if probe.is_file():
            shutil.copyfile(probe, folder / PROBE_FILE)
        for name, path in beside.items():
            shutil.copyfile(path, folder / name)
        files = {p.name: file_digest(p) for p in sorted(folder.iterdir())}
        (folder / CARD_FILE).write_text(profile_card(profile_path, files), encoding="utf-8")
        api = HfApi(token=token)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                revision=revision,
                commit_message=message or f"steer {__version__}: profile {' ↔ '.join(styles)}",
            )
        except Exception as exc:  # the Hub client's errors: no network, offline mode, auth, a bad revision
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SteerError(
                f"could not push {profile_path} to {repo_id}: {first}; check the network and your login "
                "('hf auth login' or HF_TOKEN)"
            ) from None
    if not probe.is_file():  # said after the push, so a failed push shows its error alone
        logger.warning("no style probe beside %s; pushed the profile alone (build one with 'steer probe')", probe)
    return str(getattr(commit, "commit_url", commit))


def read_card(folder: Path) -> dict[str, Any]:
    """The `steer:` block of a downloaded card, checked to be one."""
    from huggingface_hub import ModelCard

    card = folder / CARD_FILE
    if not card.is_file():
        raise SteerError(f"{folder} has no model card ({CARD_FILE}); it was not pushed with 'steer push'")
    meta = ModelCard(card.read_text(encoding="utf-8")).data.to_dict().get("steer")
    if not isinstance(meta, dict) or meta.get("format") != CARD_FORMAT:
        raise SteerError(f"the card in {folder} is not a steer profile card (no `steer:` block of {CARD_FORMAT})")
    if not isinstance(meta.get("version"), int) or meta["version"] > CARD_VERSION:
        raise SteerError(f"the card in {folder} is card version {meta.get('version')}; upgrade steer to read it")
    return meta


def verify(folder: Path, meta: dict[str, Any]) -> None:
    """Every file the card lists exists with its sha256 and size; the profile is among them."""
    files = meta.get("files") or {}
    if PROFILE_FILE not in files:
        raise SteerError(f"the card in {folder} lists no {PROFILE_FILE}")
    for name, expected in files.items():
        path = folder / name
        if Path(name).name != name or not path.is_file():
            raise SteerError(f"{name} is listed by the card but missing from the download in {folder}")
        got = file_digest(path)
        if got["sha256"] != expected.get("sha256"):
            raise SteerError(
                f"{name} does not match its card (sha256 {got['sha256'][:12]}… ≠ {str(expected.get('sha256'))[:12]}…); "
                "the repo changed after it was pushed or the download is damaged — pin a revision with @REV"
            )


def resolve_profile(spec: str | Path) -> Path:
    """A local profile path for `spec`: as it is, or for `hf:REPO_ID[@REV]` the verified download."""
    if not is_hub_spec(spec):
        return Path(spec)
    from huggingface_hub import snapshot_download

    repo, revision = parse_hub_spec(str(spec))
    try:
        folder = Path(
            snapshot_download(
                repo,
                revision=revision,
                allow_patterns=[PROFILE_FILE, PROBE_FILE, INSTRUCT_FILE, TRAINED_FILE, CARD_FILE],
            )
        )
    except Exception as exc:  # the Hub client's errors: offline, unknown repo, bad revision, auth
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SteerError(
            f"could not download {spec}: {first}; check the network, the repo id and revision, and your login for a "
            "private repo ('hf auth login' or HF_TOKEN), or pass a local profile with -p FILE"
        ) from None
    verify(folder, read_card(folder))
    return folder / PROFILE_FILE


def export_card(record: dict[str, Any]) -> str:
    """The model card (README.md) of a `steer export` directory: front matter for the Hub
    (`base_model`, `library_name: transformers`, tags) and what was edited, from its record."""
    import json

    from huggingface_hub import ModelCard, ModelCardData

    data = ModelCardData(
        library_name="transformers",
        tags=[*TAGS, str(record.get("source")), str(record.get("target"))],
        steer={
            "format": "steer-export-card",
            "version": CARD_VERSION,
            **{
                k: record.get(k)
                for k in ("source", "target", "recipe", "profile_sha256", "corpora", "steer_version", "trained")
            },
        },
    )
    base = base_model_id(str(record.get("model_id", "")))
    if base:
        data.base_model = base
        # the Hub's word for changed weights; ModelCardData keeps any extra field
        cast(Any, data).base_model_relation = "finetune"
    body = "\n".join(
        [
            "# Steered model (exported by steer)",
            "",
            f"Base model: `{record.get('model_id')}` (fingerprint `{record.get('fingerprint')}`).",
            f"Edit: {record.get('mode') or record.get('recipe')} for {record.get('source')} → {record.get('target')}, "
            f"{record.get('edited_neurons')} neurons ({record.get('recipe')}), baked into the MLP down-projection "
            + (
                "weights; the scales were learned by `steer train` (the model frozen)."
                if record.get("trained")
                else "weights; no training."
            ),
            "",
            "A stock Hugging Face model directory: load it with `transformers.AutoModelForCausalLM.from_pretrained`, "
            "or serve it with vLLM or SGLang; for llama.cpp, convert it with its `convert_hf_to_gguf.py`. "
            "Contrastive layer decoding is a decoding-time step and is not part of these weights.",
            "",
            "```json",
            json.dumps(record, indent=2),
            "```",
            "",
        ]
    )
    return ModelCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body).content
