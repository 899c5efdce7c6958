"""Running one steer command as several processes: relaunch it under `accelerate launch`, know which
process this is, and give each process its share of the texts.

`steer profile|transfer|run|tune|eval --processes N` relaunch themselves with `accelerate launch`
(gloo on CPU, NCCL on GPUs); inside, each process takes `shard_indices` of the inputs — a
length-balanced round robin. `map_sharded` is the one way work is split: each process maps its
share and every process gets all results back in input order; files are written by the main
process alone (`on_main`), and everyone waits for the write so all see the same files next.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from steer.errors import SteerError

T = TypeVar("T")
R = TypeVar("R")


def distributed_state() -> Any:
    """accelerate's process state when launched with several processes (`accelerate launch`), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState

    return PartialState()


def shard_indices(lengths: Sequence[int], index: int, count: int) -> list[int]:
    """Process `index`'s share of `count`: every `count`-th input of the longest-first order.

    Interleaving after sorting by length gives every process the same mix of long and short inputs.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return order[index::count]


def is_main_process() -> bool:
    """True in a one-process run and in process 0 of several."""
    state = distributed_state()
    return state is None or bool(state.is_main_process)


def map_sharded(fn: Callable[[list[T]], list[R]], items: Sequence[T], *, size: Callable[[Any], int] = len) -> list[R]:
    """`fn(items)` computed by every process on its share (`shard_indices` by `size`), gathered in
    input order on every process. In one process it is exactly `fn(list(items))`.

    `fn` maps a list of items to one result per item; every process must call `map_sharded` at the
    same point of the same program (it is a collective).
    """
    state = distributed_state()
    if state is None:
        return fn(list(items)) if items else []
    import torch.distributed as dist

    mine = shard_indices([size(x) for x in items], state.process_index, state.num_processes)
    results = fn([items[i] for i in mine]) if mine else []
    if len(results) != len(mine):
        raise RuntimeError(f"map_sharded: {len(results)} results for {len(mine)} items")
    shares: list[Any] = [None] * state.num_processes
    dist.all_gather_object(shares, (mine, results))
    out: list[Any] = [None] * len(items)
    for indices, values in shares:
        for i, value in zip(indices, values, strict=True):
            out[i] = value
    return out


def on_main(action: Callable[[], T]) -> T | None:
    """Run `action` (a write) in the main process only, then let every process pass only once it is
    done, so the processes see the same files afterwards. Returns the action's result on the main
    process, None elsewhere."""
    state = distributed_state()
    if state is None:
        return action()
    result = action() if state.is_main_process else None
    state.wait_for_everyone()
    return result


def relaunch_under_accelerate(processes: int, argv: Sequence[str] | None = None) -> None:
    """Run this same steer command (`argv`, default the current one) under `accelerate launch`
    with N processes, without its `--processes` option."""
    import subprocess

    if processes > (os.cpu_count() or 1) * 4:
        raise SteerError(f"`processes` {processes} is far more than this machine's {os.cpu_count()} CPUs")
    args = list(sys.argv[1:] if argv is None else argv)
    cleaned, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--processes":
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        cleaned.append(arg)
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // processes)))
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]
    if not has_accelerator():
        command.append("--cpu")
    code = subprocess.call([*command, "-m", "steer", *cleaned], env=env)
    if code != 0:
        raise SteerError(f"the {processes} processes failed (exit code {code}); see the messages above")


def has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available()
