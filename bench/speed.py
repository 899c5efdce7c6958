"""Rewrite speed against the machine's own bound, in one run: matmul FLOP/s and memory bandwidth
measured first, then s/text of the plain prompt and the default (steer-and-rerank) with and without
the shared prompt prefix, each run's prefill and decode rates as a fraction of those bounds, the
token identity of the two prefill paths, and peak RSS. Printed as Markdown.

Prefill is bounded by FLOPs (2 × parameters per token), a decoding step by the bytes of weights it
reads (every step reads every weight once, whatever the batch), so the bounds are
  prefill tokens/s ≤ FLOP/s ÷ (2 · parameters)     decode steps/s ≤ bandwidth ÷ weight bytes.

    python bench/speed.py --profile data/profiles/formality-smollm2-135m.safetensors \
        --corpus ../shared/data/formality/dev.formal.txt --texts 20
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from options import decoding_options, load_decoding  # noqa: E402  (bench/options.py, this script's folder)

from steer.generation.rerank import Reranker  # noqa: E402
from steer.generation.steerer import Steerer, TransferSettings  # noqa: E402
from steer.ladder import RerankSettings  # noqa: E402


def matmul_flops(size: int = 2048, repeats: int = 8) -> float:
    """float32 FLOP/s of a square matrix product (the best of `repeats`)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * size**3 / best


def bandwidth(megabytes: int = 1024, repeats: int = 5) -> float:
    """Bytes/s of reading a large float32 tensor once (a sum: reads, writes almost nothing)."""
    x = torch.ones(megabytes * 2**20 // 4)
    x.sum()
    best = min(_timed(lambda: x.sum()) for _ in range(repeats))
    return x.numel() * 4 / best


def model_size(model: torch.nn.Module) -> tuple[int, int]:
    """Parameters and the bytes of weights a decoding step reads: every parameter, and the lighter
    linear layers' weights (`--dtype fp16-linear`/`int8-linear`: 2 / 1 byte each), which are not
    parameters."""
    from steer.model.weights import Fp16Linear, is_light

    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for module in model.modules():
        if is_light(module):
            count = module.in_features * module.out_features
            params += count
            weight_bytes += count * (2 if isinstance(module, Fp16Linear) else 1)
    return params, weight_bytes


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@contextmanager
def forward_clock(model: torch.nn.Module) -> Iterator[dict[str, float]]:
    """Time every forward pass of `model` and count its tokens, split into prefill (more than one
    position per row) and decode (one); removes its own two hooks on exit."""
    seen = {"prefill_s": 0.0, "prefill_tokens": 0.0, "decode_s": 0.0, "decode_steps": 0.0, "decode_tokens": 0.0}
    started: list[float] = []

    def before(module: Any, args: Any, kwargs: Any) -> None:
        started.append(time.perf_counter())

    def after(module: Any, args: Any, kwargs: Any, out: Any) -> None:
        seconds = time.perf_counter() - started.pop()
        ids = kwargs.get("input_ids")
        rows, width = ids.shape
        if width > 1:
            seen["prefill_s"] += seconds
            mask = kwargs.get("attention_mask")
            seen["prefill_tokens"] += ids.numel() if mask is None else int(mask[:, -width:].sum())
        else:
            seen["decode_s"] += seconds
            seen["decode_steps"] += 1
            seen["decode_tokens"] += rows

    handles = [
        model.register_forward_pre_hook(before, with_kwargs=True),
        model.register_forward_hook(after, with_kwargs=True),
    ]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def main() -> None:
    ap = argparse.ArgumentParser()
    decoding_options(ap)
    ap.add_argument("--skip-default", action="store_true", help="Time the plain prompt only.")
    args = ap.parse_args()
    flops, bytes_per_s = matmul_flops(), bandwidth()
    profile, lm, texts = load_decoding(args)
    params, weight_bytes = model_size(lm.model)
    prefill_bound = flops / (2 * params)
    step_bound = bytes_per_s / weight_bytes
    print(f"Machine: {torch.get_num_threads()} threads, float32 matmul {flops / 1e9:.1f} GFLOP/s, "
          f"read bandwidth {bytes_per_s / 1e9:.1f} GB/s")  # fmt: skip
    print(f"Model: {profile.model_id}, --dtype {args.dtype} ({params / 1e6:.0f}M parameters, "
          f"{weight_bytes / 2**30:.2f} GiB of weights): "
          f"prefill ≤ {prefill_bound:.0f} tokens/s, decode ≤ {step_bound:.1f} steps/s\n")  # fmt: skip
    steerer = Steerer(lm, profile)
    plain = TransferSettings.preset("prompt", max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    base = TransferSettings.preset("guided", max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    reranker = None
    if not args.skip_default:
        from steer.profiling.probe import load_probe_for

        reranker = Reranker(steerer, load_probe_for(args.profile, lm))

    def run_prompt() -> list[list[int]]:
        results = steerer.transfer(texts, args.source, args.target, plain)
        return [r.info["token_ids"] for r in results]

    def run_default() -> list[list[int]]:
        assert reranker is not None
        chosen = reranker.transfer(texts, args.source, args.target, RerankSettings(base=base))
        return [r.info["token_ids"] for r in chosen]

    runs = {"prompt": run_prompt} if args.skip_default else {"prompt": run_prompt, "default (rerank)": run_default}
    steerer.transfer(texts[:2], args.source, args.target, plain)  # warm-up, untimed
    # the default's prefill includes the probe's and fluency's scoring passes over its candidates
    print("| run | shared prefix | s/text | vs prompt | prefill tok/s | of bound | decode steps/s | of bound "
          "| decode tok/s | peak RSS MiB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    first, tokens = None, {}
    for name, run in runs.items():
        for shared in (False, True):
            # a steerer (and its reranker) built with the switch; run_prompt and run_default read these names
            steerer = Steerer(lm, profile, share_prompt_prefix=shared)
            reranker = Reranker(steerer, reranker.probe) if reranker is not None else None
            with forward_clock(lm.model) as seen:
                start = time.perf_counter()
                tokens[name, shared] = run()
                per_text = (time.perf_counter() - start) / len(texts)
            first = first or per_text
            prefill = seen["prefill_tokens"] / max(seen["prefill_s"], 1e-9)
            steps = seen["decode_steps"] / max(seen["decode_s"], 1e-9)
            decode = seen["decode_tokens"] / max(seen["decode_s"], 1e-9)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            cells = [name, "yes" if shared else "no", f"{per_text:.2f}", f"{per_text / first:.2f}×", f"{prefill:.0f}"]
            cells += [f"{prefill / prefill_bound:.2f}", f"{steps:.2f}", f"{steps / step_bound:.2f}", f"{decode:.1f}"]
            print("| " + " | ".join([*cells, f"{rss:.0f}"]) + " |")
    for name in runs:
        same = sum(a == b for a, b in zip(tokens[name, False], tokens[name, True], strict=True))
        print(f"\n{name}: {same} of {len(texts)} rewrites token-identical with and without the shared prompt prefix")


if __name__ == "__main__":
    main()
