"""The file of `steer transfer -o FILE`, resumable per batch: `decode_to_file` (this process's share
of the texts, `--resume`, input order restored), `decode_blocks_to_file` for an input read in blocks
(the Ray engine's shards), and `write_output`, all on the partial files of `steer.rewriting.partial`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from steer.distributed import distributed_state, shard_indices
from steer.errors import SteerError
from steer.profiling.corpus import BlockedInput, InputBlock
from steer.rewriting.partial import PartialRecords
from steer.rewriting.records import TransferRecord, write_outputs


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
    `on_resume(done, total)` hears, under `resume`, how many texts an earlier run finished (the CLI
    prints it; 0 when no partial file of this recipe and input was there, so the run starts over).
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
        PartialRecords.remove_empty(output)  # a header alone: a run that failed before its first batch
    if rank == 0 and force and not resume:
        PartialRecords.remove_all(output)
    if state is not None:
        state.wait_for_everyone()
    partial = PartialRecords(output, digest, rank)
    partial.open()  # locked until the output is written
    try:
        done = PartialRecords.read_all(output, digest) if resume else {}
        PartialRecords.check_indices(done, len(items), output)
        if resume and rank == 0 and on_resume is not None:  # 0 done: says that it starts over
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
    PartialRecords.remove_empty(output)  # a header alone: a run that failed before its first block
    if force and not resume:
        PartialRecords.remove_all(output)
    partial = PartialRecords(output, digest)
    partial.open()  # holds the lock (and a header-only FILE.partial) until the output is written
    try:
        done = PartialRecords.finished_blocks(output, digest) if resume else {}
        if resume and on_resume is not None:  # 0 done: says that it starts over
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
