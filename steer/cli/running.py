"""The options that choose where work runs — `--engine ray` and its values (`RayOptions`), shared by
`steer transfer`, `run` and `tune` — and the run-config options and loading of `steer run`/`tune`."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import click

from steer.cli.app import DEVICE, FINITE, processes_option, relaunched, show_progress
from steer.errors import SteerError


@dataclass(frozen=True)
class RayOptions:
    """--engine and its options, as one value (`ray_options` gathers them)."""

    engine: str = "local"
    address: str | None = None
    workers: int = 1
    gpus_per_worker: float = 0.0
    block_size: int = 256

    @property
    def on(self) -> bool:
        return self.engine == "ray"

    def check(self, processes: int, device: str = "cpu") -> None:
        """The Ray options belong to --engine ray, which runs its own workers instead of --processes."""
        if not self.on and (self.workers != 1 or self.gpus_per_worker or self.address or self.block_size != 256):
            raise SteerError(
                "--workers, --gpus-per-worker, --block-size and --ray-address belong to --engine ray; add it"
            )
        if self.on and processes > 1:
            raise SteerError("--engine ray runs its own workers (--workers N); drop --processes")
        if self.on:  # the numbers are checked where they are used (before any worker or model starts)
            from steer.rewriting.on_ray import EngineOptions

            EngineOptions(**(self.engine_options() or {}))
        if self.gpus_per_worker > 0 and device == "cpu":
            raise SteerError("--gpus-per-worker gives each worker a GPU; add --device cuda so the model runs on it")

    def cluster(self) -> Any:
        """A context in which Ray is up for a whole command (`steer.rewriting.on_ray.cluster`); a no-op locally."""
        if not self.on:
            return contextlib.nullcontext()
        from steer.rewriting.on_ray import cluster

        return cluster(self.address, self.workers)

    def engine_options(self) -> dict[str, Any] | None:
        """`steer.rewriting.on_ray` keyword options, or None to run here."""
        if not self.on:
            return None
        return {
            "workers": self.workers,
            "gpus_per_worker": self.gpus_per_worker,
            "address": self.address,
            "block_size": self.block_size,
        }


def ray_options(note: str) -> Any:
    """--engine ray and its options (`steer transfer`, `steer run`, `steer tune`), handed to the
    command as one `ray: RayOptions` argument."""

    def decorate(fn: Any) -> Any:
        @functools.wraps(fn)
        def command(
            *args: Any,
            engine: str,
            ray_address: str | None,
            workers: int,
            gpus_per_worker: float,
            block_size: int,
            **kwargs: Any,
        ) -> Any:
            return fn(*args, ray=RayOptions(engine, ray_address, workers, gpus_per_worker, block_size), **kwargs)

        cast(Any, command).__click_params__ = list(getattr(fn, "__click_params__", []))  # not shared with fn's
        options = [
            click.option(
                "--engine",
                type=click.Choice(["local", "ray"]),
                default="local",
                show_default=True,
                help=f"ray: decode on Ray Data workers (this machine, or a cluster with --ray-address); {note}. "
                "local: this process (or --processes N on this machine).",
            ),
            click.option(
                "--ray-address", default=None, help="Ray cluster to join (e.g. auto or ray://head:10001); none: local."
            ),
            click.option(
                "--workers",
                type=int,
                default=1,
                show_default=True,
                help="--engine ray: worker actors (one model each).",
            ),
            click.option(
                "--gpus-per-worker", type=FINITE, default=0.0, show_default=True, help="--engine ray: GPUs per worker."
            ),
            click.option(
                "--block-size",
                type=int,
                default=256,
                show_default=True,
                help="--engine ray: texts per block (one shard of output, the unit of retry and resume).",
            ),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def run_options(fn: Any) -> Any:
    options = [
        click.argument("config", type=click.Path(path_type=Path)),
        click.option(
            "-o",
            "--out",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Report directory (default: runs/<config name>).",
        ),
        click.option("--data-dir", default=None, help="Fills {data_dir} in the config's paths."),
        click.option("--limit", type=int, default=None, help="Dev texts per direction (quick runs)."),
        click.option(
            "--modes", default=None, help="Comma-separated modes instead of the config's, e.g. prompt,rerank."
        ),
        click.option("--model", "model_spec", default=None, help="Override the config's model."),
        click.option(
            "--device",
            type=DEVICE,
            default="cpu",
            show_default=True,
            help="torch device of the model, e.g. cuda (each process's GPU).",
        ),
        processes_option("Decode and score"),
        click.option("-q", "--quiet", is_flag=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return ray_options("the decoding passes; scoring stays in this process")(fn)


def runner_for(
    config: Path,
    out_dir: Path | None,
    data_dir: str | None,
    limit: int | None,
    modes: str | None,
    model_spec: str | None,
    device: str,
    processes: int,
    quiet: bool,
    ray: RayOptions | None = None,
    tuning: bool = False,
) -> Any:
    """The config's Runner with its model loaded — or None when the command was run again as
    `processes` processes (the caller then has nothing left to do). `tuning`: the command tunes, so
    the config's metrics must rank tuning's candidates (checked before the model loads)."""
    from steer.lab.artefacts import check_measured_files
    from steer.lab.experiment import load_experiment
    from steer.lab.rundir import RunDir
    from steer.lab.runner import Runner
    from steer.model.loading import load_model

    if limit is not None and limit < 1:
        raise SteerError(f"--limit must be at least 1, got {limit}")
    ray = ray or RayOptions()
    ray.check(processes, device)
    show_progress(quiet)
    chosen = [m.strip() for m in modes.split(",") if m.strip()] if modes else None
    exp = load_experiment(config, data_dir=data_dir, limit=limit, modes=chosen)
    check_measured_files(exp)
    if tuning:
        from steer.lab.tuning import check_tunable

        check_tunable(exp)
    run_dir = RunDir.claim(out_dir or Path("runs") / exp.name)  # a new or empty folder, or a run's own
    if relaunched(processes):
        return None
    lm = load_model(model_spec or exp.model, device=device, progress=not quiet)
    return Runner(exp, run_dir, lm, progress=not quiet, ray=ray.engine_options())
