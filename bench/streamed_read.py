"""The Ray engine's driver, reading an input: `read_texts` (every text in memory, as for stdin, CSV
or `hf:` inputs) against `BlockedInput.scan` (one pass over the bytes: block offsets and a
sha256, no texts kept) on the same generated file, in one run. Peak Python memory (tracemalloc)
and wall time; the ratios are the figures to read. No model is loaded.

    python bench/streamed_read.py --lines 1000000 --block-size 256
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steer.profiling.corpus import BlockedInput, read_texts  # noqa: E402

WORDS = "the a formal reply would be most kindly appreciated dude gimme that lol asap please thanks".split()


def measure(fn: object) -> tuple[float, float]:
    """(seconds, peak MiB of Python allocations) of one call."""
    tracemalloc.start()
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--block-size", type=int, default=256)
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.txt"
        with path.open("w", encoding="utf-8") as fh:
            for _ in range(args.lines):
                fh.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 20))) + "\n")
        size = path.stat().st_size / 2**20
        whole = measure(lambda: read_texts(str(path), keep_empty=True))
        blocked = measure(lambda: BlockedInput.scan(str(path), args.block_size))
    print(f"{args.lines} lines, {size:.0f} MiB, blocks of {args.block_size}\n")
    print("| driver reads | seconds | peak MiB (Python) |")
    print("|---|---|---|")
    print(f"| every text (`read_texts`) | {whole[0]:.1f} | {whole[1]:.0f} |")
    print(f"| block offsets (`BlockedInput.scan`) | {blocked[0]:.1f} | {blocked[1]:.1f} |")
    print(f"\nratio scan / read: time {blocked[0] / whole[0]:.2f}×, peak memory {blocked[1] / whole[1]:.3f}×")


if __name__ == "__main__":
    main()
