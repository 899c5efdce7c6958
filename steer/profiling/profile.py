"""Phase 1: run style corpora through the model, count neuron activations, and keep them as the
profile artefact (`StyleProfile`: one `.safetensors` file, written and read here).

A `StyleProfile` holds, per style, how many real tokens fired each neuron (`fired`) and the
summed activation (`sums`), plus JSON metadata; `StyleProfile.neurons` selects style-specific
neurons from its rates (`steer.profiling.neurons`).

Texts are tokenised once, sorted by length and batched so padding stays small; padding is masked
out of every count, and position ids follow the mask so left and right padding give the same
counts. Only the base model runs (the LM head is not needed to read MLP activations).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from steer.distributed import distributed_state, shard_indices
from steer.errors import SteerError
from steer.files import atomic_path, read_safetensors
from steer.model.hooks import record_activations
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows
from steer.profiling.corpus import Corpus, load_corpus, load_styles, source_file
from steer.profiling.neurons import NeuronSelection, parse_top_k, select_neurons
from steer.settings import ProfileSettings
from steer.version import __version__

logger = logging.getLogger(__name__)

FORMAT = "steer-profile"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class ActivationCounts:
    """How often each neuron fired on one style's real tokens; rates are what get compared."""

    style: str
    fired: Tensor  # int64 [layers, neurons]: real tokens on which act > 0
    sums: Tensor  # float64 [layers, neurons]: summed activation over real tokens
    num_tokens: int
    num_texts: int

    @property
    def rate(self) -> Tensor:
        """Share of real tokens on which each neuron fired (float64)."""
        return self.fired.double() / max(self.num_tokens, 1)

    @property
    def mean(self) -> Tensor:
        """Mean activation per real token (float64)."""
        return self.sums / max(self.num_tokens, 1)

    def __add__(self, other: ActivationCounts) -> ActivationCounts:
        """Merge counts of two shards of the same style."""
        if other.style != self.style or other.fired.shape != self.fired.shape:
            raise SteerError(f"cannot merge counts of {self.style!r} and {other.style!r}")
        return ActivationCounts(
            self.style,
            self.fired + other.fired,
            self.sums + other.sums,
            self.num_tokens + other.num_tokens,
            self.num_texts + other.num_texts,
        )


def direction_key(source: str, target: str) -> str:
    """How a direction is named in a profile's calibration: "formal>informal"."""
    return f"{source}>{target}"


def _calibration(path: Path, raw: Any) -> dict[str, float]:
    """A profile's recorded calibration, checked: positive finite λ per direction key."""
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and math.isfinite(v) and v > 0 for k, v in raw.items()
    ):
        raise SteerError(f"{path}: calibration metadata is corrupt; recalibrate with 'steer calibrate {path} --force'")
    return {k: float(v) for k, v in raw.items()}


def check_direction(source: str, target: str) -> None:
    """A transfer direction needs two different styles (checked before any model work)."""
    if source == target:
        raise SteerError(f"`source` and `target` are both {source!r}; pick two different styles")


