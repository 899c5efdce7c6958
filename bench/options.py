"""Command-line options shared by the benchmarks that run `steer transfer` on a corpus: the
profile, the corpus and direction, how many texts, the recipe and the token limit."""

from __future__ import annotations

import argparse


def transfer_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--profile", default="data/profiles/formality-smollm2-135m.safetensors")
    ap.add_argument("--corpus", default="data/demo-formal.txt")
    ap.add_argument("--source", default="formal")
    ap.add_argument("--target", default="informal")
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--preset", default="guided")
    ap.add_argument("--max-new-tokens", type=int, default=48)
