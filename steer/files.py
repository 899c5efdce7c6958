"""Atomic file writes: every artefact appears whole or not at all (and the readers every artefact shares:
a file's sha256, read in blocks; the objects of a JSON Lines file, each error naming its line)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from steer.errors import SteerError


@contextmanager
def atomic_path(path: str | Path, *, replace: bool = True) -> Iterator[str]:
    """Yield a temporary path beside `path`; on success it replaces `path`, on error it is removed.

    The final file gets the permissions a plain `open()` would give (mkstemp makes 0600 files).
    `replace=False` creates `path` exclusively (a hard link, then the temporary name goes): a file
    another program made there meanwhile is left as it is and FileExistsError raised — the
    existence check of a command that started without `--force`, made again at the last moment.
    """
    path = Path(path)
    check_writable_kind(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # FileExistsError when `path` appeared; atomic either way
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_writable_kind(path: str | Path, option: str = "-o") -> None:
    """Check an output path before any work: it is not a device, FIFO or socket (steer writes whole
    files by renaming, which would replace it: `-o /dev/null --force` as root), no part of its folder
    is a file, and its folder exists (created here) and is writable — one line naming the path
    otherwise."""
    import stat

    from steer.errors import SteerError

    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:
        raise SteerError(f"{option} {path} cannot be checked ({exc.strerror}); pick another path") from None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = (
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
        )
        raise SteerError(f"{option} {path} is {kind}, not a file; steer writes only regular files: pick a file path")
    folder = path.absolute().parent
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                raise SteerError(f"{option} {path}: {above} is a file, not a folder; pick a path in a folder")
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SteerError(f"{option} {path}: its folder {folder} cannot be created ({exc.strerror})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SteerError(f"{option} {path}: the folder {folder} is not writable; pick a folder you can write to")


def write_text(path: str | Path, text: str) -> None:
    """Write UTF-8 text atomically."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


def read_safetensors(path: Path, what: str, fix: str) -> tuple[str | None, dict[str, Any]]:
    """The `steer` metadata string and the tensors of a safetensors file; never unpickles.

    `what` names the artefact in the error ("profile", "probe") for a file safetensors cannot read,
    `fix` how to make a good one.
    """
    from safetensors import safe_open

    from steer.errors import SteerError

    try:
        with safe_open(str(path), framework="pt") as fh:
            raw = (fh.metadata() or {}).get("steer")
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except FileNotFoundError:
        raise SteerError(f"{path} does not exist; {fix}") from None
    except Exception as exc:  # safetensors raises its own error type for corrupt files
        kind = type(exc).__name__
        raise SteerError(f"{path} is not a readable .safetensors file ({kind}); not a {what}; {fix}") from None
    return raw, tensors


def check_not_an_input(output: str | Path, inputs: dict[str, str | Path | None], option: str = "-o") -> None:
    """Refuse to write `output` when it is one of the files this command reads in the same run —
    with `force` or not: a profile replaced by its own probe, an input replaced by its rewrites.

    `inputs` maps what each input is ("the profile", "-i") to its path (None or "-" are skipped).
    """
    from steer.errors import SteerError

    out = Path(output)
    check_writable_kind(out, option)
    for what, path in inputs.items():
        if path is None or str(path) == "-":
            continue
        source = Path(path)
        same = os.path.samefile(out, source) if out.exists() and source.exists() else out.resolve() == source.resolve()
        if not same and source.resolve().is_relative_to(out.resolve()):
            raise SteerError(
                f"{option} {out} holds {what} ({source}), which this command reads; write to another folder "
                "(--force never replaces a folder holding the command's own input)"
            )
        if same:
            raise SteerError(
                f"{option} {out} is {what}, which this command reads; write to another file (--force never "
                "replaces a command's own input)"
            )
        if source.is_dir() and out.resolve().is_relative_to(source.resolve()):
            raise SteerError(
                f"{option} {out} is inside {what} ({source}), which this command reads; write outside it "
                "(--force never replaces a command's own input)"
            )


def recorded_paths(recorded: str | Path, near: str | Path) -> Iterator[Path]:
    """Where a relative path that a file recorded may be now: as given (from the current folder),
    then from `near`'s folder and each folder above it — the records of `steer transfer` name the
    profile, and a profile its corpora, relative to the folder the command ran in, which need not
    be the folder a later command runs in. Only existing files are yielded; the caller checks each
    against the sha256 it recorded, so a same-named other file is never taken for it."""
    recorded = Path(recorded)
    seen: set[Path] = set()
    folders = [Path.cwd()] if recorded.is_absolute() else [Path.cwd(), *Path(near).absolute().parents]
    for folder in folders:
        candidate = folder / recorded
        if candidate.is_file() and candidate.resolve() not in seen:
            seen.add(candidate.resolve())
            yield candidate


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file, read in 4 MiB blocks (a model file need not fit in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def json_lines(lines: list[str], path: str | Path, remedy: str = "", first_line: int = 1) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSON Lines file: the one parser of records,
    corpora and outputs files. A line that is not valid JSON, or not a JSON object, is one line naming
    the file and the line (`first_line`: the number of `lines[0]`, for a block read on its own), with
    `remedy` after it."""
    fix = f"; {remedy}" if remedy else ""
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SteerError(f"{path}: line {number} is not valid JSON ({exc.msg}){fix}") from None
        if not isinstance(item, dict):
            raise SteerError(f"{path}: line {number} is not a JSON object{fix}")
        yield number, item