@dataclass(frozen=True)
class StyleProfile:
    """Activation counts of several styles on one model: the artefact of `steer profile`."""

    model_id: str
    model_type: str
    fingerprint: str
    num_layers: int
    num_neurons: int
    counts: dict[str, ActivationCounts]
    corpora: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    # per direction ("formal>informal"), the λ that pushes the model's output as hard as the 135M's
    # λ = 1 pushed its own (`steer.generation.calibration`); none: λ is used as given
    calibration: dict[str, float] = field(default_factory=dict)
    steer_version: str = __version__

    @property
    def styles(self) -> list[str]:
        return list(self.counts)

    @property
    def total_neurons(self) -> int:
        return self.num_layers * self.num_neurons

    def check_style(self, style: str) -> None:
        """Raise a one-line error naming the profile's styles if `style` is not one of them."""
        if style not in self.counts:
            raise SteerError(f"style {style!r} is not in this profile; its styles: {', '.join(self.styles)}")

    def unit(self) -> float:
        """The absolute λ of one unit of steering strength: the geometric mean of the calibrated
        directions (1 when uncalibrated), one unit for every direction so a ladder keeps its shape."""
        if not self.calibration:
            return 1.0
        return math.exp(sum(math.log(v) for v in self.calibration.values()) / len(self.calibration))

    def neurons(
        self, source: str, target: str, *, top_k: str | int | float = "1%", method: str = "paper"
    ) -> NeuronSelection:
        """Neurons specific to `source` and to `target` (see the module docstring for methods)."""
        self.check_style(source)
        self.check_style(target)
        check_direction(source, target)
        k = parse_top_k(top_k, self.total_neurons)
        rates = {s: c.rate for s, c in self.counts.items()}
        return select_neurons(rates, source, target, k, method)

    def metadata(self) -> dict[str, Any]:
        """The JSON metadata stored beside the tensors."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "steer_version": self.steer_version,
            "model_id": self.model_id,
            "model_type": self.model_type,
            "fingerprint": self.fingerprint,
            "num_layers": self.num_layers,
            "num_neurons": self.num_neurons,
            "styles": self.styles,
            "num_tokens": {s: c.num_tokens for s, c in self.counts.items()},
            "num_texts": {s: c.num_texts for s, c in self.counts.items()},
            "corpora": self.corpora,
            "settings": self.settings,
            "calibration": self.calibration,
        }

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        """Write tensors + metadata atomically (temp file in the same folder, then rename)."""
        from safetensors.torch import save_file

        path = Path(path)
        if path.exists() and not force:
            raise SteerError(f"{path} exists; pass `force` to overwrite it")
        tensors: dict[str, Tensor] = {}
        for style, c in self.counts.items():
            tensors[f"fired.{style}"] = c.fired.to(torch.int64).contiguous()
            tensors[f"sums.{style}"] = c.sums.to(torch.float64).contiguous()
        with atomic_path(path) as tmp:
            save_file(tensors, tmp, metadata={"steer": json.dumps(self.metadata())})
        return path

    @classmethod
    def load(cls, path: str | Path) -> StyleProfile:
        """Read and validate a profile; never unpickles anything."""
        path = Path(path)
        if path.is_dir():
            raise SteerError(f"profile {path} is a directory; pass the .safetensors file 'steer profile' wrote")
        if not path.is_file():
            raise SteerError(f"profile {path} does not exist; create it with 'steer profile'")
        raw, tensors = read_safetensors(path, "profile", "pass the file 'steer profile' wrote, or make one with it")
        return cls._from_parts(path, raw, tensors)

    @classmethod
    def _from_parts(cls, path: Path, raw: str | None, tensors: dict[str, Tensor]) -> StyleProfile:
        foreign = f"{path} is not a steer profile (no steer metadata); create one with 'steer profile'"
        if raw is None:
            raise SteerError(foreign)
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError:
            raise SteerError(f"{path} has corrupt steer metadata") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise SteerError(foreign)
        version = meta.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise SteerError(
                f"{path} has profile format {version}, newer than this steer ({__version__}) reads "
                f"(format {FORMAT_VERSION}); upgrade steer"
            )
        try:
            layers, neurons = int(meta["num_layers"]), int(meta["num_neurons"])
            counts = {}
            for style in meta["styles"]:
                fired, sums = tensors[f"fired.{style}"], tensors[f"sums.{style}"]
                if fired.shape != (layers, neurons) or sums.shape != (layers, neurons):
                    raise SteerError(f"{path}: tensors of style {style!r} are not {layers}×{neurons}")
                if fired.dtype != torch.int64 or sums.dtype != torch.float64:
                    raise SteerError(f"{path}: tensors of style {style!r} have the wrong dtype")
                num_tokens, num_texts = int(meta["num_tokens"][style]), int(meta["num_texts"][style])
                if num_tokens < 0 or num_texts < 0 or bool((fired < 0).any()) or bool((fired > num_tokens).any()):
                    raise SteerError(
                        f"{path}: counts of style {style!r} are impossible (negative, or more firings than its "
                        f"{num_tokens} tokens); the profile is corrupt, recreate it with 'steer profile'"
                    )
                if not bool(torch.isfinite(sums).all()):
                    raise SteerError(f"{path}: activation sums of style {style!r} are not finite; recreate the profile")
                counts[style] = ActivationCounts(style, fired, sums, num_tokens, num_texts)
            return cls(
                model_id=str(meta["model_id"]),
                model_type=str(meta["model_type"]),
                fingerprint=str(meta["fingerprint"]),
                num_layers=layers,
                num_neurons=neurons,
                counts=counts,
                corpora=dict(meta.get("corpora", {})),
                settings=dict(meta.get("settings", {})),
                calibration=_calibration(path, meta.get("calibration", {})),
                steer_version=str(meta.get("steer_version", "?")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SteerError(f"{path}: steer metadata is incomplete or corrupt (missing {exc})") from None

    def check_model(self, model_type: str, num_layers: int, num_neurons: int, fingerprint: str, model_id: str) -> None:
        """Refuse a model other than the one profiled, naming both."""
        if (model_type, num_layers, num_neurons, fingerprint) != (
            self.model_type,
            self.num_layers,
            self.num_neurons,
            self.fingerprint,
        ):
            raise SteerError(
                f"the profile was made for {self.model_id} ({self.model_type} {self.num_layers}×{self.num_neurons}, "
                f"fingerprint {self.fingerprint}), but the model is {model_id} ({model_type} "
                f"{num_layers}×{num_neurons}, fingerprint {fingerprint}); profile this model first or pass the "
                "matching `model`"
            )


@dataclass(frozen=True)
class Batch:
    """One padded batch: token ids, attention mask and matching position ids."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor


