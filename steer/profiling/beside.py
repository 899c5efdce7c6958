"""An artefact kept beside a profile (instruction measurements, trained edits): tensors in
safetensors plus the JSON metadata each such file carries — its format and version, steer's
version, the model's fingerprint and the profile's sha256 — written atomically, read without
unpickling anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor

from steer.errors import SteerError
from steer.files import atomic_path, read_safetensors
from steer.version import __version__


def beside_path(profile_path: str | Path, kind: str) -> Path:
    """Where a profile's `kind` file lives: `x.safetensors` → `x.KIND.safetensors`."""
    path = Path(profile_path)
    return path.with_name(f"{path.name.removesuffix('.safetensors')}.{kind}.safetensors")


def pair_key(source: str, target: str) -> str:
    """A direction's key inside a file beside the profile: `"formal->informal"`."""
    return f"{source}->{target}"


def save_beside(
    path: str | Path,
    tensors: dict[str, Tensor],
    kind: tuple[str, int],
    fingerprint: str,
    profile_sha256: str | None,
    meta: dict[str, Any],
) -> Path:
    """Write `tensors` and `meta` under `kind` (format, version) atomically (the caller decides
    whether an existing file may be replaced)."""
    from safetensors.torch import save_file

    record = {
        "format": kind[0],
        "format_version": kind[1],
        "steer_version": __version__,
        "fingerprint": fingerprint,
        "profile_sha256": profile_sha256,
        **meta,
    }
    path = Path(path)
    with atomic_path(path) as tmp:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata={"steer": json.dumps(record)})
    return path


def load_beside(
    path: str | Path, kind: tuple[str, int], what: str, fix: str
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(metadata, tensors) of a file of `kind` (format, newest version read); one line naming `what`
    and `fix` for a file that is not one, or one this version cannot read."""
    path = Path(path)
    raw, tensors = read_safetensors(path, what, fix)
    try:
        meta = json.loads(raw or "")
        if not isinstance(meta, dict) or meta.get("format") != kind[0] or int(meta["format_version"]) > kind[1]:
            raise SteerError(f"{path} is not a {what} this version reads; {fix}")
        str(meta["fingerprint"])
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise SteerError(f"{path}: the {what}'s metadata is incomplete or corrupt ({exc}); {fix}") from None
    return meta, tensors
