"""The recipe a blind read chose per direction, kept beside its profile: the default that reading decides.

Why: a steered recipe that reads worse than the plain prompt is not a default. When a profile's
directions have been read blind (../shared/rating-protocol.md; `research/scripts/blind_read.py decide`), the
verdict is written to `<profile>.defaults.json` — per direction the preset (`prompt` or `rerank`),
the read it came from, and its counts — and `steer transfer` without a recipe option uses it. A
direction the read did not cover keeps the usual default (rerank when a probe exists). The file
names the sha256 of the profile it was read with: a rebuilt profile's read no longer applies.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import atomic_path, sha256_file

FORMAT = "steer-read-defaults/1"
READ_PRESETS = ("prompt", "rerank")


def defaults_path(profile_path: str | Path) -> Path:
    """`X.safetensors` → `X.defaults.json`."""
    path = Path(profile_path)
    return path.with_name(path.name.removesuffix(".safetensors") + ".defaults.json")


def write_read_defaults(profile_path: str | Path, directions: dict[str, dict[str, Any]], *, force: bool) -> Path:
    """Record each direction's read-decided preset (and its evidence) beside the profile."""
    out = defaults_path(profile_path)
    if os.path.lexists(out) and not force:
        raise SteerError(f"{out} exists; pass --force to replace it with this read's defaults")
    for direction, choice in directions.items():
        if direction.count("->") != 1:
            raise SteerError(f"direction {direction!r} is not SOURCE->TARGET (e.g. formal->informal)")
        if choice.get("preset") not in READ_PRESETS:
            raise SteerError(f"{direction}: preset {choice.get('preset')!r}; a read chooses one of {READ_PRESETS}")
    record = {"format": FORMAT, "profile_sha256": sha256_file(Path(profile_path)), "directions": directions}
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return out


def restamp_read_defaults(profile_path: str | Path, old_sha256: str) -> bool | None:
    """After `steer calibrate` rewrote a profile: the read defaults beside it, when they were read
    on the old file and choose only the plain prompt (which no calibration changes), now name the
    new file (True). False when a direction's read chose a steering recipe, whose strengths the new
    calibration changes: the read no longer applies and the file is left as it is. None: no file."""
    path = defaults_path(profile_path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        directions, recorded = dict(record["directions"]), record["profile_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if recorded != old_sha256 or any(e.get("preset") != "prompt" for e in directions.values()):
        return False
    write_read_defaults(profile_path, directions, force=True)
    return True


def read_default(
    profile_path: str | Path, source: str, target: str, *, sha256: str | None = None
) -> tuple[str, dict[str, Any]] | None:
    """(preset, the read's entry) for this direction when a read of this very profile chose one, else None.
    `sha256`: the profile file's, when the caller has it already (it is not computed again)."""
    path = defaults_path(profile_path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        entry = record["directions"].get(f"{source}->{target}")
        recorded_sha = record["profile_sha256"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise SteerError(f"{path} is damaged (not a steer read-defaults file); remove it or rewrite it") from None
    if record.get("format") != FORMAT:
        raise SteerError(f"{path} has format {record.get('format')!r}, not {FORMAT}; rewrite it with this steer")
    if entry is None or recorded_sha != (sha256 or sha256_file(Path(profile_path))):
        return None
    preset = entry.get("preset") if isinstance(entry, dict) else None
    if preset not in READ_PRESETS:
        raise SteerError(f"{path}: {source}->{target} has preset {preset!r}; a read chooses one of {READ_PRESETS}")
    return preset, entry
