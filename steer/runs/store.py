"""Where rewrites are kept, resumable per batch: a run directory's store (`RunStore`) and the file of
`steer transfer -o` (`decode_to_file`; `decode_blocks_to_file` for an input read in blocks), all
on the partial files of `steer.runs.partial`.

`RunStore` holds `outputs/<direction>.<label>.jsonl`, every record keyed by the recipe, direction and
texts that made it (`_settings_key`) and read only when every record carries the key asked for — so
`steer run`, its rerank rungs and tuning reuse finished work under any label and never mix recipes.
In both, finished batches wait in partial files until every text is done, so an interrupted run
decodes only what it had not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from steer.config import SteerError
from steer.distributed import distributed_state, on_main, shard_indices
from steer.profiling.corpus import BlockedInput, InputBlock, corpus_hash
from steer.runs.config import Direction
from steer.runs.partial import PartialRecords
from steer.runs.records import TransferRecord, read_transfer_records, write_outputs, write_transfer_records
from steer.settings import TransferSettings

# Options added after the first release, left out of the key while off so older outputs stay reusable.
_LATER_OPTIONS: dict[str, Any] = {
    "guidance": 0.0,
    "edit_layers": None,
    "no_repeat_ngram": 0,
    "opening": None,
    "echo_guard": False,
    "examples": 0,  # few-shot examples come from the run's training texts, which the profile is keyed on
    "keep_words": 0.0,
}
# Fields whose decoding changed after outputs were written with them, while on: the revision joins
# the key, so a run directory decodes again instead of reusing outputs the code no longer makes.
_REVISED: dict[str, str] = {
    # "word": a word said in one spelling retires all its spellings (was: per token); "faithfulness":
    # and a content word is what the faithfulness rules call one (was: any non-stop word, "n't" included);
    # "completion": and a spelling the reply has begun gets β on its next token (was: first tokens only);
    # "markers": and the source style's marker words are not favoured (was: every content word);
    # "penalty": and the source's own markers are lowered by β (was: left alone)
    "keep_words": "penalty",
}


# sha256 (first 16 hex digits) of the packaged prompt templates as outputs were first stored with them;
# a packaged template edited since joins the key (`_settings_key`), so its old outputs are not reused.
_STORED_TEMPLATES = frozenset(
    {
        "c8edc52417f856f1", "06414f0e1219a966", "4ddedfdbf125e88a", "36cec73243fef8b9", "f9e0c4fb0f6ab898",
        "4fd3d4bbeab9a2d8", "66c2bf58b4cc3c41", "eda528475b18e166", "fc1e24cae46770fc", "30b4ee0732dfebeb",
        "6499d297e6831b5d", "98e9fbedc58e55bc",
    }
)  # fmt: skip


def _settings_key(settings: TransferSettings, direction: Direction) -> str:
    from steer.prompts import prompt_template, reply_opening

    fields = {k: v for k, v in settings.to_dict().items() if _LATER_OPTIONS.get(k, object()) != v}
    fields.update({f"{k}_revision": v for k, v in _REVISED.items() if fields.get(k, _LATER_OPTIONS.get(k))})
    if settings.prompt is None:  # a packaged template (a custom one is in the settings already)
        template = prompt_template(direction.source, direction.target, settings)
        if hashlib.sha256(template.encode()).hexdigest()[:16] not in _STORED_TEMPLATES:
            fields["template"] = template
    opening = reply_opening(direction.source, direction.target, settings)
    if opening:  # a primed reply is another recipe (the packaged opening is not a settings field)
        fields["opening"] = opening
    blob = json.dumps([fields, direction.source, direction.target, corpus_hash(direction.texts)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def rerank_key(direction: Direction, rungs: Sequence[TransferSettings], settings: Any, probe_sha256: str) -> str:
    """The key of a rerank's outputs: its rungs' keys, its choice (`RerankSettings.choice_key`) and the probe."""
    blob = json.dumps([[_settings_key(r, direction) for r in rungs], *settings.choice_key(), probe_sha256])
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

    def write(self, direction: Direction, label: str, records: list[TransferRecord]) -> None:
        """Write a label's file atomically (the main process writes; the others wait for it)."""
        path = self.path(direction, label)
        on_main(lambda: write_transfer_records(path, records))

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
        keys = [_settings_key(r, direction) for r in recipes]
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


