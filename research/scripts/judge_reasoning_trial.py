"""Trial: the LLM judge writes a short check of style, meaning and fluency before it answers
"would they take the rewrite as it is?", and P(Yes) after "Answer:" is compared with the read's usable.

    python research/scripts/judge_reasoning_trial.py [--prime "Style: "] [-o OUT.json]

96 rewrites of the labelled set (research/reads/judge-agreement-judge-v2.json) drawn at random (seed
11): 72 outside sentiment, 24 in it. Greedy, at most 110 new tokens; the reply may be primed
(`--prime`) so that it starts with a check rather than with the answer. Not part of the judge: a
trial of whether reasoning first helps the 1.5B (research/findings.md, 2026-12-06; its two runs'
outputs in research/judge-trials/2026-12-06-reasoning-*.json). Only 9 of the 96 are read usable, so a
κ here is coarse.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from steer.evaluation.llm_judge import agreement  # noqa: E402

LABELLED = ROOT / "research" / "reads" / "judge-agreement-judge-v2.json"
SENTIMENT = {"negative->positive", "positive->negative"}
QUESTION = (
    "Someone asked for this {source} text to be rewritten in a {target} style.\n\nSource text: {src}\nRewrite: {rw}\n\n"
    "Would they take the rewrite as it is? It must be clearly {target} (a copy or a near-copy of the source is not), "
    "keep everything the source says{flip} (nothing added, nothing dropped, not a reply to the source), and be "
    "fluent. Check each point in one short sentence (Style: ..., Meaning: ..., Fluency: ...), then end with "
    "'Answer: Yes' or 'Answer: No'."
)


def main() -> None:
    import torch

    from steer.model.loading import load_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b", help="the judge model (default the 1.5B)")
    parser.add_argument("--dtype", default="fp16-linear", help="its weights' format (default fp16-linear)")
    parser.add_argument("--prime", default="", help="text the judge's reply starts with (e.g. 'Style: ')")
    parser.add_argument("-o", "--out", type=Path, help="write each item's reasoning and P(Yes) here")
    args = parser.parse_args()
    if args.out and args.out.exists():
        parser.error(f"--out {args.out} exists; give a new file name (it is never overwritten)")
    items = json.loads(LABELLED.read_text(encoding="utf-8"))["items"]
    rng = random.Random(11)
    sample = rng.sample([i for i in items if i["direction"] not in SENTIMENT], 72)
    sample += rng.sample([i for i in items if i["direction"] in SENTIMENT], 24)
    lm = load_model(args.judge, dtype=args.dtype, progress=False)
    tok, model = lm.tokenizer, lm.model
    tok.padding_side = "left"

    def prompt(item: dict) -> str:
        source, target = item["direction"].split("->")
        flip = " apart from the sentiment, which must be reversed" if item["direction"] in SENTIMENT else ""
        text = QUESTION.format(source=source, target=target, src=item["source"], rw=item["rewrite"], flip=flip)
        chat = [{"role": "user", "content": text}]
        return tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) + args.prime

    yes = [tok.encode(w, add_special_tokens=False)[0] for w in (" Yes", "Yes")]
    no = [tok.encode(w, add_special_tokens=False)[0] for w in (" No", "No")]
    out = []
    for start in range(0, len(sample), 8):
        batch = sample[start : start + 8]
        enc = tok([prompt(i) for i in batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            made = model.generate(**enc, max_new_tokens=110, do_sample=False, pad_token_id=tok.pad_token_id or 0)
        checks = [
            t.split("Answer:")[0].rstrip()
            for t in tok.batch_decode(made[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        ]
        enc = tok(
            [prompt(i) + c + "\nAnswer:" for i, c in zip(batch, checks, strict=True)],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        with torch.no_grad():
            logp = model(**enc).logits[:, -1].float().log_softmax(-1)
        p_yes = torch.sigmoid(torch.logsumexp(logp[:, yes], -1) - torch.logsumexp(logp[:, no], -1)).tolist()
        for item, check, p in zip(batch, checks, p_yes, strict=True):
            labels = {
                "usable": item["labels"]["usable"] == 1,
                "judge_v2": item["llm_usable"],
                "rules": item["usable_rule"],
            }
            out.append({"direction": item["direction"], "p_yes": p, "check": check, **labels})
    if args.out:
        args.out.write_text(json.dumps(out, indent=1), encoding="utf-8")
    top, count = Counter(o["check"][:40] for o in out).most_common(1)[0]
    print(f"P(Yes) ≥ 0.9 for {sum(o['p_yes'] >= 0.9 for o in out)} of {len(out)}; commonest check {top!r} ({count})")
    for group, rows in (
        ("all", out),
        ("other seven", [o for o in out if o["direction"] not in SENTIMENT]),
        ("sentiment", [o for o in out if o["direction"] in SENTIMENT]),
    ):
        labels = [o["usable"] for o in rows]
        cuts = ", ".join(
            f"{cut}: {agreement([o['p_yes'] >= cut for o in rows], labels)['kappa']:.2f}"
            for cut in (0.3, 0.5, 0.7, 0.9)
        )
        v2 = agreement([o["judge_v2"] for o in rows], labels)["kappa"]
        rules = agreement([o["rules"] for o in rows], labels)["kappa"]
        print(
            f"{group} ({len(rows)}, {sum(labels)} read usable): κ at P(Yes) ≥ {cuts}; "
            f"judge-v2 {v2:.2f}, rules {rules:.2f}"
        )


if __name__ == "__main__":
    main()
