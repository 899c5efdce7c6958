"""One benchmark measurement in a fresh process, printed as JSON (value + peak RSS).

Run by bench/run.py; each configuration gets its own process so peak memory is its own.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steer.model.loading import load_model  # noqa: E402
from steer.profiling.corpus import read_texts  # noqa: E402
from steer.settings import ProfileSettings  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def texts_of(corpus: str, n: int) -> list[str]:
    texts = read_texts(corpus)
    if len(texts) < n:
        texts = (texts * (n // max(len(texts), 1) + 1))[:n]
    return texts[:n]


def profile_steer(lm: Any, texts: list[str], batch_size: int) -> dict[str, float]:
    from steer.profiling.profile import count_activations

    start = time.perf_counter()
    counts, _ = count_activations(lm, "x", texts, ProfileSettings(batch_size=batch_size))
    seconds = time.perf_counter() - start
    return {"tokens": counts.num_tokens, "seconds": seconds, "value": counts.num_tokens / seconds}


def profile_bare(lm: Any, texts: list[str], batch_size: int) -> dict[str, float]:
    """The same length-sorted batches through the base model with no hooks: the machine's limit."""
    from steer.profiling.profile import make_batches, tokenize

    seqs, _ = tokenize(lm.tokenizer, texts, 512)
    batches = make_batches(seqs, batch_size, lm.tokenizer.pad_token_id)
    root = lm.model.base_model
    start = time.perf_counter()
    with torch.inference_mode():
        for b in batches:
            root(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids, use_cache=False)
    seconds = time.perf_counter() - start
    tokens = sum(len(s) for s in seqs)
    return {"tokens": tokens, "seconds": seconds, "value": tokens / seconds}


def profile_official(lm: Any, texts: list[str], pad_to: int) -> dict[str, float]:
    """A faithful re-implementation of the released sNeuron-TST counting: every text padded to
    `pad_to` tokens with EOS, one sequence per forward, and a hook on each MLP that recomputes
    act_fn(gate_proj(x)) from the MLP input and counts > 0 over all positions (padding included)."""
    tok = lm.tokenizer
    mlps = [lm.model.get_submodule(lm.arch.block.format(layer=i) + ".mlp") for i in range(lm.num_layers)]
    counts = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.int64)

    def make(i: int) -> Any:
        def hook(module: Any, args: Any) -> None:
            act = module.act_fn(module.gate_proj(args[0]))
            counts[i] += (act > 0).sum(dim=(0, 1))

        return hook

    handles = [m.register_forward_pre_hook(make(i)) for i, m in enumerate(mlps)]
    useful = 0
    start = time.perf_counter()
    try:
        with torch.no_grad():
            for text in texts:
                ids = tok(text)["input_ids"][:pad_to]
                useful += len(ids)
                padded = torch.tensor([ids + [tok.eos_token_id] * (pad_to - len(ids))])
                lm.model(input_ids=padded)
    finally:
        for h in handles:
            h.remove()
    seconds = time.perf_counter() - start
    return {"tokens": useful, "seconds": seconds, "value": useful / seconds}


