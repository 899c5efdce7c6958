"""How to ask an LLM judge about style: three framings of the style question against the blind-read
labels (and, as a check that the judge reads style at all, on human dev texts of both styles).

    python research/scripts/judge_style_framings.py --data ../shared/data --dtype fp16-linear \
        research/reads/2026-12-03-smollm2-135m-nine/judge-agreement.json \
        research/reads/2026-12-04-qwen1.5b-seven/judge-agreement.json

- yes/no (judge-v1): the stored P(Yes) of "Is the rewrite clearly written in a {target} style …?"
- choice (judge-v2, `steer.evaluation.llm_judge`): "Is the text below written in a {a} style or in a {b}
  style?" about a text alone, both orders of the names; target-ness = the log-odds of the target's
  name, averaged over the orders; scored on the rewrite alone and as rewrite minus source.
- likelihood: log P(text | "Here is a sentence written in a {style} style:") under the target minus
  under the source style (a generative classifier: no question), rewrite minus source.
Prints each framing's AUC against the read's style = 2 and usable = 1 for the judge's own rewrites,
another model's and all; on human texts, 20 random dev texts per style (seed 11).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_agreement import combined  # noqa: E402
from judge_signal import auc  # noqa: E402

from steer.evaluation.llm_judge import LLMJudge  # noqa: E402

PAIRS = {"formality": ("formal", "informal"), "politeness": ("polite", "impolite"), "paradetox": ("toxic", "neutral"),
         "yelp": ("positive", "negative"), "shakespeare": ("shakespearean", "modern")}  # fmt: skip


class Framings:
    """The choice (through the packaged judge) and the likelihood framing, each text scored once."""

    def __init__(self, judge: LLMJudge) -> None:
        self.judge, self.lm = judge, judge.lm
        self.loglik: dict[tuple[str, str], float] = {}
        self.prefixes: dict[str, tuple[object, torch.Tensor]] = {}

    def choice(self, pairs: list[tuple[str, str, str]]) -> list[float]:
        """Target-ness of each (text, target, other), by the packaged judge's own computation."""
        return self.judge.target_ness(pairs)

    def likelihood(self, pairs: list[tuple[str, str, str]]) -> list[float]:
        """log P(text | target's prefix) − log P(text | other's prefix) of each (text, target, other)."""
        from steer.model.padding import pad_rows
        from steer.model.prefix import cache_keyword, cache_of, expand_cache

        model, tok = self.lm.model, self.lm.tokenizer
        for style in {s for _, t, o in pairs for s in (t, o)}:
            texts = sorted({x for x, t, o in pairs if style in (t, o)} - {x for x, s in self.loglik if s == style})
            if style not in self.prefixes:
                article = "an" if style[0] in "aeiou" else "a"
                ids = tok.encode(
                    f"Here is a sentence written in {article} {style} style:\n\n", add_special_tokens=False
                )
                with torch.no_grad():
                    out = model(input_ids=torch.tensor([ids]), use_cache=True)
                self.prefixes[style] = (cache_of(out), torch.log_softmax(out.logits[0, -1].float(), -1))
            prefix, first = self.prefixes[style]
            for i in range(0, len(texts), 16):
                chunk = texts[i : i + 16]
                rows = [tok.encode(x, add_special_tokens=False) or [tok.eos_token_id] for x in chunk]
                ids, mask = pad_rows(rows, tok.pad_token_id or 0, side="right")
                width = prefix.get_seq_length()
                with torch.no_grad():
                    full = torch.cat([torch.ones(len(chunk), width, dtype=torch.long), mask], 1)
                    out = model(
                        input_ids=ids, attention_mask=full,
                        position_ids=(torch.arange(ids.shape[1]) + width).expand(len(chunk), -1), use_cache=True,
                        **{cache_keyword(): expand_cache(model, prefix, len(chunk))},
                    )  # fmt: skip
                logp = torch.log_softmax(out.logits.float(), -1)
                for r, (x, row) in enumerate(zip(chunk, rows, strict=True)):
                    rest = (
                        logp[r, torch.arange(len(row) - 1), torch.tensor(row[1:])].sum().item() if len(row) > 1 else 0.0
                    )
                    self.loglik[(x, style)] = first[row[0]].item() + rest
        return [self.loglik[(x, t)] - self.loglik[(x, o)] for x, t, o in pairs]


def human(data: Path) -> dict[str, tuple[list[tuple[str, str, str]], list[bool]]]:
    """20 random dev texts of each style per corpus (seed 11), labelled True for the first style."""
    out = {}
    for name, (s1, s2) in PAIRS.items():
        folder = data / name
        if (folder / "dev.tsv").exists():
            rows = [line.split("\t") for line in (folder / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
            texts = {s1: [r[0].strip() for r in rows if r[0].strip()],
                     s2: [r[1].strip() for r in rows if len(r) > 1 and r[1].strip()]}  # fmt: skip
        else:
            lines = {s: (folder / f"dev.{s}.txt").read_text(encoding="utf-8").splitlines() for s in (s1, s2)}
            texts = {s: [t.strip() for t in lines[s] if t.strip()] for s in (s1, s2)}
        rng = random.Random(11)
        sample = {s: rng.sample(t, 20) for s, t in texts.items()}
        out[name] = ([(x, s1, s2) for s in (s1, s2) for x in sample[s]], [True] * 20 + [False] * 20)
    return out


def main() -> None:
    from steer.model.loading import load_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agreement", type=Path, nargs="+", help="judge-agreement.json files (judge-v1 answers)")
    parser.add_argument("--data", type=Path, help="the corpora folder, for the human-text check")
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()
    framings = Framings(LLMJudge(load_model(args.judge, dtype=args.dtype, progress=False)))
    if args.data is not None:
        for name, (pairs, labels) in human(args.data).items():
            print(f"human {name}: AUC choice {auc(framings.choice(pairs), labels):.3f}, "
                  f"likelihood {auc(framings.likelihood(pairs), labels):.3f}")  # fmt: skip
    items = combined(args.agreement)
    rewrites = [(i["rewrite"], *reversed(i["direction"].split("->"))) for i in items]
    sources = [(i["source"], t, o) for (_, t, o), i in zip(rewrites, items, strict=True)]
    chosen, n = framings.choice(rewrites + sources), len(items)  # each text's target-ness, computed once
    scores = {
        "yes/no (judge-v1)": [i["llm"]["style"] for i in items],
        "choice, rewrite": chosen[:n],
        "choice, rewrite − source": [r - s for r, s in zip(chosen[:n], chosen[n:], strict=True)],
        "likelihood, rewrite − source": [
            r - s for r, s in zip(framings.likelihood(rewrites), framings.likelihood(sources), strict=True)
        ],
    }
    for whose, same in (("another model's", False), ("its own", True), ("all", None)):
        rows = [k for k, i in enumerate(items) if same is None or i["same_model_judge"] == same]
        style = [items[k]["labels"]["style"] == 2 for k in rows]
        usable = [items[k]["labels"]["usable"] == 1 for k in rows]
        print(f"{whose} rewrites ({len(rows)}): AUC vs read style = 2 / usable")
        for name, s in scores.items():
            print(f"  {name}: {auc([s[k] for k in rows], style):.3f} / {auc([s[k] for k in rows], usable):.3f}")


if __name__ == "__main__":
    main()
