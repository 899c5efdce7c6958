"""steer benchmarks: profiling and transfer throughput, peak memory, model load, scaling.

Every figure is measured in this run, each configuration in its own process, and reported as a
ratio against a baseline measured in the same run. `make bench` runs the full set on the embedded
model; `--quick` with a tiny model is the smoke run CI uses.

    python bench/run.py [--model smollm2-135m] [--out docs/performance.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def measure(kind: str, **options: Any) -> dict[str, Any]:
    """Run bench/one.py in a fresh process and return its JSON."""
    args = [sys.executable, str(ROOT / "bench" / "one.py"), kind]
    for key, value in options.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
    if out.returncode != 0:
        raise SystemExit(f"benchmark {kind} {options} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    threads = torch.get_num_threads()
    return f"{os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM, torch {torch.__version__}, {threads} threads"


def write_report(path: Path, tables: str) -> None:
    """docs/performance.md = bench/header.md + the measured tables + bench/notes.md."""
    parts = [(ROOT / "bench" / name) for name in ("header.md", "notes.md")]
    header, notes = (p.read_text() if p.is_file() else "" for p in parts)
    path.write_text(header + tables + "\n\n" + notes)


def _label(mode: str) -> str:
    if mode == "guided":
        return "--preset guided (shift + guidance: each text decoded edited and unedited)"
    return "--mode " + mode.replace("+contrast", " --contrast")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--corpus", default="data/bible/train.tsv:archaic")
    ap.add_argument("--profile", default="data/profiles/formality-smollm2-135m.safetensors")
    ap.add_argument("--profile-texts", type=int, default=1000)
    ap.add_argument("--official-texts", type=int, default=16)
    ap.add_argument("--pad-to", type=int, default=1024)
    ap.add_argument("--gen-texts", type=int, default=32)
    ap.add_argument("--official-gen-texts", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--scale", default="250,500,1000,2000")
    ap.add_argument("--batch-sizes", default="1,4,16,64")
    ap.add_argument("--skip-load", action="store_true", help="Skip the cold/warm load benchmark (GGUF only).")
    ap.add_argument("--out", default=None, help="Also write the Markdown report here.")
    args = ap.parse_args()
    common = dict(model=args.model, corpus=args.corpus)
    rows: list[str] = []
    figures: dict[str, Any] = {}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    # 1. Profiling throughput (useful tokens/s).
    log("profiling throughput …")
    bare = measure("profile_bare", texts=args.profile_texts, batch_size=args.batch_size, **common)
    ours = measure("profile_steer", texts=args.profile_texts, batch_size=args.batch_size, **common)
    official = measure("profile_official", texts=args.official_texts, pad_to=args.pad_to, **common)
    figures["profile"] = {"bare": bare, "steer": ours, "official": official}
    rows += [
        "## 1. Profiling throughput (useful, non-padding tokens per second)",
        "",
        "| method | texts | useful tokens | tokens/s | vs official | vs bare forward |",
        "|---|---|---|---|---|---|",
        f"| official sNeuron-TST (pad to {args.pad_to} with EOS, batch 1, recompute act) | {args.official_texts} | "
        f"{official['tokens']} | {official['value']:.0f} | 1.00× | {official['value'] / bare['value']:.3f}× |",
        f"| steer profile (length-sorted batches of {args.batch_size}, masked) | {args.profile_texts} | "
        f"{ours['tokens']} | {ours['value']:.0f} | **{ours['value'] / official['value']:.1f}×** | "
        f"{ours['value'] / bare['value']:.3f}× (hook overhead {100 * (bare['value'] / ours['value'] - 1):.1f}%) |",
        f"| bare batched forward, no hooks | {args.profile_texts} | {bare['tokens']} | {bare['value']:.0f} | "
        f"{bare['value'] / official['value']:.1f}× | 1.00× |",
        "",
    ]
    # 2 + 3. Transfer throughput and memory.
    log("transfer throughput …")
    modes = ["prompt", "deactivate", "deactivate+contrast", "guided"]
    gen = {
        m: measure(
            "transfer",
            mode=m,
            texts=args.gen_texts,
            batch_size=args.batch_size,
            new_tokens=args.new_tokens,
            profile=args.profile,
            **common,
        )
        for m in modes
    }
    official_gen = measure(
        "transfer_official", texts=args.official_gen_texts, new_tokens=args.new_tokens, profile=args.profile, **common
    )
    model_only = measure("model_only", **common)
    figures["transfer"] = {**gen, "official": official_gen, "model_only": model_only}
    base = gen["prompt"]
    rows += [
        f"## 2. Transfer throughput (generated tokens/s, greedy, {args.new_tokens} new tokens per text) and "
        "3. peak memory",
        "",
        "| configuration | batch | texts | tokens/s | vs prompt | peak RSS (MiB) | RSS vs prompt |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in modes:
        g = gen[m]
        rows.append(
            f"| steer {_label(m)} | {args.batch_size} | {args.gen_texts} | "
            f"{g['value']:.1f} | {g['value'] / base['value']:.2f}× | {g['peak_rss_mb']:.0f} | "
            f"{g['peak_rss_mb'] / base['peak_rss_mb']:.2f}× |"
        )
    rows += [
        f"| official-style contrast (second model copy, one text at a time) | 1 | {args.official_gen_texts} | "
        f"{official_gen['value']:.1f} | {official_gen['value'] / base['value']:.2f}× | "
        f"{official_gen['peak_rss_mb']:.0f} | {official_gen['peak_rss_mb'] / base['peak_rss_mb']:.2f}× |",
        f"| (model loaded, nothing run) | — | — | — | — | {model_only['peak_rss_mb']:.0f} | "
        f"{model_only['peak_rss_mb'] / base['peak_rss_mb']:.2f}× |",
        "",
    ]
    # 4. Model load.
    if not args.skip_load:
        log("model load …")
        cold = measure("load_cold", model=args.model)
        warm = measure("load_warm", model=args.model)
        figures["load"] = {"cold": cold, "warm": warm}
        rows += [
            "## 4. Model load (in a fresh process)",
            "",
            "| load | seconds | vs warm |",
            "|---|---|---|",
            f"| cold (GGUF dequantisation + conversion into the cache) | {cold['seconds']:.1f} | "
            f"{cold['seconds'] / warm['seconds']:.1f}× |",
            f"| warm (converted safetensors cache) | {warm['seconds']:.2f} | 1.00× |",
            "",
        ]
    # 5. Scaling.
    log("scaling …")
    sizes = [int(x) for x in args.scale.split(",")]
    scale = {n: measure("profile_steer", texts=n, batch_size=args.batch_size, **common) for n in sizes}
    batch_sizes = [int(x) for x in args.batch_sizes.split(",")]
    per_batch = {b: measure("profile_steer", texts=min(256, max(sizes)), batch_size=b, **common) for b in batch_sizes}
    figures["scaling"] = {"texts": scale, "batch": per_batch}
    first = scale[sizes[0]]
    rows += [
        f"## 5. Scaling of steer profiling (batch {args.batch_size})",
        "",
        "| texts | tokens | seconds | tokens/s | time vs smallest ÷ tokens vs smallest (1.00 = linear) |",
        "|---|---|---|---|---|",
    ]
    for n, r in scale.items():
        linear = (r["seconds"] / first["seconds"]) / (r["tokens"] / first["tokens"])
        rows.append(f"| {n} | {r['tokens']} | {r['seconds']:.1f} | {r['value']:.0f} | {linear:.2f} |")
    rows += ["", f"| batch size ({min(256, max(sizes))} texts) | tokens/s | vs batch 1 |", "|---|---|---|"]
    for b, r in per_batch.items():
        rows.append(f"| {b} | {r['value']:.0f} | {r['value'] / per_batch[batch_sizes[0]]['value']:.2f}× |")
    report = "\n".join([f"Machine: {machine()}", f"Model: {args.model}", "", *rows])
    print(report)
    if args.out:  # the hand-written header and notes (bench/header.md, bench/notes.md) frame the tables
        write_report(Path(args.out), report)
    Path(os.environ.get("STEER_BENCH_JSON", os.devnull)).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
