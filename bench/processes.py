"""`steer transfer` and `steer eval` with 1 and with N processes on the same texts: wall time, generated
tokens per second, whether the JSONL records are byte-identical and how far the scores differ.
Printed as Markdown tables.

    python bench/processes.py --corpus ../shared/data/formality/dev.formal.txt --texts 32 --processes 2 \
        --train-style formal=../shared/data/formality/train.formal.txt \
        --train-style informal=../shared/data/formality/train.informal.txt

One process uses every core (torch's default threads); with N processes `steer transfer --processes N`
gives each cores // N threads (OMP_NUM_THREADS), as `accelerate launch` is started by steer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from options import transfer_options  # bench/options.py (this script's folder is on sys.path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    transfer_options(ap)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--train-style", action="append", default=[], help="NAME=FILE for the eval judge (tfidf)")
    args = ap.parse_args()
    from steer.model.loading import load_model
    from steer.profiling.corpus import read_texts
    from steer.profiling.profile import StyleProfile

    texts = read_texts(args.corpus)[: args.texts]
    tokenizer = load_model(StyleProfile.load(args.profile).model_id, progress=False).tokenizer
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp, "in.txt")
        inputs.write_text("\n".join(texts) + "\n", encoding="utf-8")
        rows, outputs = [], {}
        for n in (1, args.processes):
            out = Path(tmp, f"out{n}.jsonl")
            cmd = [sys.executable, "-m", "steer", "transfer", "-p", args.profile, "--from", args.source,
                   "--to", args.target, "-i", str(inputs), "-o", str(out), "--preset", args.preset,
                   "--max-new-tokens", str(args.max_new_tokens), "-q", "--processes", str(n)]  # fmt: skip
            start = time.perf_counter()
            subprocess.run(cmd, check=True, env=dict(os.environ))
            seconds = time.perf_counter() - start
            records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
            tokens = sum(len(tokenizer(r["raw_output"], add_special_tokens=False)["input_ids"]) for r in records)
            outputs[n] = out.read_bytes()
            rows.append((n, seconds, tokens))
    cores = os.cpu_count() or 1
    print(f"{len(texts)} texts of {args.corpus}, preset {args.preset}, greedy, max {args.max_new_tokens} new tokens\n")
    print("| processes | threads each | wall time (s, model loads included) | generated tokens / s | vs 1 process |")
    print("|---|---|---|---|---|")
    for n, seconds, tokens in rows:
        threads = os.environ.get("OMP_NUM_THREADS", str(cores)) if n == 1 else str(max(1, cores // n))
        print(f"| {n} | {threads} | {seconds:.1f} | {tokens / seconds:.1f} | {rows[0][1] / seconds:.2f}× |")
    same = outputs[1] == outputs[args.processes]
    print(f"\nJSONL of {args.processes} processes byte-identical to 1 process: {'yes' if same else 'NO'}")
    if args.train_style:
        _eval(args, outputs[1])


def _eval(args: argparse.Namespace, records: bytes) -> None:
    """`steer eval` of the 1-process records (tfidf judge, PPL, MiniLM similarity, J) with 1 and N processes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "out.jsonl")
        path.write_bytes(records)
        styles = [x for spec in args.train_style for x in ("--train-style", spec)]
        rows, scores = [], {}
        for n in (1, args.processes):
            cmd = [sys.executable, "-m", "steer", "eval", str(path), "--classifier", "tfidf", *styles,
                   "--metrics", "accuracy,ppl,similarity,j", "--json", "--processes", str(n)]  # fmt: skip
            start = time.perf_counter()
            done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ))
            rows.append((n, time.perf_counter() - start))
            scores[n] = json.loads(done.stdout)
    print("\n| `steer eval` processes | wall time (s, model loads and judge training included) | vs 1 process |")
    print("|---|---|---|")
    for n, seconds in rows:
        print(f"| {n} | {seconds:.1f} | {rows[0][1] / seconds:.2f}× |")
    keys = ("accuracy", "ppl", "similarity", "j")
    gap = max(abs(scores[1][k] - scores[args.processes][k]) / max(abs(scores[1][k]), 1e-12) for k in keys)
    print(f"\nlargest relative difference of {', '.join(keys)} between 1 and {args.processes} processes: {gap:.1e}")


if __name__ == "__main__":
    main()