def decode_to_file(
    output: Path,
    items: list[str],
    lines: list[str],
    decode: Any,
    key: list[Any],
    resume: bool,
    force: bool,
    on_resume: Callable[[int, int], None] | None = None,
    batch_size: int | None = None,
) -> list[Any] | None:
    """Decode the texts not yet done — this process's share of them — saving each batch's records
    to FILE.partial; the main process then returns every record in input order (helper processes
    return None). `decode(indices, partial, need_blank)` decodes `items[i]` for those indices,
    hands (index, record) pairs to `partial` (`PartialRecords`: `append` per batch here, or
    `write_block` per Ray block) as they finish, and returns a blank line's record when asked.
    `on_resume(done, total)` hears how many texts an earlier run finished (the CLI prints it).
    `batch_size`, the run's own, is what every record's settings say, those an interrupted run
    decoded at another batch size included (no output depends on it, and the key leaves it out):
    a resumed file is the file an uninterrupted run at this batch size writes.

    The output store of `steer transfer -o FILE`, as `RunStore` is a run directory's: the same
    partial files, keyed by the recipe, the inputs, the model and the profile (`key`)."""
    digest = hashlib.sha256(json.dumps([key, items], ensure_ascii=False).encode()).hexdigest()[:16]
    state = distributed_state()
    rank, count = (state.process_index, state.num_processes) if state is not None else (0, 1)
    if rank == 0:
        PartialRecords.check_free(output)  # another run writing this -o now: refused before anything is removed
    if rank == 0 and force and not resume:
        PartialRecords.remove_all(output)
    if state is not None:
        state.wait_for_everyone()
    partial = PartialRecords(output, digest, rank)
    partial.open()  # locked until the output is written
    try:
        done = PartialRecords.read_all(output, digest) if resume else {}
        PartialRecords.check_indices(done, len(items), output)
        if resume and done and rank == 0 and on_resume is not None:
            on_resume(len(done), len(items))
        todo = [i for i in range(len(items)) if i not in done]
        mine = [todo[j] for j in shard_indices([len(items[i]) for i in todo], rank, count)]
        blank = decode(mine, partial, rank == 0 and any(not t for t in lines))
        if state is not None:
            state.wait_for_everyone()
            if not state.is_main_process:
                return None
        finished = PartialRecords.read_all(output, digest)
    finally:
        partial.close()
    missing = [i for i in range(len(items)) if i not in finished]
    if missing:
        raise SteerError(f"{len(missing)} texts have no rewrite in {output}.partial*; run again with `resume`")
    ordered = iter(_stamped(finished[i], batch_size) for i in range(len(items)))
    return [next(ordered) if t else blank for t in lines]


def _stamped(record: TransferRecord, batch_size: int | None) -> TransferRecord:
    """`record` with `batch_size` in its settings (as it is when it has none or no size is given)."""
    from dataclasses import replace

    if batch_size is None or not record.settings or record.settings.get("batch_size") in (None, batch_size):
        return record
    return replace(record, settings={**record.settings, "batch_size": batch_size})


def decode_blocks_to_file(
    output: Path,
    blocked: BlockedInput,
    decode: Callable[[list[InputBlock], Callable[[list[tuple[int, TransferRecord]]], None]], None],
    key: list[Any],
    resume: bool,
    force: bool,
    on_resume: Callable[[int, int], None] | None = None,
    batch_size: int | None = None,
) -> int:
    """`decode_to_file` for an input read in blocks (`BlockedInput`, the Ray engine's streamed
    read): `decode(blocks, write_block)` decodes the blocks not yet done and hands each finished
    block's (line index, record) pairs to `write_block` (a shard of its own); then FILE is written
    from the shards in input order, one shard at a time, so neither the texts nor the records of
    the whole input are ever held. Returns the number of records written (one per input line).
    The key is the recipe `key`, the input's sha256 and its blocks: a resume needs the same file
    and the same --block-size."""
    where = [key, "blocks", blocked.sha256, [(b.first, b.count) for b in blocked.blocks]]
    digest = hashlib.sha256(json.dumps(where, ensure_ascii=False).encode()).hexdigest()[:16]
    PartialRecords.check_free(output)
    if force and not resume:
        PartialRecords.remove_all(output)
    partial = PartialRecords(output, digest)
    partial.open()  # holds the lock (and a header-only FILE.partial) until the output is written
    try:
        done = PartialRecords.finished_blocks(output, digest) if resume else {}
        if done and on_resume is not None:
            on_resume(sum(done.values()), blocked.lines)
        todo = [b for b in blocked.blocks if done.get(b.first) != b.count]
        decode(todo, partial.write_block)
    finally:
        partial.close()
    finished = PartialRecords.finished_blocks(output, digest)
    missing = [b for b in blocked.blocks if finished.get(b.first) != b.count]
    if missing:
        raise SteerError(f"{len(missing)} blocks have no rewrites in {output}.partial*; run again with `resume`")
    records = (_stamped(r, batch_size) for b in blocked.blocks for r in PartialRecords.block_records(output, b.first))
    return write_output(output, records, force)


def write_output(output: Path, records: Iterable[TransferRecord], force: bool) -> int:
    """-o FILE from a finished run's records (`write_outputs`). Without `force` FILE is created
    exclusively: a file another program made there during the run is left as it is, and so are
    the partial files, so nothing decoded is lost and `resume` finishes once it is moved away."""
    try:
        return write_outputs(output, records, replace=force)
    except FileExistsError:
        raise SteerError(
            f"{output} appeared while this run was writing it (another program made it) and was left as it is; "
            f"the rewrites are kept in {output.name}.partial*: move {output.name} away and run again with "
            "--resume, or add --force"
        ) from None
