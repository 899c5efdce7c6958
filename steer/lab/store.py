"""Where a run directory keeps its rewrites, resumable per batch (`RunStore`), on the partial files of
`steer.rewriting.partial` (the same mechanism as `steer transfer -o FILE`, `steer.rewriting.output`).

`RunStore` holds `outputs/<direction>.<label>.jsonl`, every record keyed by the recipe, direction and
texts that made it (`_settings_key`) and read only when every record carries the key asked for — so
`steer run`, its rerank rungs and tuning reuse finished work under any label and never mix recipes.
Finished batches wait in partial files until every text is done, so an interrupted run
decodes only what it had not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from steer.distributed import distributed_state, on_main
from steer.errors import SteerError
from steer.lab.experiment import Direction
from steer.lab.rundir import RunDir
from steer.profiling.corpus import corpus_hash
from steer.rewriting.partial import PartialRecords
from steer.rewriting.records import TransferRecord, read_transfer_records, write_transfer_records
from steer.settings import TransferSettings

# The format of the run store's keys: raised whenever a change makes stored rewrites stale (a new
# settings field, decoding that changed under an old one, an edited packaged prompt), so a run
# directory written before is named and refused (`_read_records`) instead of silently reused.
STORE_FORMAT = 2
_KEY_PREFIX = f"s{STORE_FORMAT}-"


def _settings_key(
    settings: TransferSettings, direction: Direction, measured: dict[str, str | None] | None = None
) -> str:
    """The one key of a run store's rewrites: the store format, every settings field, the prompt
    template and reply opening the direction decodes with, the direction and its texts — and, for
    a push or refusal recipe the sha256 of the instruction file it reads, and for a trained recipe the
    trained file's (`measured`: {"instruct": …, "trained": …})."""
    from steer.prompts import prompt_template, reply_opening

    template = prompt_template(direction.source, direction.target, settings)
    opening = reply_opening(direction.source, direction.target, settings)
    blob = json.dumps(
        [STORE_FORMAT, settings.to_dict(), template, opening, direction.source, direction.target,
         corpus_hash(direction.texts)]
        + ([(measured or {}).get("instruct")] if settings.push > 0 or settings.refusal > 0 else [])
        + ([(measured or {}).get("trained")] if settings.mode == "trained" else [])
    )  # fmt: skip
    return _KEY_PREFIX + hashlib.sha256(blob.encode()).hexdigest()[:16]


def rerank_key(
    direction: Direction,
    rungs: Sequence[TransferSettings],
    settings: Any,
    probe_sha256: str,
    measured: dict[str, str | None] | None = None,
) -> str:
    """The key of a rerank's outputs: its rungs' keys, its choice (`RerankSettings.choice_key`) and the probe."""
    keys = [_settings_key(r, direction, measured) for r in rungs]
    blob = json.dumps([keys, *settings.choice_key(), probe_sha256])
    return _KEY_PREFIX + hashlib.sha256(blob.encode()).hexdigest()[:16]


def _read_records(path: Path, key: str) -> list[TransferRecord] | None:
    """The records of an outputs file when every one was made with settings `key`, else None; a
    file an older steer stored (keys of another `STORE_FORMAT`) is refused in one line."""
    with path.open(encoding="utf-8") as fh:
        first = fh.readline()
    found = json.loads(first).get("key") if first.strip() else None
    if isinstance(found, str) and not found.startswith(_KEY_PREFIX):
        raise SteerError(
            f"{path} holds rewrites an older steer stored (another store format than {STORE_FORMAT}); they cannot "
            f"be reused — move the run directory {path.parent.parent} away, or run with another -o"
        )
    if found != key:
        return None
    records = read_transfer_records(path)
    return records if all(r.key == key for r in records) else None


