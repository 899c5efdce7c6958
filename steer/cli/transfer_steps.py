"""What `steer transfer` does around decoding: the recorded recipe of a --settings file, the styles
checked against the profile and its probe before any model loads, and resumable, sharded decoding
through `FILE.partial` files (`--resume`, `--processes`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from steer.config import SteerError


def _tuned_for(path: Path, source: str, target: str) -> dict[str, Any]:
    """The settings `steer tune` chose for one direction."""
    from steer.records import TuneResult

    return TuneResult.read(path).settings_for(f"{source}-{target}", path)


def _check_styles_before_loading(profile_path: Path, source: str, target: str, reranking: bool) -> None:
    """--from/--to against the profile's styles, and the probe's (under rerank), read from the files
    alone: a typo is reported in a second, not after the model and the encoder have loaded."""
    from steer.probe import StyleProbe, probe_path
    from steer.profile import StyleProfile

    prof = StyleProfile.load(profile_path)
    prof.check_style(source)
    prof.check_style(target)
    if reranking:
        probe = StyleProbe.load(probe_path(profile_path))
        for style in (source, target):
            if style not in probe.styles:
                raise SteerError(
                    f"the probe beside {profile_path} knows styles {', '.join(probe.styles)}, not {style!r}; "
                    f"rebuild it with: steer probe {profile_path} --force"
                )


def _decode_resumably(
    output: Path,
    items: list[str],
    lines: list[str],
    decode: Any,
    key: list[Any],
    resume: bool,
    force: bool,
) -> list[Any] | None:
    """Decode the texts not yet done — this process's share of them — saving each batch's records
    to FILE.partial; the main process then returns every record in input order (helper processes
    return None). `decode(indices, partial, need_blank)` decodes `items[i]` for those indices,
    hands (index, record) pairs to `partial` (`PartialRecords`: `append` per batch here, or
    `write_block` per Ray block) as they finish, and returns a blank line's record when asked."""
    import hashlib
    import json

    from steer.distributed import distributed_state, shard_indices
    from steer.records import PartialRecords

    digest = hashlib.sha256(json.dumps([key, items], ensure_ascii=False).encode()).hexdigest()[:16]
    state = distributed_state()
    rank, count = (state.process_index, state.num_processes) if state is not None else (0, 1)
    if rank == 0 and force and not resume:
        PartialRecords.remove_all(output)
    if state is not None:
        state.wait_for_everyone()
    done = PartialRecords.read_all(output, digest) if resume else {}
    if resume and done and rank == 0:
        click.echo(f"resuming: {len(done)} of {len(items)} texts already done", err=True)
    todo = [i for i in range(len(items)) if i not in done]
    mine = [todo[j] for j in shard_indices([len(items[i]) for i in todo], rank, count)]
    partial = PartialRecords(output, digest, rank)
    partial.open()
    blank = decode(mine, partial, rank == 0 and any(not t for t in lines))
    if state is not None:
        state.wait_for_everyone()
        if not state.is_main_process:
            return None
    finished = PartialRecords.read_all(output, digest)
    missing = [i for i in range(len(items)) if i not in finished]
    if missing:
        raise SteerError(f"{len(missing)} texts have no rewrite in {output}.partial*; run again with --resume")
    ordered = iter(finished[i] for i in range(len(items)))
    return [next(ordered) if t else blank for t in lines]
