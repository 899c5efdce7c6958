"""Running one steer command as several processes: relaunch it under `accelerate launch`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from steer.config import SteerError


def relaunch_under_accelerate(processes: int, argv: Sequence[str] | None = None) -> None:
    """Run this same `steer profile` command under `accelerate launch` with N processes."""
    import os
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
        raise SteerError(f"the {processes} profiling processes failed (exit code {code}); see the messages above")


def has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available()