def transfer(lm: Any, profile: str, texts: list[str], mode: str, batch_size: int, new_tokens: int) -> dict[str, float]:
    from steer.generation.steerer import PRESETS, Steerer, TransferSettings
    from steer.lab.experiment import parse_mode
    from steer.profiling.profile import StyleProfile

    prof = StyleProfile.load(profile)
    source, target = prof.styles[0], prof.styles[1]
    name, contrast = parse_mode(mode)
    shared = {"batch_size": batch_size, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    if name in PRESETS and name != "prompt":  # a preset as shipped (guided: shift + guidance, 2× the rows)
        settings = TransferSettings.resolve(name, **shared)
    else:  # a bare mode with the benchmark's selection: diff top 1%, contrast β = 0.5
        settings = TransferSettings.resolve(mode=name, contrast=contrast, top_k="1%", method="diff", beta=0.5, **shared)
    return _time_transfer(Steerer(lm, prof), texts, source, target, settings, batch_size)


def _time_transfer(
    steerer: Any, texts: list[str], source: str, target: str, settings: Any, batch_size: int
) -> dict[str, float]:
    steerer.transfer(texts[:batch_size], source, target, settings)  # warm-up
    start = time.perf_counter()
    results = steerer.transfer(texts, source, target, settings)
    seconds = time.perf_counter() - start
    tokens = sum(r.info["new_tokens"] for r in results)
    return {"tokens": tokens, "seconds": seconds, "value": tokens / seconds}


def transfer_official(lm: Any, profile: str, texts: list[str], new_tokens: int) -> dict[str, float]:
    """The released code's contrast: a second full copy of the model without the edit, one text
    at a time; score = log p_edited − log p_unedited under the relative-top filter, greedy."""
    from steer.generation.contrast import relative_top_mask
    from steer.generation.steerer import GENERIC_PROMPT, Steerer, TransferSettings, render_prompt
    from steer.model.hooks import edit_neurons
    from steer.profiling.profile import StyleProfile

    prof = StyleProfile.load(profile)
    source, target = prof.styles[0], prof.styles[1]
    edit = Steerer(lm, prof).build_edit(source, target, TransferSettings.bare(top_k="1%", method="diff"))
    base = copy.deepcopy(lm.model)  # the second model copy
    tok = lm.tokenizer
    produced = 0
    start = time.perf_counter()
    with torch.no_grad(), edit_neurons(lm.activation_sites(), edit):
        for text in texts:
            ids = tok(
                render_prompt(tok, GENERIC_PROMPT, text, source, target), add_special_tokens=False, return_tensors="pt"
            )["input_ids"]
            past_e = past_b = None
            step = ids
            for _ in range(new_tokens):
                out_e = lm.model(input_ids=step, past_key_values=past_e, use_cache=True)
                out_b = base(input_ids=step, past_key_values=past_b, use_cache=True)
                past_e, past_b = out_e.past_key_values, out_b.past_key_values
                le = torch.log_softmax(out_e.logits[:, -1].float(), -1)
                lb = torch.log_softmax(out_b.logits[:, -1].float(), -1)
                scores = (le - lb).masked_fill(~relative_top_mask(le, 0.1), float("-inf"))
                step = scores.argmax(-1, keepdim=True)
                produced += 1
    seconds = time.perf_counter() - start
    return {"tokens": produced, "seconds": seconds, "value": produced / seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    # bench/run.py always passes model, corpus and profile: their defaults live there only.
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--pad-to", type=int, default=1024)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--mode", default="prompt")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.kind in ("load_cold", "load_warm"):
        if args.kind == "load_cold":
            os.environ["STEER_CACHE"] = tempfile.mkdtemp(prefix="steer-bench-cache-")
        start = time.perf_counter()
        load_model(args.model, progress=False)
        result: dict[str, float] = {"seconds": time.perf_counter() - start}
        result["value"] = result["seconds"]
    else:
        lm = load_model(args.model, progress=False)
        texts = texts_of(args.corpus, args.texts)
        if args.kind == "profile_steer":
            result = profile_steer(lm, texts, args.batch_size)
        elif args.kind == "profile_bare":
            result = profile_bare(lm, texts, args.batch_size)
        elif args.kind == "profile_official":
            result = profile_official(lm, texts, args.pad_to)
        elif args.kind == "transfer":
            result = transfer(lm, args.profile, texts, args.mode, args.batch_size, args.new_tokens)
        elif args.kind == "transfer_official":
            result = transfer_official(lm, args.profile, texts, args.new_tokens)
        elif args.kind == "model_only":
            result = {"value": 0.0}
        else:
            raise SystemExit(f"unknown kind {args.kind}")
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
