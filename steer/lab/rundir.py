"""A run directory's claim: `steer-run.json` lists every file a run wrote there (with its sha256), so
`steer run`/`tune` write only into a new or empty folder or one of their own, and never over a file they
did not write — a user's own `results.md` in `-o DIR` is refused before any model loads, not replaced."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from steer.errors import SteerError
from steer.files import check_writable_kind, sha256_file, write_text

MARKER = "steer-run.json"
# every name a run writes at the top of its directory; `outputs/` holds the rewrite store's files
LAYOUT = (
    "profile.safetensors",
    "probe.safetensors",
    "results.json",
    "results.md",
    "samples.md",
    "chart.png",
    "tuned.json",
    "outputs",
)


class RunDir:
    """The directory one run writes: claimed (`claim`) before any work, every write recorded (`write`)."""

    def __init__(self, path: Path, written: dict[str, str]) -> None:
        self.path, self._written = path, written

    @classmethod
    def claim(cls, path: str | Path, option: str = "-o") -> RunDir:
        """Check `path` and make it this run's: a new or empty folder gets the marker; a folder with
        the marker is a run's own (its files are checked when written); any other folder that holds a
        name a run writes is refused — one line naming the file and the fix."""
        path = Path(path)
        check_writable_kind(path / MARKER, option)  # a folder (made here), writable, not a file
        resolved = path.resolve()
        cwd = Path.cwd().resolve()
        if resolved == cwd or resolved in cwd.parents:
            raise SteerError(f"{option} {path} is the current directory or above it; name a folder for the run")
        marker = path / MARKER
        if marker.is_symlink() or (marker.exists() and not marker.is_file()):
            raise SteerError(f"{marker} is not a file steer wrote; move it away or pick another {option}")
        if marker.is_file():
            try:
                written = json.loads(marker.read_text(encoding="utf-8"))["files"]
                if not isinstance(written, dict) or not all(isinstance(v, str) for v in written.values()):
                    raise TypeError
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
                raise SteerError(
                    f"{marker} is damaged (not the list of files a run wrote); steer cannot tell its files from "
                    f"yours there: pick another {option}"
                ) from None
            run = cls(path, dict(written))
            store = path / "outputs"
            for file in [*(path / n for n in LAYOUT[:-1]), *(sorted(store.glob("*.jsonl")) if store.is_dir() else [])]:
                run.check(file)  # a file of yours put there since is refused now, before any work
            return run
        present = sorted(name for name in LAYOUT if os.path.lexists(path / name))
        if present:
            raise SteerError(
                f"{option} {path} holds {present[0]}, which no {MARKER} lists as a run's (a folder of yours, or a "
                f"run of an older steer): steer run replaces only its own files; move "
                f"{'them' if len(present) > 1 else 'it'} away or pick another {option}"
            )
        run = cls(path, {})
        run._save()
        return run

    def _name(self, file: Path) -> str:
        return file.relative_to(self.path).as_posix()

    def check(self, file: Path) -> None:
        """Refuse to write `file` when something is there that this run directory did not write
        (or a file it wrote that was changed since): a user's file is never replaced."""
        if not os.path.lexists(file):
            return
        name = self._name(file)
        recorded = self._written.get(name)
        if file.is_symlink() or not file.is_file() or recorded is None or sha256_file(file) != recorded:
            raise SteerError(
                f"{file} is not a file this run wrote (not in {MARKER}, or changed since); steer replaces only "
                f"its own files: move it away and run again, or pick another -o"
            )

    def write(self, file: Path, writer: Callable[[Path], object]) -> None:
        """Write `file` with `writer(file)` unless a file steer did not write is there, and record it."""
        self.check(file)
        writer(file)
        self.wrote(file)

    def wrote(self, file: Path) -> None:
        """Record `file` (written by steer just now) as this run's; a writer that wrote nothing
        (no chart without rows) leaves no record."""
        if file.is_file():
            self._written[self._name(file)] = sha256_file(file)
        else:
            self._written.pop(self._name(file), None)
        self._save()

    def owns(self, file: Path) -> bool:
        """Whether `file` is absent or one this run directory wrote and nobody changed since."""
        try:
            self.check(file)
        except SteerError:
            return False
        return True

    def _save(self) -> None:
        write_text(self.path / MARKER, json.dumps({"files": dict(sorted(self._written.items()))}, indent=1) + "\n")
