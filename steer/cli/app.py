"""The `steer` command group: one line for a user's mistake (exit 1), Ctrl-C and SIGTERM (exit 130),
the library's log on stderr, and the option groups several commands share (the engine and run-config
options are in `steer.cli.running`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import click

from steer.errors import SteerError
from steer.model.names import DEFAULT_MODEL, DTYPES
from steer.version import __version__


class SteerGroup(click.Group):
    """A click group that turns `SteerError` into one line on stderr and exit code 1, naming the
    command's options where the library's message names parameters; an `OSError` on a named path
    (permission denied, disk full, a folder where a file was expected) into one line naming that
    path — its traceback goes to the debug log, not the user."""

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
        except OSError as exc:
            if exc.filename is None:  # not about a path the user gave: a bug, shown in full
                raise
            logging.getLogger("steer").debug("OSError on a user path", exc_info=True)
            where = f"{exc.filename} → {exc.filename2}" if exc.filename2 else str(exc.filename)
            reason = exc.strerror or type(exc).__name__
            fix = "check the path, its folder's permissions and free space"
            click.echo(f"steer: error: {where}: {reason}; {fix}", err=True)
            ctx.exit(1)


class SectionedCommand(click.Command):
    """A command whose --help lists its options under headings by purpose (`sections`: heading →
    parameter names, in order); options no section names are listed last, under "Other options"."""

    def __init__(self, *args: Any, sections: tuple[tuple[str, tuple[str, ...]], ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx) if isinstance(p, click.Option)}
        named = {name for _, names in self.sections for name in names}
        groups = [*self.sections, ("Other options", tuple(n for n in records if n not in named))]
        for title, names in groups:
            rows = [records[n] for n in names if records.get(n) is not None]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)  # type: ignore[arg-type]


DTYPE_HELP = (
    "Weights' precision (auto: float32; fp16-linear for the embedded Qwen models on a CPU). On a CPU, "
    "fp16-linear keeps the linear layers' weights in float16 (outputs within float16 rounding) and "
    "int8-linear in int8 with int8 activations per token: 2-10x faster decoding (docs/usage.md)."
)


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
    and checked against its card's sha256s (`steer.profiling.hub.resolve_profile`)."""

    name = "profile"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        from steer.profiling.hub import is_hub_spec, resolve_profile

        if isinstance(value, Path) or not is_hub_spec(value):
            return Path(value)
        return resolve_profile(value)


PROFILE = ProfilePath()


class OutputFile(click.Path):
    """A file steer writes: an empty name, or one ending in a path separator (`-o newdir/`: a folder,
    which pathlib would quietly turn into a file named `newdir`), is a usage error naming it."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; give the file to write, e.g. out.jsonl", param, ctx)
        if isinstance(value, str) and value.endswith(("/", os.sep)):
            self.fail(
                f"{value!r} names a folder; give a file inside it, e.g. {value.rstrip('/' + os.sep)}/out", param, ctx
            )
        return super().convert(value, param, ctx)


OUTPUT_FILE = OutputFile()


class Device(click.ParamType):
    """A torch device this machine has (`steer.model.loading.check_device`): a usage error, not a
    traceback after the model loads, for `--device banana` or `--device cuda` on a CPU-only torch."""

    name = "device"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from steer.model.loading import check_device

        try:
            return check_device(str(value))
        except SteerError as exc:
            self.fail(str(exc), param, ctx)


DEVICE = Device()


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
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, help=DTYPE_HELP),
        click.option(
            "--device", type=DEVICE, default="cpu", show_default=True, help="torch device, e.g. cpu or cuda:0."
        ),
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
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, help=DTYPE_HELP),
        click.option("--device", type=DEVICE, default="cpu", show_default=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _shown(value: Any) -> str:
    """A field default as `--help` shows it: on/off, none, or the value."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):  # a rerank ladder: as --ladder spells it
        return ",".join(str(v) for v in value)
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# The edit's fields: what `steer export` can bake into weights (and all a recipe needs to pick neurons).
EDIT_FIELDS = ("mode", "top_k", "method", "amplify_factor", "strength", "edit_layers")


def recipe_options(names: tuple[str, ...] | None = None, settings_class: Any = None) -> Any:
    """click options for a settings class's fields (`TransferSettings` unless `settings_class`, e.g.
    `ProfileSettings`), generated from the fields themselves: `--top-k`
    for `top_k`, the field's help, its type (the choices of a `Literal`, finite floats, `--x/--no-x`
    for a boolean) and no default of the option's own — an option not given is None, and the
    recipe resolver fills it from the preset, the recorded recipe or the field's default. So a new
    setting is written once (`steer.settings.setting`) and reaches the CLI, run configs and records."""
    import typing
    from dataclasses import fields

    from steer.settings import PRESETS, TransferSettings, field_types

    cls = settings_class or TransferSettings
    hints = field_types(cls)
    in_presets = {k for recipe in PRESETS.values() for k in recipe} if cls is TransferSettings else set()
    chosen = [f for f in fields(cls) if names is None or f.name in names]

    def option(f: Any) -> Any:
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        present = [a for a in typing.get_args(kind) if a is not type(None)]
        if type(None) in typing.get_args(kind) and len(present) == 1:  # `int | None`: an int, or not given
            kind = present[0]
        args = typing.get_args(kind)
        default = "the preset's" if f.name in in_presets else f.metadata.get("shown") or _shown(f.default)
        help_ = f"{f.metadata['help']} [default: {default}]"
        if kind is bool:
            return click.option(f.metadata.get("flag") or f"{flag}/--no-{flag[2:]}", f.name, default=None, help=help_)
        if typing.get_origin(kind) is typing.Literal:
            return click.option(flag, f.name, type=click.Choice(args), default=None, help=help_)
        type_ = FINITE if kind is float else int if kind is int else str
        return click.option(flag, f.name, type=type_, default=None, help=help_)

    def decorate(fn: Any) -> Any:
        for f in reversed(chosen):
            fn = option(f)(fn)
        return fn

    return decorate


def load_profile_and_model(
    profile_path: Path, model_spec: str | None, dtype: str, device: str, quiet: bool, device_map: str | None = None
) -> Any:
    """The profile and its model (`steer.rewriting.service.load_profile_and_model`), with progress unless -q."""
    from steer.rewriting.service import load_profile_and_model as load

    show_progress(quiet)
    return load(profile_path, model_spec, dtype=dtype, device=device, device_map=device_map, progress=not quiet)


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