class RunStore:
    """The outputs of one run directory: find a recipe's records (under any label), write a label's.

    The file name (`<direction>.<label>.jsonl`) is for people; what a reader trusts is the key every
    record carries, so the `tuned` mode that picked the `guided` recipe reads `guided`'s file."""

    def __init__(self, run_dir: RunDir, lm: Any, measured: dict[str, str | None] | None = None) -> None:
        """`measured`: the sha256s of the profile's instruction and trained files, {"instruct": …,
        "trained": …} (push and refusal recipes' keys hold the first, trained recipes' the second)."""
        self.run_dir, self.dir, self.lm, self.measured = run_dir, run_dir.path / "outputs", lm, measured

    def path(self, direction: Direction, label: str) -> Path:
        return self.dir / f"{direction.name}.{label}.jsonl"

    def find(
        self, direction: Direction, settings: TransferSettings, label: str | None = None
    ) -> list[TransferRecord] | None:
        """This recipe's records on the direction's texts, from `label`'s file first, else any other
        of the direction's files; None when none holds them all."""
        key = _settings_key(settings, direction, self.measured)
        first = [self.path(direction, label)] if label is not None else []
        for candidate in [*first, *sorted(self.dir.glob(f"{direction.name}.*.jsonl"))]:
            records = _read_records(candidate, key) if candidate.is_file() else None
            if records is not None and len(records) == len(direction.texts):
                return records
        return None

    def keep(self, direction: Direction, label: str, settings: TransferSettings, records: list[TransferRecord]) -> None:
        """Make `label`'s file hold these records (found under another label) unless it already does."""
        path = self.path(direction, label)
        if not path.is_file() or _read_records(path, _settings_key(settings, direction, self.measured)) is None:
            self.write(direction, label, records)

    def record(self, key: str, result: Any, direction: Direction, label: str, **extra: Any) -> TransferRecord:
        """One line of `outputs/<direction>.<label>.jsonl`: the run's own record of a rewrite."""
        return TransferRecord.of(result, direction.source, direction.target, label, self.lm, key=key, **extra)

    def write(self, direction: Direction, label: str, records: list[TransferRecord]) -> None:
        """Write a label's file atomically (the main process writes; the others wait for it)."""
        path = self.path(direction, label)
        on_main(lambda: self.run_dir.write(path, lambda p: write_transfer_records(p, records)))

    def decode(
        self,
        direction: Direction,
        recipes: Sequence[TransferSettings],
        labels: Sequence[str],
        decode: Callable[[list[int], Callable[[int, list[int], list[Any]], None]], list[list[Any]]],
        finish: Callable[[TransferRecord, TransferSettings], Any],
    ) -> list[list[Any]]:
        """Every recipe's rewrites of the direction's texts (result[k][i]), resumable per batch.

        `decode(indices, done)` decodes the texts at `indices` under every recipe (this process's
        share of them) and calls `done(k, indices, results)` as batches finish; each call's records
        are appended to label k's partial file at once, so an interrupted run decodes again only
        the texts no partial file holds. Once every text is done the label files are written whole,
        byte for byte what an uninterrupted run writes, and the partial files removed. A text
        decoded before the interruption comes back as `finish(record, recipe)`."""
        keys = [_settings_key(r, direction, self.measured) for r in recipes]
        paths = [self.path(direction, label) for label in labels]
        self.dir.mkdir(parents=True, exist_ok=True)
        # a partial file of a label made with another recipe (the config changed) is steer's own leftover
        on_main(lambda: [PartialRecords.remove_unless(path, key) for path, key in zip(paths, keys, strict=True)])
        earlier = [PartialRecords.read_all(path, key) for path, key in zip(paths, keys, strict=True)]
        todo = [i for i in range(len(direction.texts)) if any(i not in d for d in earlier)]
        state = distributed_state()
        rank = state.process_index if state is not None else 0
        partials = [PartialRecords(path, key, rank) for path, key in zip(paths, keys, strict=True)]
        try:
            for partial in partials:
                partial.open()  # each locked until its label's file is written

            def done(k: int, indices: list[int], results: list[Any]) -> None:
                extra = {"settings": recipes[k].to_dict()}
                rows = zip(indices, results, strict=True)
                partials[k].append([(i, self.record(keys[k], r, direction, labels[k], **extra)) for i, r in rows])

            fresh = decode(todo, done) if todo else [[] for _ in recipes]
            if state is not None:
                state.wait_for_everyone()
            position, n = {i: j for j, i in enumerate(todo)}, len(direction.texts)
            out = []
            for k, (path, key) in enumerate(zip(paths, keys, strict=True)):
                finished = PartialRecords.read_all(path, key)
                self.write(direction, labels[k], [finished[i] for i in range(n)])
                out.append(
                    [fresh[k][position[i]] if i in position else finish(finished[i], recipes[k]) for i in range(n)]
                )
        finally:
            for partial in partials:
                partial.close()
        on_main(lambda: [PartialRecords.remove_all(path) for path in paths])
        return out
