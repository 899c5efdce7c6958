"""Command-line options shared by the benchmarks that rewrite a corpus: the profile, the corpus and
direction, how many texts and the token limit (`direction_options`); the recipe for those that run
`steer transfer` (`transfer_options`); the batch and threads for those that time decoding in
process (`decoding_options`, with `load_decoding`)."""

from __future__ import annotations

import argparse
from typing import Any


def direction_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--profile", default="data/profiles/formality-smollm2-135m.safetensors")
    ap.add_argument("--corpus", default="data/demo-formal.txt")
    ap.add_argument("--source", default="formal")
    ap.add_argument("--target", default="informal")
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=48)


def transfer_options(ap: argparse.ArgumentParser) -> None:
    direction_options(ap)
    ap.add_argument("--preset", default="guided")


def decoding_options(ap: argparse.ArgumentParser) -> None:
    direction_options(ap)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--dtype", default="auto", help="steer's --dtype (e.g. fp16-linear, int8-linear).")


def load_decoding(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    """The profile, its model and the corpus's first `--texts` texts, with `--threads` set."""
    import torch

    from steer.model.loading import load_model
    from steer.profiling.corpus import read_texts
    from steer.profiling.profile import StyleProfile

    if args.threads:
        torch.set_num_threads(args.threads)
    profile = StyleProfile.load(args.profile)
    lm = load_model(profile.model_id, dtype=getattr(args, "dtype", "auto"), progress=False)
    return profile, lm, read_texts(args.corpus)[: args.texts]
