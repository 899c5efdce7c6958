"""Running one steer command as several processes: relaunch it under `accelerate launch`, know which
process this is, and give each process its share of the texts.

`steer profile --processes N` and `steer transfer --processes N` relaunch themselves with
`accelerate launch` (gloo on CPU, NCCL on GPUs); inside, each process takes `shard_indices` of the
inputs — a length-balanced round robin — and the main process assembles the results in input order.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from steer.config import SteerError


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


def relaunch_under_accelerate(processes: int, argv: Sequence[str] | None = None) -> None:
    """Run this same steer command (`argv`, default the current one) under `accelerate launch`
    with N processes, without its `--processes` option."""
    import subprocess

    if processes > (os.cpu_count() or 1) * 4:
        raise SteerError(f"--processes {processes} is far more than this machine's {os.cpu_count()} CPUs")
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
