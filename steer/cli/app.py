"""The `steer` command group: one line for a user's mistake (exit 1), Ctrl-C and SIGTERM (exit 130),
the library's log on stderr, and the option groups several commands share."""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from steer.config import SteerError
from steer.models import DEFAULT_MODEL, DTYPES
from steer.version import __version__


class SteerGroup(click.Group):
    """A click group that turns `SteerError` into one line on stderr and exit code 1, naming the
    command's options where the library's message names parameters."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SteerError as exc:
            command = self.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None
            click.echo(f"steer: error: {as_options(str(exc), command)}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("steer: interrupted", err=True)
            ctx.exit(130)


class FiniteFloat(click.ParamType):
    """A float option that refuses nan and ±inf (click's FLOAT takes them, and a NaN weight makes
    every score NaN without a word)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        import math

        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


FINITE = FiniteFloat()


class ProfilePath(click.ParamType):
    """A profile file, or `hf:OWNER/NAME[@REVISION]`: a profile pushed with `steer push`, downloaded
    and checked against its card's sha256s (`steer.hub.resolve_profile`)."""

    name = "profile"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        from steer.hub import is_hub_spec, resolve_profile

        if isinstance(value, Path) or not is_hub_spec(value):
            return Path(value)
        return resolve_profile(value)


PROFILE = ProfilePath()


# Library parameter → the CLI parameter that sets it, where their names differ.
_PARAMETER_OF = {
    "kind": "classifier",
    "references": "refs",
    "activation_path": "mlp_activation_path",
    "profile": "profile_path",
    "model": "model_spec",
}


def as_options(message: str, command: click.Command | None) -> str:
    """A library message with each `parameter` shown as `command`'s option for it (`top_k` →
    --top-k); a parameter the command has no option for (a config key) is shown as its name."""
    import re

    flags = {}
    for param in command.params if command is not None else []:
        long = [o for o in param.opts if o.startswith("--")]
        if isinstance(param, click.Option) and long and param.name:
            flags[param.name] = long[0]

    def flag(match: re.Match[str]) -> str:
        name = match.group(1)
        return flags.get(name) or flags.get(_PARAMETER_OF.get(name, "")) or name

    return re.sub(r"`([A-Za-z_]+)`", flag, message)


