"""What one training step of `steer train` costs against a plain forward pass, in the same run:
per batch of (prompt, reply) sequences, the plain model's forward pass without gradients (the
yardstick), the first epoch's step (a full pass that also keeps the hidden state entering the
lowest edited block, then the backward pass through the edited blocks), and a later epoch's step
(the edited blocks only, from that hidden state, then backward). Tokens per second and the ratio
to the plain pass; printed as a Markdown table.

    python bench/training.py --profile data/profiles/formality-smollm2-135m.safetensors --texts 32
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from options import direction_options  # noqa: E402  (bench/options.py, this script's folder)

from steer.generation.steerer import Steerer, TransferSettings  # noqa: E402
from steer.generation.training import Batch, EditParameters, Example, batch_loss, frozen  # noqa: E402
from steer.model.loading import load_model  # noqa: E402
from steer.profiling.corpus import read_texts  # noqa: E402
from steer.profiling.profile import StyleProfile  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    direction_options(ap)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3, help="timed passes over the batches per kind (the median)")
    args = ap.parse_args()
    prof = StyleProfile.load(args.profile)
    lm = load_model(prof.model_id, dtype="float32")
    texts = [t for t in read_texts(args.corpus) if t.strip()][: args.texts]
    prompts = Steerer(lm, prof).encode_prompts(texts, args.source, args.target, TransferSettings.preset("prompt"))[0]
    tok = lm.tokenizer
    examples = [
        Example(p, tok(t, add_special_tokens=False)["input_ids"][:48]) for p, t in zip(prompts, texts, strict=True)
    ]
    selection = prof.neurons(args.source, args.target, top_k="1%", method="diff")
    mask = selection.source.mask | selection.target.mask
    mask[: prof.num_layers // 2] = False  # `steer train`'s default: the upper half
    first = int(mask.any(1).nonzero().min())
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batches = [Batch.of(examples[i : i + args.batch_size], pad) for i in range(0, len(examples), args.batch_size)]
    tokens = sum(int(b.mask.sum()) for b in batches)
    params = EditParameters(mask)

    def plain() -> None:
        with torch.no_grad():
            for b in batches:
                lm.model(input_ids=b.ids, attention_mask=b.mask, use_cache=False)

    def step(keep: bool) -> None:
        for b in batches:
            if not keep:
                b.cached = None  # every step is a first-epoch step
            batch_loss(lm, b, params.edit(), first).backward()

    timings: dict[str, float] = {}
    with frozen(lm.model):
        for name, run in (
            ("plain forward (no gradient)", plain),
            ("first epoch: full pass + backward", lambda: step(False)),
        ):
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            timings[name] = sorted(times)[len(times) // 2]
        step(True)  # fill the caches
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            step(True)
            times.append(time.perf_counter() - start)
        timings["later epochs: edited blocks + backward"] = sorted(times)[len(times) // 2]
    base = timings["plain forward (no gradient)"]
    shape = f"{len(examples)} sequences ({tokens} tokens) in batches of {args.batch_size}"
    edited = f"edited blocks {first}–{prof.num_layers - 1}, {int(mask.sum())} neurons"
    print(f"{lm.model_id}, float32, {shape}; {edited}; threads {torch.get_num_threads()}\n")
    print("| pass | s per pass over the texts | tokens/s | × plain forward |\n|---|---|---|---|")
    for name, seconds in timings.items():
        print(f"| {name} | {seconds:.2f} | {tokens / seconds:.0f} | {seconds / base:.2f} |")


if __name__ == "__main__":
    main()
