"""Peak memory of loading a model into lighter linear weights, and of a short rewrite with it: read
straight into the format (`steer.model.weights.load_light`, what `--dtype fp16-linear` does) against
loading float32 and then lightening (the path before), each in a fresh process; the rewrites must be
the same.

    python bench/load_memory.py --model qwen2.5-coder-1.5b --dtype fp16-linear [--texts 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TEXTS = ["I would be grateful if you could reply at your earliest convenience.", "Please find the report attached.",
         "We regret to inform you that the meeting has been postponed.", "Kindly confirm your attendance."]  # fmt: skip


def one(path: str, model: str, dtype: str, texts: int) -> dict[str, object]:
    """Load by `path` ("direct" or "float32-then-lighten"), rewrite `texts` texts; peak RSS in MB."""
    from steer.generation.steerer import Steerer, TransferSettings
    from steer.model.loading import load_model
    from steer.model.weights import lighten

    start = time.perf_counter()
    if path == "direct":
        lm = load_model(model, dtype=dtype, progress=False)
    else:
        lm = load_model(model, dtype="float32", progress=False)
        lighten(lm.model, dtype)
        lm.weights = dtype
    loaded = time.perf_counter() - start
    peak_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    settings = TransferSettings.bare(mode="prompt", max_new_tokens=24)
    outputs = [r.raw_output for r in Steerer(lm, None).transfer(TEXTS[:texts], "formal", "informal", settings)]
    return {"path": path, "load_s": round(loaded, 1), "peak_rss_mb_after_load": round(peak_loaded),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "fingerprint": lm.fingerprint, "outputs": outputs}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="fp16-linear", choices=["fp16-linear", "int8-linear"])
    parser.add_argument("--texts", type=int, default=4)
    parser.add_argument("--one", choices=["direct", "float32-then-lighten"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.model, args.dtype, args.texts)))
        return
    rows = []
    for path in ("float32-then-lighten", "direct"):
        command = [sys.executable, __file__, "--model", args.model, "--dtype", args.dtype, "--texts", str(args.texts),
                   "--one", path]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for row in rows:
        print(f"{row['path']:22} load {row['load_s']:6.1f} s  peak after load {row['peak_rss_mb_after_load']:6} MB  "
              f"peak {row['peak_rss_mb']:6} MB")  # fmt: skip
    same = rows[0]["outputs"] == rows[1]["outputs"] and rows[0]["fingerprint"] == rows[1]["fingerprint"]
    print(f"same rewrites and fingerprint: {same}")
    print(json.dumps({"model": args.model, "dtype": args.dtype, "rows": rows, "same": same}))


if __name__ == "__main__":
    main()
