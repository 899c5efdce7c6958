"""`steer serve`'s options and address, checked before anything loads."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from conftest import refused

from steer.cli import cli


def test_serve_checks_its_options_before_loading(prof: Path, tmp_path: Path) -> None:
    for args, message in (
        (["--port", "0"], "--port 0 is not a port"),
        (["--host", "not a host!"], "--host 'not a host!' is not an address"),
    ):
        result = CliRunner().invoke(cli, ["serve", "-p", str(prof), *args])
        assert result.exit_code == 1 and message in result.output, result.output
    missing = CliRunner().invoke(cli, ["serve", "-p", str(tmp_path / "none.safetensors")])
    assert missing.exit_code != 0 and "does not exist" in missing.output and "Traceback" not in missing.output


# 17: steer serve on an address it cannot listen on: one line before anything loads
def test_serve_on_an_address_it_cannot_listen_on_is_one_line(tmp_path: Path, prof: Path, no_model: None) -> None:
    result = CliRunner().invoke(cli, ["serve", "-p", str(prof), "--host", "999.1.1.1", "--port", "8766", "-q"])
    refused(result, "cannot listen on --host 999.1.1.1 --port 8766")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ctrl_c_stops_a_long_decode_within_seconds_and_exits_cleanly(prof: Path) -> None:
    """SIGINT while a request decodes tens of thousands of tokens: requests in flight get the grace
    period, then the running batch stops at its next step and the process exits 0."""
    import json
    import signal
    import subprocess
    import sys
    import threading
    import time
    import urllib.error
    import urllib.request

    from steer.cli.serving import SHUTDOWN_GRACE_S

    port = _free_port()
    args = ["serve", "-p", str(prof), "--port", str(port), "--max-new-tokens", "50000", "-q"]
    server = subprocess.Popen([sys.executable, "-m", "steer", *args], stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as up:
                    assert json.load(up)["status"] == "ok"
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                time.sleep(0.5)
        body = {"texts": ["Good morning to you."] * 4, "from": "formal", "to": "informal", "preset": "prompt",
                "max_new_tokens": 50000, "min_new_tokens": 50000, "clean": False, "loop_guard": False}  # fmt: skip
        request = urllib.request.Request(
            f"{base}/v1/rewrite", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        answered: list[object] = []

        def ask() -> None:
            try:
                with urllib.request.urlopen(request, timeout=120) as got:
                    answered.append(got.status)
            except Exception as err:  # noqa: BLE001 - the connection closes as the server stops
                answered.append(err)

        asking = threading.Thread(target=ask)
        asking.start()
        time.sleep(2)  # decoding now
        started = time.monotonic()
        server.send_signal(signal.SIGINT)
        code = server.wait(timeout=SHUTDOWN_GRACE_S + 30)
        took = time.monotonic() - started
        asking.join(timeout=30)
        assert code == 0, server.stderr.read() if server.stderr else ""
        assert took < SHUTDOWN_GRACE_S + 15  # the grace period, then the batch's next step
        assert answered and answered[0] != 200  # 50,000 tokens were never finished
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
