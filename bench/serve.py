"""`steer serve` under load: requests/s and p50/p95 latency for 1, 4 and 16 concurrent clients, each
request one text, against the same texts rewritten by the CLI one call per text (`steer transfer
TEXT`, which loads the model every time), in the same run.

    python bench/serve.py --texts ../shared/data/formality/dev.formal.txt --n 16 --cli 4

The server is started as a user starts it (`steer serve -p PROFILE`) and asked over loopback with the
standard library's HTTP client; the recipe is the one `steer transfer` chooses for the direction.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEER = str(Path(sys.executable).with_name("steer"))


def ask(port: int, body: dict[str, object]) -> tuple[float, int]:
    """One request: its latency in seconds and HTTP status."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/rewrite", data, {"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as reply:
            reply.read()
            status = reply.status
    except urllib.error.HTTPError as err:
        status = err.code
    return time.perf_counter() - start, status


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(ROOT / "data/profiles/formality-smollm2-135m.safetensors"))
    ap.add_argument("--from", dest="source", default="formal")
    ap.add_argument("--to", dest="target", default="informal")
    ap.add_argument("--texts", required=True, help="A file of texts, one per line (the first --n are used).")
    ap.add_argument("--n", type=int, default=16, help="Requests per concurrency level (one text each).")
    ap.add_argument("--cli", type=int, default=4, help="Texts rewritten by the CLI, one call each.")
    ap.add_argument("--port", type=int, default=8771)
    args = ap.parse_args()
    texts = [t for t in Path(args.texts).read_text(encoding="utf-8").splitlines() if t.strip()][: args.n]
    server = subprocess.Popen(
        [STEER, "serve", "-p", args.profile, "--port", str(args.port), "-q"],
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        start = time.perf_counter()
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{args.port}/health", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.perf_counter() - start > 300:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.5)
        load_s = time.perf_counter() - start
        ask(args.port, {"texts": texts[:1], "from": args.source, "to": args.target})  # warm-up
        rows = []
        for clients in (1, 4, 16):
            with ThreadPoolExecutor(clients) as pool:
                start = time.perf_counter()
                done = list(
                    pool.map(lambda t: ask(args.port, {"texts": [t], "from": args.source, "to": args.target}), texts)
                )
                wall = time.perf_counter() - start
            latencies = [s for s, _ in done]
            errors = sum(1 for _, status in done if status != 200)
            rows.append((clients, len(texts) / wall, statistics.median(latencies), percentile(latencies, 0.95), errors))
    finally:
        server.terminate()
        server.wait(30)
    cli_times = []
    for text in texts[: args.cli]:
        start = time.perf_counter()
        subprocess.run(
            [STEER, "transfer", "-p", args.profile, "--from", args.source, "--to", args.target, "-q", text],
            check=True,
            capture_output=True,
        )
        cli_times.append(time.perf_counter() - start)
    cli_rate = len(cli_times) / sum(cli_times)
    where = f"{args.source} → {args.target}, {Path(args.profile).name}"
    print(f"{len(texts)} texts of {args.texts}, {where}; server start {load_s:.1f} s\n")
    print("| clients | requests/s | p50 s | p95 s | errors | × CLI |")
    print("|---|---|---|---|---|---|")
    for clients, rate, p50, p95, errors in rows:
        print(f"| {clients} | {rate:.2f} | {p50:.2f} | {p95:.2f} | {errors} | {rate / cli_rate:.1f}× |")
    print(
        f"| CLI, one call per text ({len(cli_times)}) | {cli_rate:.2f} | {statistics.median(cli_times):.2f} | "
        f"{percentile(cli_times, 0.95):.2f} | 0 | 1.0× |"
    )


if __name__ == "__main__":
    main()