def model_options(fn: Any) -> Any:
    options = [
        click.option(
            "--model",
            "model_spec",
            default=DEFAULT_MODEL,
            show_default=True,
            help="Embedded alias, Hugging Face id, local directory or .gguf file.",
        ),
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True),
        click.option("--device", default="cpu", show_default=True, help="torch device, e.g. cpu or cuda:0."),
        click.option(
            "--mlp-activation-path",
            default=None,
            help="Module whose output is the gated MLP activation, e.g. 'model.layers.{layer}.mlp.act_fn'; "
            "needed only for architectures steer does not know.",
        ),
        click.option("--trust-remote-code", is_flag=True, help="Allow the model repository's own Python code."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.group(cls=SteerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="steer")
def cli() -> None:
    """Rewrite text from one style to another by steering a language model's own neurons."""
    _show_library_warnings()


class _EchoWarnings(logging.Handler):
    """The library's log on the current stderr: warnings as 'steer: warning: …' (also under -q),
    progress messages (INFO) as they are, shown only while the library's level allows them."""

    def emit(self, record: logging.LogRecord) -> None:
        prefix = "steer: warning: " if record.levelno >= logging.WARNING else ""
        ctx = click.get_current_context(silent=True)
        message = as_options(record.getMessage(), ctx.command if ctx is not None else None)
        click.echo(f"{prefix}{message}", err=True)


def _show_library_warnings() -> None:
    library = logging.getLogger("steer")
    if not any(isinstance(h, _EchoWarnings) for h in library.handlers):
        library.addHandler(_EchoWarnings(logging.INFO))
        library.propagate = False
    library.setLevel(logging.WARNING)  # each command raises it to INFO when it shows progress


def show_progress(quiet: bool) -> None:
    """Progress messages of the library (INFO) unless -q — and only from the main one of several
    processes; warnings are shown either way."""
    from steer.distributed import is_main_process

    quiet = quiet or not is_main_process()
    logging.getLogger("steer").setLevel(logging.WARNING if quiet else logging.INFO)
    if quiet:  # the command is the application: it may switch transformers' bars off for its run
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def processes_option(what: str) -> Any:
    """`--processes N`: the same command run as N processes under `accelerate launch`."""
    return click.option(
        "--processes",
        type=int,
        default=1,
        show_default=True,
        help=f"{what} over N processes (accelerate launch: gloo on CPU, NCCL on GPUs).",
    )


def relaunched(processes: int) -> bool:
    """Check `--processes`; for N > 1 run this same command as N processes and return True (the
    caller is done), for 1 return False. Call it after the options are checked, before any model loads."""
    from steer.distributed import relaunch_under_accelerate

    if processes < 1:
        raise SteerError(f"--processes must be at least 1, got {processes}")
    if processes == 1:
        return False
    relaunch_under_accelerate(processes)
    return True


def steering_options(fn: Any) -> Any:
    """Options shared by `transfer` and `export`: the profile, the direction and the model (the
    recipe's own options come from `recipe_options`)."""
    options = [
        click.option(
            "-p",
            "--profile",
            "profile_path",
            type=PROFILE,
            required=True,
            help="Profile from 'steer profile', or hf:OWNER/NAME[@REV] for one pushed with 'steer push'.",
        ),
        click.option("--from", "source", required=True, help="Style of the input texts (a style in the profile)."),
        click.option("--to", "target", required=True, help="Style to rewrite into (a style in the profile)."),
        click.option(
            "--model",
            "model_spec",
            default=None,
            help="Model to load instead of the profile's (its fingerprint must match).",
        ),
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True),
        click.option("--device", default="cpu", show_default=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _shown(value: Any) -> str:
    """A field default as `--help` shows it: on/off, none, or the value."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# The edit's fields: what `steer export` can bake into weights (and all a recipe needs to pick neurons).
EDIT_FIELDS = ("mode", "top_k", "method", "amplify_factor", "strength", "edit_layers")


def recipe_options(names: tuple[str, ...] | None = None, settings_class: Any = None) -> Any:
    """click options for `TransferSettings` fields, generated from the fields themselves: `--top-k`
    for `top_k`, the field's help, its type (the choices of a `Literal`, finite floats, `--x/--no-x`
    for a boolean) and no default of the option's own — an option not given is None, and the
    recipe resolver fills it from the preset, the recorded recipe or the field's default. So a new
    setting is written once (`steer.settings.setting`) and reaches the CLI, run configs and records."""
    import typing
    from dataclasses import fields

    from steer.settings import PRESETS, TransferSettings, field_types

    cls = settings_class or TransferSettings
    hints = field_types(cls)
    in_presets = {k for recipe in PRESETS.values() for k in recipe}
    chosen = [f for f in fields(cls) if names is None or f.name in names]

    def option(f: Any) -> Any:
        flag = "--" + f.name.replace("_", "-")
        kind, args = hints[f.name], typing.get_args(hints[f.name])
        default = "the preset's" if f.name in in_presets else _shown(f.default)
        help_ = f"{f.metadata['help']} [default: {default}]"
        if kind is bool:
            return click.option(f"{flag}/--no-{flag[2:]}", f.name, default=None, help=help_)
        if typing.get_origin(kind) is typing.Literal:
            return click.option(flag, f.name, type=click.Choice(args), default=None, help=help_)
        type_ = FINITE if kind is float else int if kind is int else str
        return click.option(flag, f.name, type=type_, default=None, help=help_)

    def decorate(fn: Any) -> Any:
        for f in reversed(chosen):
            fn = option(f)(fn)
        return fn

    return decorate


def load_for_profile(
    profile_path: Path, model_spec: str | None, dtype: str, device: str, quiet: bool, device_map: str | None = None
) -> Any:
    """The profile and its model (`steer.service.load_for_profile`), with progress unless -q."""
    from steer.service import load_for_profile as load

    show_progress(quiet)
    return load(profile_path, model_spec, dtype=dtype, device=device, device_map=device_map, progress=not quiet)


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
            from steer.raydata import EngineOptions

            EngineOptions(**(self.engine_options() or {}))
        if self.gpus_per_worker > 0 and device == "cpu":
            raise SteerError("--gpus-per-worker gives each worker a GPU; add --device cuda so the model runs on it")

    def cluster(self) -> Any:
        """A context in which Ray is up for a whole command (`steer.raydata.cluster`); a no-op locally."""
        if not self.on:
            return contextlib.nullcontext()
        from steer.raydata import cluster

        return cluster(self.address, self.workers)

    def engine_options(self) -> dict[str, Any] | None:
        """`steer.raydata` keyword options, or None to run here."""
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

        command.__click_params__ = list(getattr(fn, "__click_params__", []))  # not shared with fn's list
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
) -> Any:
    """The config's Runner with its model loaded — or None when the command was run again as
    `processes` processes (the caller then has nothing left to do)."""
    from steer.experiment import Runner, load_experiment
    from steer.models import load_model

    if limit is not None and limit < 1:
        raise SteerError(f"--limit must be at least 1, got {limit}")
    ray = ray or RayOptions()
    ray.check(processes, device)
    show_progress(quiet)
    chosen = [m.strip() for m in modes.split(",") if m.strip()] if modes else None
    exp = load_experiment(config, data_dir=data_dir, limit=limit, modes=chosen)
    if relaunched(processes):
        return None
    lm = load_model(model_spec or exp.model, device=device, progress=not quiet)
    return Runner(exp, out_dir or Path("runs") / exp.name, lm, progress=not quiet, ray=ray.engine_options())


def main() -> None:
    """Console-script entry point: warnings of the library on stderr (also with -q, which hides only
    progress), and SIGTERM handled like Ctrl-C so every temporary file is cleaned up."""
    import signal

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        cli(prog_name="steer")
    finally:
        signal.signal(signal.SIGTERM, previous)