def tokenize(tokenizer: object, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], int]:
    """Token ids per text, cut to `max_length`; also how many texts were cut."""
    encoded = tokenizer(list(texts), add_special_tokens=True)["input_ids"]  # type: ignore[operator]
    truncated = sum(len(ids) > max_length for ids in encoded)
    return [ids[:max_length] for ids in encoded], truncated


def make_batches(
    sequences: Sequence[Sequence[int]], batch_size: int, pad_id: int, padding_side: str = "right"
) -> list[Batch]:
    """Length-sorted (longest first) padded batches; empty sequences are dropped."""
    order = sorted((i for i, s in enumerate(sequences) if len(s) > 0), key=lambda i: -len(sequences[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        ids, mask = pad_rows([sequences[i] for i in order[start : start + batch_size]], pad_id, padding_side)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        batches.append(Batch(ids, mask, positions))
    return batches


def count_activations(
    lm: LoadedModel,
    style: str,
    texts: Sequence[str],
    settings: ProfileSettings = ProfileSettings(),
    *,
    progress: bool = False,
) -> tuple[ActivationCounts, int]:
    """Count firing neurons of one style's texts; returns the counts and how many texts were cut."""
    from tqdm.auto import tqdm

    sequences, truncated = tokenize(lm.tokenizer, texts, settings.max_length)
    batches = make_batches(sequences, settings.batch_size, lm.tokenizer.pad_token_id, settings.padding_side)
    total = sum(len(s) for s in sequences)
    if total == 0 and texts:
        raise SteerError(f"style {style!r} has zero tokens after tokenisation; check the corpus")
    root = lm.model.base_model
    device = lm.device
    bar = tqdm(
        total=total, unit="tok", unit_scale=True, desc=f"profiling {style}", disable=not progress, file=sys.stderr
    )
    with record_activations(root, lm.activation_sites()) as recorder, torch.inference_mode(), bar:
        for batch in batches:
            root(
                input_ids=batch.input_ids.to(device),
                attention_mask=batch.attention_mask.to(device),
                position_ids=batch.position_ids.to(device),
                use_cache=False,
            )
            bar.update(int(batch.attention_mask.sum()))
    if batches:
        fired, sums = recorder.result()
    else:  # an empty shard of a multi-process run contributes nothing
        fired = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.int64)
        sums = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.float64)
    return ActivationCounts(style, fired, sums, recorder.num_tokens, len(texts)), truncated


def shard(texts: Sequence[str], index: int, count: int) -> list[str]:
    """This process's share of the texts: every `count`-th text of the length-sorted corpus.

    Interleaving after sorting gives every process the same mix of long and short texts.
    """
    return [texts[i] for i in shard_indices([len(t) for t in texts], index, count)]


def _sum_across_processes(counts: ActivationCounts, truncated: int, state: Any) -> tuple[ActivationCounts, int]:
    """Sum shard counts with accelerate's collective ops; every process gets the totals."""
    from accelerate.utils import reduce

    device = state.device
    scalars = torch.tensor([counts.num_tokens, counts.num_texts, truncated], dtype=torch.int64, device=device)
    fired = reduce(counts.fired.to(device), reduction="sum").cpu()
    sums = reduce(counts.sums.to(device), reduction="sum").cpu()
    tokens, texts, cut = reduce(scalars, reduction="sum").tolist()
    return ActivationCounts(counts.style, fired, sums, int(tokens), int(texts)), int(cut)


def profile_styles(
    lm: LoadedModel,
    corpora: Sequence[Corpus],
    settings: ProfileSettings = ProfileSettings(),
    *,
    progress: bool = False,
) -> StyleProfile:
    """Profile every style corpus on one model into a `StyleProfile`.

    Under `accelerate launch` with several processes each process counts its shard of every
    corpus and the counts are summed, so the profile equals a single-process run's.
    """
    state = distributed_state()
    counts: dict[str, ActivationCounts] = {}
    corpora_meta = {}
    for corpus in corpora:
        texts = corpus.texts if state is None else shard(corpus.texts, state.process_index, state.num_processes)
        show = progress and (state is None or state.is_main_process)
        counts[corpus.name], truncated = count_activations(lm, corpus.name, texts, settings, progress=show)
        if state is not None:
            counts[corpus.name], truncated = _sum_across_processes(counts[corpus.name], truncated, state)
        if truncated and (state is None or state.is_main_process):  # a warning, shown also without progress bars
            logger.warning(
                "%d of %d %s texts were longer than %d tokens and were truncated (max_length)",
                truncated,
                len(corpus.texts),
                corpus.name,
                settings.max_length,
            )
        corpora_meta[corpus.name] = {
            "source": corpus.source,
            "sha256": corpus.sha256,
            "texts": len(corpus.texts),
            "truncated": truncated,
            "duplicates_removed": corpus.duplicates_removed,
        }
    return StyleProfile(
        model_id=lm.model_id,
        model_type=lm.model_type,
        fingerprint=lm.fingerprint,
        num_layers=lm.num_layers,
        num_neurons=lm.num_neurons,
        counts=counts,
        corpora=corpora_meta,
        settings={**settings.to_dict(), "activation": lm.arch.activation},
    )


def style_corpora(
    train_styles: Sequence[str], profile: Any, loaded: StyleProfile | None = None
) -> dict[str, tuple[str, ...]]:
    """Texts per style: from --train-style specs, else from the corpora a profile records (each
    checked against the sha256 it was profiled with) — what the judges and the probe train on.
    `loaded`: the profile at the path `profile`, already read (it is not read again)."""
    if train_styles:
        return {c.name: c.texts for c in load_styles(train_styles)}
    if not profile:
        raise SteerError("accuracy needs classifier corpora: pass `train_styles` NAME=SOURCE (twice) or `profile`")
    prof = loaded if loaded is not None else StyleProfile.load(profile)
    corpora = {}
    for style, meta in prof.corpora.items():
        source = meta.get("source")
        if source in (None, "-"):
            raise SteerError(f"the profile's {style!r} corpus came from stdin; pass `train_styles` NAME=SOURCE")
        limit = meta.get("texts") if isinstance(meta.get("texts"), int) else None
        corpus = _recorded_corpus(style, source, meta, limit, Path(profile))
        corpora[style] = corpus.texts
    return corpora


def _recorded_corpus(style: str, source: str, meta: dict[str, Any], limit: int | None, profile: Path) -> Corpus:
    """The corpus a profile recorded, found where its recorded sha256 matches: the recorded
    (relative) path from the current folder, else from the profile's folder or one above it
    (`recorded_paths`: a profile made in one folder is read from another)."""
    from steer.files import recorded_paths

    file = source_file(source)
    dedupe = bool(meta.get("duplicates_removed"))
    if file is None:
        corpus = load_corpus(style, source, limit=limit, dedupe=dedupe)
        if meta.get("sha256") and corpus.sha256 != meta["sha256"]:
            raise SteerError(
                f"the profile's recorded {style!r} corpus {source} is not the one it was profiled on (sha256 "
                f"differs); pass `train_styles` {style}=SOURCE with the texts it was made from"
            )
        return corpus
    found = list(recorded_paths(file, profile))
    if not found:
        raise SteerError(
            f"the profile's recorded {style!r} corpus {source} does not exist from {Path.cwd()} or the profile's "
            f"folder; pass `train_styles` {style}=SOURCE for each style"
        )
    for candidate in found:
        spec = str(candidate) + source[len(file) :]  # keep a `:column` selector
        corpus = load_corpus(style, spec, limit=limit, dedupe=dedupe)
        if not meta.get("sha256") or corpus.sha256 == meta["sha256"]:
            return corpus
    raise SteerError(
        f"the profile's recorded {style!r} corpus {source} is not the file it was profiled on (sha256 "
        f"differs); pass `train_styles` {style}=SOURCE with the texts it was made from"
    )
