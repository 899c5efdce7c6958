"""Files that arrive split over several PyPI wheels (the mpnet encoder, the Qwen models): each part
found through its wheel's installed record, the parts joined in part order, the whole checked
against a pinned sha256 before it is renamed into place — nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path

from steer.errors import SteerError

_BLOCK = 1 << 22


def wheel_part(distribution: str, suffix: str, install: str, reinstall: str | None = None) -> Path:
    """The file ending in `suffix` that the installed `distribution` holds; one line naming
    `install` (the command that installs it) when the wheel is missing, `reinstall` (default:
    `install` with `--force-reinstall`) when the wheel lacks the file."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise SteerError(f"{distribution} is not installed; install it with: {install}") from None
    for file in dist.files or []:
        if str(file).endswith(suffix):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise SteerError(
        f"{distribution} holds no {suffix}; reinstall it with: {reinstall or install + ' --force-reinstall'}"
    )


def concatenate(parts: Mapping[int, Path], out: Path) -> str:
    """Write parts 1..n in index order into `out` (whatever order the mapping lists them in) and
    return the sha256 of what was written; a gap in the indices is one line naming the part."""
    expected = list(range(1, len(parts) + 1))
    if sorted(parts) != expected:
        missing = sorted(set(expected) - set(parts)) or sorted(parts)
        raise SteerError(f"part {missing[0]} of {len(parts)} is missing; reinstall the parts")
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for index in expected:
            with parts[index].open("rb") as fh:
                for block in iter(partial(fh.read, _BLOCK), b""):
                    digest.update(block)
                    sink.write(block)
    return digest.hexdigest()


def assemble(parts: Mapping[int, Path], target: Path, sha256: str, *, what: str, fix: str) -> Path:
    """`target`, joined from `parts` once: written into a temporary file beside it, its sha256
    compared with the pinned `sha256`, and only then renamed into place, so a half-written or
    altered copy is never used (a mismatch leaves nothing behind). `fix` says how to repair it."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        got = concatenate(parts, tmp)
        if got != sha256:
            raise SteerError(
                f"{what} assembled from its wheel parts has sha256 {got[:12]}…, not the pinned {sha256[:12]}…; {fix}"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def installed(distributions: Sequence[str]) -> bool:
    """Whether every one of `distributions` is installed (a look-up of their records, no import)."""
    try:
        for name in distributions:
            importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
