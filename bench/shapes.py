"""Rewrite speed of the embedded models' architectures where their weights cannot go: each model is
built from its own config and tokenizer with random weights, and every text decodes exactly
`--tokens` tokens (no EOS, no stop-at-answer, no loop guard), so the work per text is fixed and the
timing is that of the real model doing the same amount of work. Written for the GPU machine, which
receives at most 64 MiB (the GGUF files are 98 MB to 1.1 GB); run it on the CPU too for the
same-protocol comparison. Printed as Markdown.

    python bench/shapes.py --export .gpu/configs            # here: configs and tokenizers of the cache
    python bench/shapes.py --configs .gpu/configs --formal F --informal I --device cuda --dtype bfloat16

Per model: steer's profiling (useful tokens/s over `--profile-texts` texts per style), then the
plain prompt and the guided preset (every text decoded unedited and edited: the steering cost)
over `--texts` texts, s/text and generated tokens/s, and peak device memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steer.generation.steerer import Steerer, TransferSettings  # noqa: E402
from steer.model.loading import EMBEDDED_MODELS, load_model, wrap_model  # noqa: E402
from steer.profiling.corpus import Corpus, read_texts  # noqa: E402
from steer.profiling.profile import profile_styles  # noqa: E402
from steer.settings import ProfileSettings  # noqa: E402

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")


def export(folder: Path) -> None:
    """Each installed embedded model's config and tokenizer (a few MB; no weights) into `folder`."""
    for alias in MODELS:
        if alias not in EMBEDDED_MODELS:
            continue
        lm = load_model(alias, progress=False)
        target = folder / alias
        lm.model.config.save_pretrained(target)
        lm.tokenizer.save_pretrained(target)
        print(f"{alias}: {sum(f.stat().st_size for f in target.iterdir()) / 2**20:.1f} MiB in {target}")
        del lm


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def random_model(folder: Path, device: str, dtype: str) -> Any:
    """The architecture of `folder`'s config with random weights, made on `device` directly."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    return wrap_model(model.eval(), AutoTokenizer.from_pretrained(folder), f"random-{folder.name}")


def measure(folder: Path, args: argparse.Namespace) -> list[str]:
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    lm = random_model(folder, args.device, args.dtype)
    if args.light:
        from steer.model.weights import lighten

        lighten(lm.model, args.light)
    formal, informal = read_texts(str(args.formal)), read_texts(str(args.informal))
    corpora = [
        Corpus("formal", tuple(formal[: args.profile_texts]), "formal", "-"),
        Corpus("informal", tuple(informal[: args.profile_texts]), "informal", "-"),
    ]
    settings = ProfileSettings(batch_size=args.batch_size)
    profile_styles(lm, [Corpus(c.name, c.texts[:8], c.source, c.sha256) for c in corpora], settings)  # warm-up
    _sync(args.device)
    start = time.perf_counter()
    profile = profile_styles(lm, corpora, settings)
    _sync(args.device)
    seconds = time.perf_counter() - start
    tokens = sum(profile.counts[c.name].num_tokens for c in corpora)
    rows = [f"| {folder.name} | profile | {tokens} tokens | {seconds:.2f} s | {tokens / seconds:.0f} tokens/s | | |"]
    steerer = Steerer(lm, profile)
    texts = formal[: args.texts]
    fixed = dict(
        max_new_tokens=args.tokens, min_new_tokens=args.tokens, clean=False, loop_guard=False, echo_guard=False
    )
    for preset in ("prompt", "guided"):
        recipe = TransferSettings.preset(preset, batch_size=args.batch_size, **fixed)
        steerer.transfer(texts[: args.batch_size], "formal", "informal", recipe)  # warm-up, untimed
        _sync(args.device)
        start = time.perf_counter()
        results = steerer.transfer(texts, "formal", "informal", recipe)
        _sync(args.device)
        seconds = time.perf_counter() - start
        made = sum(r.info["new_tokens"] for r in results)
        assert made == args.tokens * len(texts), made  # the fixed work really was done
        rows.append(
            f"| {folder.name} | {preset} | {len(texts)} texts × {args.tokens} tokens | {seconds:.2f} s | "
            f"{made / seconds:.0f} tokens/s | {seconds / len(texts):.3f} | {_peak_mib(args.device):.0f} |"
        )
    del lm, steerer
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", type=Path, help="Write the installed models' configs and tokenizers here and stop.")
    ap.add_argument("--configs", type=Path, default=Path(".gpu/configs"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--formal", type=Path, default=Path(".gpu/formal.txt"))
    ap.add_argument("--informal", type=Path, default=Path(".gpu/informal.txt"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--light", default=None, help="CPU: fp16-linear or int8-linear (steer.model.weights).")
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--profile-texts", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.export:
        export(args.export)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    where = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(f"Device: {where}; torch {torch.__version__}; weights {args.dtype}{' + ' + args.light if args.light else ''};"
          f" batch {args.batch_size}; random weights, every text decodes exactly {args.tokens} tokens\n")  # fmt: skip
    print("| model | run | work | seconds | rate | s/text | peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for row in measure(args.configs / name, args):
            print(row, flush=True)
    print("\n" + json.dumps({"args": {k: str(v) for k, v in vars(args).items()}}))


if __name__ == "__main__":
    main()
