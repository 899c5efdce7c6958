"""The decoding loop three ways on the same prompts, in one run: transformers' stock greedy
`generate()`, `generate(custom_generate=compact_greedy)` (transformers prepares, steer's loop drops
finished rows) and `greedy_decode` called directly (what the steerer does). Wall time per text (the
ratio to stock `generate()` is the figure to read) and whether the token ids are identical.

    python bench/custom_generate.py --corpus ../shared/data/formality/dev.formal.txt --texts 32
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from options import decoding_options, load_decoding  # noqa: E402  (bench/options.py, this script's folder)

from steer.generation.decoding import compact_greedy, greedy_decode  # noqa: E402
from steer.generation.steerer import Steerer, TransferSettings  # noqa: E402
from steer.model.padding import pad_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    decoding_options(ap)
    ap.add_argument("--copies", type=int, default=4, help="rows per text, as a rerank ladder decodes")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    profile, lm, texts = load_decoding(args)
    tok, model = lm.tokenizer, lm.model
    prompts, _ = Steerer(lm, profile).encode_prompts(texts, args.source, args.target, TransferSettings.preset("prompt"))
    eos = model.generation_config.eos_token_id
    batches = []
    for start in range(0, len(prompts), args.batch_size):
        ids, mask = pad_rows(prompts[start : start + args.batch_size], tok.pad_token_id, "left")
        batches.append((ids.repeat(args.copies, 1), mask.repeat(args.copies, 1)))
    common = {"max_new_tokens": args.max_new_tokens, "pad_token_id": tok.pad_token_id, "eos_token_id": eos}

    def stock(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model.generate(input_ids=ids, attention_mask=mask, do_sample=False, **common)

    def custom(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, custom_generate=compact_greedy, **common
        )

    def direct(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return greedy_decode(model, ids, mask, **common)

    ways = {"stock generate()": stock, "generate(custom_generate=compact_greedy)": custom, "greedy_decode": direct}
    stock(*batches[0])  # warm-up, untimed
    seconds = {name: [] for name in ways}
    outputs: dict[str, list[torch.Tensor]] = {}
    for _ in range(args.repeats):
        for name, fn in ways.items():  # alternating, so drift hits every way alike
            start = time.perf_counter()
            outputs[name] = [fn(*b) for b in batches]
            seconds[name].append(time.perf_counter() - start)
    print(
        f"{len(texts)} texts × {args.copies} rows of {args.corpus} ({args.source} → {args.target} prompt), greedy, "
        f"max {args.max_new_tokens} new tokens, {args.batch_size} texts per batch, {torch.get_num_threads()} threads, "
        f"best of {args.repeats}\n"
    )
    print("| loop | s / text | vs stock generate() | token ids equal to stock |")
    print("|---|---|---|---|")
    base = min(seconds["stock generate()"])
    for name in ways:
        best = min(seconds[name])
        same = all(torch.equal(a, b) for a, b in zip(outputs[name], outputs["stock generate()"], strict=True))
        print(f"| {name} | {best / len(texts):.3f} | {best / base:.2f}× | {'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
