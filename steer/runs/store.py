"""A run directory's output store (`RunStore`): `outputs/<direction>.<label>.jsonl`, every record keyed
by the recipe, direction and texts that made it (`_settings_key`), read only when every record
carries the key asked for — so `steer run`, its rerank rungs and tuning reuse finished work under
any label and never mix recipes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from steer.distributed import on_main
from steer.profiling.corpus import corpus_hash
from steer.runs.config import Direction
from steer.runs.records import TransferRecord, read_transfer_records, write_transfer_records
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


def rerank_key(direction: Direction, rungs: Sequence[TransferSettings], settings: Any, probe_sha256: str) -> str:
    """The key of a rerank's outputs: its rungs' keys, its weights (`RerankSettings`) and the probe."""
    blob = json.dumps(
        [[_settings_key(r, direction) for r in rungs], settings.length_weight, settings.style_exponent, probe_sha256]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _read_records(path: Path, key: str) -> list[TransferRecord] | None:
    """The records of an outputs file when every one was made with settings `key`, else None."""
    with path.open(encoding="utf-8") as fh:
        first = fh.readline()
    if not first.strip() or json.loads(first).get("key") != key:
        return None
    records = read_transfer_records(path)
    return records if all(r.key == key for r in records) else None


class RunStore:
    """The outputs of one run directory: find a recipe's records (under any label), write a label's.

    The file name (`<direction>.<label>.jsonl`) is for people; what a reader trusts is the key every
    record carries, so the `tuned` mode that picked the `guided` recipe reads `guided`'s file."""

    def __init__(self, run_dir: str | Path, lm: Any) -> None:
        self.dir, self.lm = Path(run_dir) / "outputs", lm

    def path(self, direction: Direction, label: str) -> Path:
        return self.dir / f"{direction.name}.{label}.jsonl"

    def find(
        self, direction: Direction, settings: TransferSettings, label: str | None = None
    ) -> list[TransferRecord] | None:
        """This recipe's records on the direction's texts, from `label`'s file first, else any other
        of the direction's files; None when none holds them all."""
        key = _settings_key(settings, direction)
        first = [self.path(direction, label)] if label is not None else []
        for candidate in [*first, *sorted(self.dir.glob(f"{direction.name}.*.jsonl"))]:
            records = _read_records(candidate, key) if candidate.is_file() else None
            if records is not None and len(records) == len(direction.texts):
                return records
        return None

    def keep(self, direction: Direction, label: str, settings: TransferSettings, records: list[TransferRecord]) -> None:
        """Make `label`'s file hold these records (found under another label) unless it already does."""
        path = self.path(direction, label)
        if not path.is_file() or _read_records(path, _settings_key(settings, direction)) is None:
            self.write(direction, label, records)

    def record(self, key: str, result: Any, direction: Direction, label: str, **extra: Any) -> TransferRecord:
        """One line of `outputs/<direction>.<label>.jsonl`: the run's own record of a rewrite."""
        return TransferRecord.of(result, direction.source, direction.target, label, self.lm, key=key, **extra)

    def save(self, direction: Direction, label: str, settings: TransferSettings, results: list[Any]) -> None:
        """Write one recipe's rewrites (`TransferResult`s) as `label`'s file, keyed by the recipe."""
        key = _settings_key(settings, direction)
        extra = {"settings": settings.to_dict()}
        self.write(direction, label, [self.record(key, r, direction, label, **extra) for r in results])

    def write(self, direction: Direction, label: str, records: list[TransferRecord]) -> None:
        """Write a label's file atomically (the main process writes; the others wait for it)."""
        path = self.path(direction, label)
        on_main(lambda: write_transfer_records(path, records))
