"""How fast the CLI answers before any model work: `steer --help`, a command's `--help` and `steer
models`, each in a fresh process (wall time and peak RSS, the median of `--repeats` runs), beside a
bare `python -c pass` on the same machine in the same run and `python -c "import torch"` for scale.

    python bench/startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

STEER = [sys.executable, "-m", "steer"]
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "steer --help": [*STEER, "--help"],
    "steer transfer --help": [*STEER, "transfer", "--help"],
    "steer models": [*STEER, "models"],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
}


def measure(command: list[str], repeats: int) -> dict[str, float]:
    walls, peaks = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - start)
        peaks.append(int(done.stderr.strip().splitlines()[-1]) / 1024)
    return {"wall_s": round(statistics.median(walls), 3), "peak_rss_mb": round(statistics.median(peaks), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    results = {name: measure(command, args.repeats) for name, command in CASES.items()}
    for name, got in results.items():
        print(f"{name:28} {got['wall_s']:6.3f} s  {got['peak_rss_mb']:7.1f} MB")
    print(json.dumps({"repeats": args.repeats, "cwd": str(root), "results": results}))


if __name__ == "__main__":
    main()
