"""A run directory's output cache: the key that says which recipe, direction and texts made an
outputs file (`_settings_key`), and reading an outputs file only when every record carries that key
— so `steer run` reuses finished work and never mixes recipes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from steer.corpus import corpus_hash
from steer.records import TransferRecord, read_transfer_records
from steer.runconfig import Direction
from steer.settings import TransferSettings

# Options added after the first release, left out of the key while off so older outputs stay reusable.
_LATER_OPTIONS: dict[str, Any] = {
    "guidance": 0.0,
    "edit_layers": None,
    "no_repeat_ngram": 0,
    "opening": None,
    "echo_guard": False,
    "examples": 0,  # few-shot examples come from the run's training texts, which the profile is keyed on
}


def _settings_key(settings: TransferSettings, direction: Direction) -> str:
    from steer.prompts import reply_opening

    fields = {k: v for k, v in settings.to_dict().items() if _LATER_OPTIONS.get(k, object()) != v}
    opening = reply_opening(direction.source, direction.target, settings)
    if opening:  # a primed reply is another recipe (the packaged opening is not a settings field)
        fields["opening"] = opening
    blob = json.dumps([fields, direction.source, direction.target, corpus_hash(direction.texts)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _read_records(path: Path, key: str) -> list[TransferRecord] | None:
    """The records of an outputs file when every one was made with settings `key`, else None."""
    with path.open(encoding="utf-8") as fh:
        first = fh.readline()
    if not first.strip() or json.loads(first).get("key") != key:
        return None
    records = read_transfer_records(path)
    return records if all(r.key == key for r in records) else None
