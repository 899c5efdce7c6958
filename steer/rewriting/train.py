"""`steer train`: learn a direction's edit on the profile's selected neurons from (source, rewrite)
pairs — the rewrite's likelihood under the plain prompt plus the edit, the model frozen — and store
it beside the profile (`steer.profiling.trained`), resumably (a checkpoint after every epoch)."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import atomic_path, read_safetensors, sha256_file
from steer.rewriting.opened import OpenedProfile
from steer.settings import METHODS, TransferSettings

TRAIN_LIMIT = 200  # pairs per direction (a random sample of the file's), a tenth of them held out
HELD_SHARE = 0.1
MAX_REPLY_TOKENS = 128


@dataclass(frozen=True)
class Trained:
    """What one `steer train` wrote: the file, the pairs learned from and held out, the neurons, the
    held-out loss before and after, the best epoch and the seconds it took."""

    path: Path
    pairs: int
    held: int
    neurons: int
    loss_before: float
    loss_after: float
    best_epoch: int
    seconds: float


def read_pairs(path: str | Path, source: str, target: str) -> list[tuple[str, str]]:
    """(source text, rewrite) rows of a TSV whose first line names each column's style: the column
    named `source`, and the first non-empty of the columns named `target` or `target` plus a number
    (ParaDetox's neutral1..3)."""
    path = Path(path)
    if not path.is_file():
        raise SteerError(f"--pairs {path}: no such file; give a TSV whose first line names the styles")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise SteerError(
            f"--pairs {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    header = [h.strip() for h in lines[0].split("\t")] if lines else []
    wanted = lambda h: h == target or (h.startswith(target) and h[len(target) :].isdigit())  # noqa: E731
    if source not in header or not any(wanted(h) for h in header):
        raise SteerError(
            f"--pairs {path}: the first line names columns {', '.join(header) or 'none'}; it needs one named "
            f"{source!r} and one named {target!r} (or {target}1, {target}2, …)"
        )
    at, targets = header.index(source), [i for i, h in enumerate(header) if wanted(h)]
    pairs = []
    for line in lines[1:]:
        cells = line.split("\t")
        text = cells[at].strip() if at < len(cells) else ""
        rewrite = next((cells[i].strip() for i in targets if i < len(cells) and cells[i].strip()), "")
        if text and rewrite:
            pairs.append((text, rewrite))
    if len(pairs) < 2:
        raise SteerError(f"--pairs {path}: {len(pairs)} rows hold both a {source} text and a {target} rewrite; need 2+")
    return pairs


def _checkpoint_path(path: Path, source: str, target: str) -> Path:
    """One checkpoint per direction: `x.trained.safetensors` → `x.trained.SOURCE-TARGET.partial.safetensors`."""
    return path.with_name(path.name.replace(".trained.safetensors", f".trained.{source}-{target}.partial.safetensors"))


def train_direction(
    profile_path: str | Path,
    source: str,
    target: str,
    pairs_path: str | Path,
    *,
    limit: int = TRAIN_LIMIT,
    epochs: int = 2,
    lr: float = 5e-3,
    batch_size: int = 8,
    top_k: str = "1%",
    method: str = "diff",
    layers: str | None = None,
    params: str = "scale+shift",
    objective: str = "preference",
    seed: int = 0,
    prompts_file: str | Path | None = None,
    model_spec: str | None = None,
    dtype: str = "auto",
    device: str = "cpu",
    force: bool = False,
    progress: bool = False,
) -> Trained:
    """Train the direction's edit and add it to the profile's trained file (a direction already
    there is replaced only with `force`). Options and the pairs are checked before the model loads."""
    from steer.generation.contrast import parse_layers
    from steer.generation.training import OBJECTIVES, PARAMS, Example, train_edit
    from steer.profiling.beside import pair_key
    from steer.profiling.neurons import parse_top_k
    from steer.profiling.profile import check_direction
    from steer.profiling.trained import TrainedEdits, trained_path

    for name, value, low in (("--limit", limit, 2), ("--epochs", epochs, 1), ("--batch-size", batch_size, 1)):
        if value < low:
            raise SteerError(f"{name} must be at least {low}, got {value}")
    if not lr > 0:
        raise SteerError(f"--lr must be positive, got {lr}")
    if params not in PARAMS:
        raise SteerError(f"--params {params!r} is not valid; choose one of {', '.join(PARAMS)}")
    if objective not in OBJECTIVES:
        raise SteerError(f"--objective {objective!r} is not valid; choose one of {', '.join(OBJECTIVES)}")
    if method not in METHODS:
        raise SteerError(f"--method {method!r} is not valid; choose one of {', '.join(METHODS)}")
    if dtype not in ("auto", "float32"):
        raise SteerError(f"--dtype {dtype}: training runs in float32; use --dtype auto or float32")
    opened = OpenedProfile.open(profile_path)
    prof = opened.profile
    prof.check_style(source)
    prof.check_style(target)
    check_direction(source, target)
    parse_top_k(top_k, prof.total_neurons)
    half = f"{prof.num_layers // 2}-{prof.num_layers - 1}"  # the upper half: backward never runs below it
    chosen_layers = parse_layers(layers or half, prof.num_layers, option="--layers", last_allowed=True)
    pairs = read_pairs(pairs_path, source, target)
    path, key = trained_path(profile_path), pair_key(source, target)
    known = _read_trained(path, (prof.num_layers, prof.num_neurons))
    if known is not None and known.profile_sha256 != opened.sha256:
        if not force:
            raise SteerError(f"{path} was trained on another version of {profile_path}; pass --force to start it anew")
        known = None
    if known is not None and key in known.edits and not force:
        raise SteerError(f"{path} already holds {source} → {target}; pass --force to train it again")
    selection = prof.neurons(source, target, top_k=top_k, method=method)
    keep = selection.source.mask.new_zeros(prof.num_layers, 1)
    keep[chosen_layers] = True
    mask = (selection.source.mask | selection.target.mask) & keep
    if not bool(mask.any()):
        raise SteerError(f"--top-k {top_k} with --method {method} selects no neuron in --layers {layers or half}")
    rng = random.Random(seed)
    sample = rng.sample(pairs, min(limit, len(pairs)))
    n_held = max(1, round(len(sample) * HELD_SHARE))
    config = {
        "direction": key, "pairs_sha256": sha256_file(pairs_path), "limit": limit, "seed": seed, "top_k": top_k,
        "method": method, "layers": layers or half, "params": params, "objective": objective, "lr": lr,
        "batch_size": batch_size, "profile_sha256": opened.sha256, "model": model_spec, "dtype": dtype,
        "prompts_file": None if prompts_file is None else sha256_file(prompts_file),
    }  # fmt: skip
    checkpoint = _checkpoint_path(path, source, target)
    resumed = _read_checkpoint(checkpoint, config, force)

    # float weights: the lighter CPU formats `auto` picks for large models pass no gradient back
    lm = opened.load_model(model_spec, dtype="float32" if dtype == "auto" else dtype, device=device, progress=progress)
    from steer.generation.steerer import Steerer

    steerer = Steerer(lm, prof, prompts_file=prompts_file)
    tok, recipe = lm.tokenizer, TransferSettings.preset("prompt")
    eos = steerer._eos_token_id()
    end = [eos[0] if isinstance(eos, list) else eos]
    prompts = steerer.encode_prompts([s for s, _ in sample], source, target, recipe)[0]

    def reply(text: str) -> list[int]:  # a reply cut at the limit is not taught to end there
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return ids[:MAX_REPLY_TOKENS] + (end if len(ids) <= MAX_REPLY_TOKENS else [])

    # the preference objective's rejected reply: a copy of the source, which is never a usable rewrite
    examples = [
        Example(p, reply(r), reply(s) if objective == "preference" else None)
        for p, (s, r) in zip(prompts, sample, strict=True)
    ]
    started = time.monotonic()
    state = train_edit(
        lm, mask, examples[n_held:], examples[:n_held], params=params, objective=objective, epochs=epochs, lr=lr,
        batch_size=batch_size, seed=seed, progress=progress,
        resume=None if resumed is None else lambda s: _restore(s, resumed),
        checkpoint=lambda s: _write_checkpoint(checkpoint, config, s),
    )  # fmt: skip
    assert state.best is not None
    seconds = time.monotonic() - started
    loss, best_epoch, edit = state.best
    info: dict[str, Any] = {
        **{k: v for k, v in config.items() if k not in ("direction", "profile_sha256")},
        "objective_is": "likelihood of the rewrite under the plain prompt plus the edit"
        + (", and SimPO's preference for it over a copy of the source" if objective == "preference" else ""),
        "pairs": Path(pairs_path).name, "pairs_used": len(sample) - n_held, "pairs_held": n_held,
        "reply_tokens": sum(len(e.reply) for e in examples[n_held:]), "neurons": int(mask.sum()),
        "epochs": epochs, "best_epoch": best_epoch, "held_loss": state.curve["held"],
        "train_loss": state.curve["train"], "seconds": round(seconds, 1), "model": lm.model_id,
    }  # fmt: skip
    latest = _read_trained(path, (prof.num_layers, prof.num_neurons))  # directions saved while this one trained
    if latest is not None and latest.profile_sha256 != opened.sha256:
        latest = None  # made for another version of the profile: replaced, as --force asked at the start
    edits = latest or TrainedEdits(lm.fingerprint, opened.sha256)
    edits.with_edit(source, target, edit, info).save(path)
    checkpoint.unlink(missing_ok=True)  # steer's own checkpoint, done with
    held_curve = state.curve["held"]
    return Trained(path, len(sample) - n_held, n_held, int(mask.sum()), held_curve[0], loss, best_epoch, seconds)


def _write_checkpoint(path: Path, config: dict[str, Any], state: Any) -> None:
    """The state after an epoch: values, Adam's moments, the best edit so far, the curve."""
    from safetensors.torch import save_file

    p, (best_loss, best_epoch, best) = state.params, state.best
    tensors = {"a": p.a.detach(), "b": p.b.detach(), "best_scale": best.scale, "best_shift": best.shift}
    for i, moments in state.optimizer.state_dict()["state"].items():
        for name, value in moments.items():
            tensors[f"adam:{i}:{name}"] = value.detach().reshape(-1).float() if name == "step" else value.detach()
    meta = {"config": config, "epochs_done": state.epochs_done, "curve": state.curve, "best": [best_loss, best_epoch]}
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata={"steer": json.dumps(meta)})


def _read_checkpoint(path: Path, config: dict[str, Any], force: bool) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(meta, tensors) of a checkpoint of this very training, None when there is none (or, with
    `force`, one of another training, which is then replaced)."""
    if not path.is_file():
        return None
    raw, tensors = read_safetensors(path, "steer training checkpoint", "delete it to start anew")
    try:
        meta = json.loads(raw or "{}")
        meta["config"], int(meta["epochs_done"]), meta["curve"]["held"], float(meta["best"][0])
        [tensors[name] for name in ("a", "b", "best_scale", "best_shift")]
    except (KeyError, TypeError, ValueError, IndexError, json.JSONDecodeError):
        raise SteerError(f"{path} is not a complete steer training checkpoint; delete it to start anew") from None
    if meta.get("config") != config:
        if force:
            return None
        raise SteerError(
            f"{path} is the checkpoint of another training (other pairs or options); pass --force to start anew"
        )
    return meta, tensors


def _read_trained(path: Path, shape: tuple[int, int]) -> Any:
    """The trained file at `path` (None when there is none); a file that is not one is the user's: refused."""
    from steer.profiling.trained import TrainedEdits

    if not path.is_file():
        return None
    try:
        return TrainedEdits.load(path, shape)
    except SteerError as err:
        raise SteerError(f"{err}; steer will not replace it — move it away, then train again") from None


def _restore(state: Any, found: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Put a checkpoint back into a fresh training state."""
    from steer.model.hooks import NeuronEdit

    meta, tensors = found
    p = state.params
    p.a.data.copy_(tensors["a"])
    p.b.data.copy_(tensors["b"])
    saved = state.optimizer.state_dict()
    for i in range(len(p.parameters())):
        saved["state"][i] = {
            name: tensors[f"adam:{i}:{name}"].reshape(()) if name == "step" else tensors[f"adam:{i}:{name}"]
            for name in ("step", "exp_avg", "exp_avg_sq")
        }
    state.optimizer.load_state_dict(saved)
    state.epochs_done, state.curve = int(meta["epochs_done"]), meta["curve"]
    state.best = (
        float(meta["best"][0]),
        int(meta["best"][1]),
        NeuronEdit(p.mask, tensors["best_scale"], tensors["best_shift"]),
    )
