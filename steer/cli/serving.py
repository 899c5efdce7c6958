"""`steer serve`: load a profile's model once and serve rewrites over HTTP on this machine."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import click

from steer.cli.app import DEVICE, DTYPE_HELP, PROFILE, cli
from steer.errors import SteerError
from steer.model.names import DTYPES

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
SHUTDOWN_GRACE_S = 10  # seconds requests in flight get to finish after Ctrl-C or SIGTERM


def _check_host(host: str, port: int) -> None:
    """The address before anything loads: a port in range, a host that is an address or a name."""
    if not 0 < port < 65536:
        raise SteerError(f"--port {port} is not a port; give one in 1..65535, e.g. 8000")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost" and not all(part.isalnum() or "-" in part for part in host.split(".")):
            raise SteerError(f"--host {host!r} is not an address; give e.g. 127.0.0.1") from None
    import socket

    try:  # resolvable and free now (999.1.1.1 looks like a name; a port in use fails only after loading)
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SteerError(
            f"cannot listen on --host {host} --port {port} ({reason}); give an address of this machine "
            "(e.g. 127.0.0.1) and a free port"
        ) from None


@cli.command()
@click.option(
    "-p", "--profile", "profile_path", type=PROFILE, required=True,
    help="Profile from 'steer profile' (its style probe beside it makes steer-and-rerank available).",
)  # fmt: skip
@click.option("--model", "model_spec", default=None, help="Model to load instead of the profile's (same fingerprint).")
@click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, help=DTYPE_HELP)
@click.option("--device", type=DEVICE, default="cpu", show_default=True)
@click.option(
    "--host", default="127.0.0.1", show_default=True,
    help="Address to listen on. The server has no authentication: anything but localhost exposes it to the network.",
)  # fmt: skip
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--max-batch", type=click.IntRange(1), default=16, show_default=True, help="Texts decoded in one batch.")
@click.option("--max-queue", type=click.IntRange(1), default=64, show_default=True, help="Requests waiting; more: 503.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=300.0, show_default=True,
              help="Seconds a request may wait and decode.")  # fmt: skip
@click.option("--max-new-tokens", type=click.IntRange(1), default=256, show_default=True,
              help="The most new tokens a request may ask for (more: 400).")  # fmt: skip
@click.option("--allow-host", "allow_hosts", multiple=True,
              help="Also answer requests whose Host header names this (repeatable); others get 400.")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No loading progress.")
def serve(
    profile_path: Path,
    model_spec: str | None,
    dtype: str,
    device: str,
    host: str,
    port: int,
    max_batch: int,
    max_queue: int,
    timeout_s: float,
    max_new_tokens: int,
    allow_hosts: tuple[str, ...],
    quiet: bool,
) -> None:
    """Serve rewrites over HTTP: POST /v1/rewrite, GET /v1/styles, GET /health, /docs, and a page at /."""
    _check_host(host, port)
    import uvicorn

    from steer.rewriting.opened import OpenedProfile
    from steer.serve.app import ServeLimits, create_app, memory_note

    opened = OpenedProfile.open(profile_path)
    lm = opened.load_model(model_spec, dtype=dtype, device=device, progress=not quiet)
    from steer.serve.app import host_name

    hosts = tuple(dict.fromkeys(host_name(h) for h in (*LOCAL_HOSTS, host, *allow_hosts)))  # the names answered
    limits = ServeLimits(
        max_batch=max_batch, max_queue=max_queue, timeout_s=timeout_s, max_new_tokens=max_new_tokens, hosts=hosts
    )
    app = create_app(opened, lm, limits)
    note = memory_note(lm, limits)
    if note is not None:
        click.echo(f"steer: warning: {note}", err=True)
    if host not in LOCAL_HOSTS:
        click.echo(f"steer: warning: {host} is not localhost and the server has no authentication", err=True)
    click.echo(f"steer: serving {profile_path} on http://{host}:{port}/ (Ctrl-C stops)", err=True)
    # Ctrl-C / SIGTERM: requests in flight get SHUTDOWN_GRACE_S to finish, then the running batch
    # stops at its next step (the batcher's stop) and the process exits
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
