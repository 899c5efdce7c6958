"""`steer serve` under load: requests/s and p50/p95 latency for 1, 4 and 16 concurrent clients, each
request one text, against the same texts rewritten by the CLI one call per text (`steer transfer
TEXT`, which loads the model every time), in the same run.

    python bench/serve.py --texts ../shared/data/formality/dev.formal.txt --n 16 --cli 4
    python bench/serve.py --texts ../shared/data/formality/dev.formal.txt --hostile 70

With `--hostile N`: N clients at once, every tenth request hostile (a padding template, a huge token
count, a lone surrogate, a template repeating {text}, a block-range bomb, a foreign Host, a 2 MiB
body); every good request's records must equal those of a calm pass (one client), and the server's
peak RSS (VmHWM) is reported before and after.

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


def ask(port: int, body: dict[str, object] | bytes, headers: dict[str, str] | None = None) -> tuple[float, int]:
    """One request: its latency in seconds and HTTP status."""
    return answer(port, body, headers)[:2]


def answer(port: int, body: dict[str, object] | bytes, headers: dict[str, str] | None = None) -> tuple[float, int, str]:
    """One request: its latency, HTTP status and body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/rewrite", data, sent)
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as reply:
            text, status = reply.read().decode(), reply.status
    except urllib.error.HTTPError as err:
        text, status = err.read().decode(), err.code
    except OSError as err:  # the server may close a connection whose body it refused unread
        text, status = json.dumps({"error": f"connection closed ({type(err).__name__})"}), 0
    return time.perf_counter() - start, status, text


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def hostile(port: int, pid: int, texts: list[str], source: str, target: str, clients: int) -> None:
    """`clients` requests at once, every tenth hostile; good ones checked against a calm pass."""
    base = {"from": source, "to": target}
    attacks: list[tuple[str, dict[str, object] | bytes, dict[str, str]]] = [
        ("padding template", {**base, "texts": ["hi"], "prompt": "{text:>99999999}"}, {}),
        ("max_new_tokens 100000", {**base, "texts": ["hi"], "max_new_tokens": 100000, "min_new_tokens": 100000}, {}),
        (
            "lone surrogate",
            b'{"texts": ["a \\ud800 b"], "from": "%s", "to": "%s"}' % (source.encode(), target.encode()),
            {},
        ),
        ("{text} 500 times", {**base, "texts": ["hi"], "prompt": "{text}" * 500}, {}),
        ("block-range bomb", {**base, "texts": ["hi"], "preset": "guided", "edit_layers": "0-10000000000"}, {}),
        ("foreign Host", {**base, "texts": ["hi"]}, {"Host": "evil.example"}),
        ("2 MiB body", {**base, "texts": ["x" * (2 << 20)]}, {}),
    ]
    good = texts[: clients - clients // 10]
    calm = {t: json.loads(answer(port, {**base, "texts": [t]})[2])["records"][0]["output"] for t in good}
    before = peak_rss_mib(pid)
    unused = iter(good)
    jobs = [
        attacks[(i // 10) % len(attacks)] if i % 10 == 9 else ("good", {**base, "texts": [next(unused)]}, {})
        for i in range(clients)
    ]
    with ThreadPoolExecutor(clients) as pool:
        done = list(pool.map(lambda job: (job[0], *answer(port, job[1], job[2])), jobs))

    def as_calm(status: int, text: str) -> bool:
        record = json.loads(text)["records"][0] if status == 200 else None
        return record is not None and record["output"] == calm[record["source_text"]]

    right = sum(as_calm(status, text) for kind, _, status, text in done if kind == "good")
    print(f"{clients} clients at once, {sum(k != 'good' for k, *_ in jobs)} hostile; server peak RSS "
          f"{before:.0f} MiB before, {peak_rss_mib(pid):.0f} MiB after\n")  # fmt: skip
    print("| request | status | s | error |")
    print("|---|---|---|---|")
    for kind, seconds, status, text in done:
        if kind != "good":
            print(f"| {kind} | {status} | {seconds:.2f} | {json.loads(text).get('error', '')[:90]} |")
    print(f"\ngood requests answered 200 with the calm pass's rewrite: {right} of {len(good)}")


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
    ap.add_argument("--hostile", type=int, default=0, help="Clients at once, a tenth hostile (skips the rest).")
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
        if args.hostile:
            texts = [t for t in Path(args.texts).read_text(encoding="utf-8").splitlines() if t.strip()]
            hostile(args.port, server.pid, texts, args.source, args.target, args.hostile)
            return
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
