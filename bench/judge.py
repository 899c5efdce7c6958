"""LLM judge throughput: rewrites judged per second (three questions each), cold cache, with the
shared prefixes prefilled once (as `steer eval --judge llm` runs it: the instructions, and each
choice question per order of its answers) against every prompt prefilled in full, in the same run,
with peak RSS. The baseline's prompts per rewrite are one per yes/no question and one per choice
ask: under judge-v3, fluency, the style choice's four (rewrite and source, each in both orders of
the names) and the meaning choice's two (both orders of the answers).

    python bench/judge.py --sheets research/reads/2026-12-03-smollm2-135m-nine --model qwen2.5-coder-1.5b --items 24
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steer.evaluation.llm_judge import JudgeItem, LLMJudge  # noqa: E402
from steer.model.loading import load_model  # noqa: E402


def items_of(folder: Path, n: int) -> list[JudgeItem]:
    """The first `n` rewrites of a read's sheets (source, rewrite, direction)."""
    items = []
    for sheet in sorted(folder.glob("sheet-*.jsonl")):
        for line in sheet.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            source, target = row["direction"].split("->")
            items += [JudgeItem(row["source"], text, source, target) for text in row["rewrites"].values()]
    return items[:n]


def full_prompts(judge: LLMJudge, items: list[JudgeItem], batch_size: int) -> None:
    """The baseline: each (item, question) prompt prefilled whole, right-padded, no shared cache."""
    from steer.model.padding import pad_rows

    rows = []
    for it in items:
        item = judge.prompt["item"].format(
            source=it.source_style, target=it.target_style, source_text=it.source, rewrite=it.rewrite
        )
        for q in judge.yes_no:
            question = judge.prompt["questions"][q].format(source=it.source_style, target=it.target_style)
            tail = judge._tokens("\n\nQuestion: " + question + judge.tail)
            rows.append(judge._tokens(judge.head) + judge._tokens(item) + tail)
        for question in judge.choices:
            for ask, text, _, _ in judge.choice_asks(question, [it]):
                head, tail_text = judge._template_pieces(ask)
                rows.append(judge._tokens(head) + judge._tokens(text + tail_text))
    pad = judge.lm.tokenizer.pad_token_id or 0
    per_item = len(rows) // max(1, len(items))
    with torch.no_grad():
        for start in range(0, len(rows), batch_size * per_item):
            ids, mask = pad_rows(rows[start : start + batch_size * per_item], pad, side="left")
            judge.lm.model(input_ids=ids, attention_mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sheets", type=Path, required=True)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dtype", default="auto", help="steer's --dtype (fp16-linear is 4.7x faster on a CPU)")
    args = parser.parse_args()
    items = items_of(args.sheets, args.items)
    lm = load_model(args.model, dtype=args.dtype, progress=False)
    judge = LLMJudge(lm, cache_dir=None, batch_size=args.batch_size)
    result = {"model": lm.model_id, "prompt": judge.version, "dtype": args.dtype, "items": len(items)}
    result["threads"] = torch.get_num_threads()
    start = time.perf_counter()
    judge.verdicts(items)
    shared = time.perf_counter() - start
    start = time.perf_counter()
    full_prompts(judge, items, args.batch_size)
    full = time.perf_counter() - start
    result.update(
        shared_rewrites_per_s=len(items) / shared,
        full_prompt_rewrites_per_s=len(items) / full,
        speedup=full / shared,
        hours_for_9x100x2=9 * 100 * 2 / (len(items) / shared) / 3600,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
