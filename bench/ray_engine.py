"""`steer transfer` in one process against `--engine ray` with 1 and with N workers on the same texts:
wall time (ratio to one process), peak resident memory of each Ray worker, and whether the JSONL
records are byte-identical. Printed as a Markdown table.

    python bench/ray_engine.py --corpus ../shared/data/formality/dev.formal.txt --texts 32 --workers 2

Each run is a fresh `steer transfer` process (the Ray runs start a local Ray instance, which is
part of their cost on a short job). Peak memory per worker is the highest RSS seen, polling every
0.2 s, of any process whose command line names the `RewriteWorker` actor.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from options import transfer_options  # bench/options.py (this script's folder is on sys.path)


def worker_peak_rss(stop: threading.Event, peaks: dict[int, int]) -> None:
    """Poll /proc for Ray worker processes running the RewriteWorker actor; keep each one's peak RSS."""
    while not stop.is_set():
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                if b"RewriteWorker" not in cmd:
                    continue
                status = (proc / "status").read_text()
            except OSError:
                continue
            rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
            peaks[int(proc.name)] = max(peaks.get(int(proc.name), 0), rss)
        stop.wait(0.2)


def run(args: argparse.Namespace, inputs: Path, out: Path, extra: list[str]) -> tuple[float, list[int]]:
    cmd = [sys.executable, "-m", "steer", "transfer", "-p", args.profile, "--from", args.source, "--to", args.target,
           "-i", str(inputs), "-o", str(out), "--preset", args.preset, "--max-new-tokens", str(args.max_new_tokens),
           "-q", "--force", *extra]  # fmt: skip
    stop, peaks = threading.Event(), {}
    watcher = threading.Thread(target=worker_peak_rss, args=(stop, peaks), daemon=True)
    watcher.start()
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    seconds = time.perf_counter() - start
    stop.set()
    watcher.join()
    return seconds, sorted(peaks.values(), reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    transfer_options(ap)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--block-size", type=int, default=0, help="texts per Ray block (0: the texts split evenly over --workers)"
    )
    args = ap.parse_args()
    from steer.profiling.corpus import read_texts

    texts = read_texts(args.corpus)[: args.texts]
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp) / "in.txt"
        inputs.write_text("\n".join(texts) + "\n", encoding="utf-8")
        base = Path(tmp) / "one.jsonl"
        one, _ = run(args, inputs, base, [])
        rows = [("one process", one, [], True)]
        block = args.block_size or -(-len(texts) // args.workers)  # every worker gets a block
        for n in sorted({1, args.workers}):
            out = Path(tmp) / f"ray{n}.jsonl"
            engine = ["--engine", "ray", "--workers", str(n), "--block-size", str(block)]
            seconds, peaks = run(args, inputs, out, engine)
            rows.append((f"--engine ray --workers {n}", seconds, peaks, out.read_bytes() == base.read_bytes()))
    print(
        f"{len(texts)} texts, --preset {args.preset}, ≤{args.max_new_tokens} new tokens, Ray blocks of {block} "
        "texts; wall time of the command.\n"
    )
    print("| run | wall s | vs one process | peak RSS per worker (MiB) | records identical |")
    print("|---|---|---|---|---|")
    for name, seconds, peaks, same in rows:
        memory = ", ".join(f"{p / 1024:.0f}" for p in peaks) or "—"
        print(f"| {name} | {seconds:.1f} | {seconds / one:.2f}× | {memory} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
