"""Which rerank ladder and length weight to ship: measured on the tuning texts, never the evaluated ones.

For every direction of a run config, the rungs of the full ladder (plain prompt, guided λ = 1, 2, 3)
are taken from the run's `outputs/` (tuning decodes them) or decoded, ranked once by the style
probe, MiniLM similarity and fluency, and then every sub-ladder × length weight × probe exponent is
re-chosen from the stored candidate scores — no decoding per variant. Each variant is scored with
the *selection* judge (the one `steer tune` uses; a judge never picks, so the evaluation judge is
not consulted): J, accuracy, similarity, self-BLEU and length ratio, printed as Markdown.

    python bench/rerank_ladder.py configs/formality.toml --data-dir ../shared/data/formality -o runs/formality-rerank
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steer.evaluate import evaluate, self_bleu  # noqa: E402
from steer.experiment import Runner, load_experiment, mode_settings  # noqa: E402
from steer.models import load_model  # noqa: E402
from steer.rerank import Reranker, RerankSettings, candidate_scores, length_term  # noqa: E402
from steer.transfer import Steerer  # noqa: E402

FULL = (0.0, 1.0, 2.0, 3.0)
LADDERS = [(0.0, 1.0, 2.0, 3.0), (0.0, 1.0, 2.0), (0.0, 2.0, 3.0), (0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]
WEIGHTS = [0.0, 0.5, 1.0, 2.0]
EXPONENTS = [1.0, 0.5, 0.25]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--data-dir")
    ap.add_argument("-o", "--out", required=True, help="the run directory (outputs/ and probe are reused)")
    args = ap.parse_args()
    exp = load_experiment(args.config, data_dir=args.data_dir)
    lm = load_model(exp.model)
    runner = Runner(exp, args.out, lm, progress=False)
    probe = runner.probe()
    selector = runner.scorers(selecting=True)
    print(f"# {exp.name}: rerank variants on the tuning texts (selection judge: {selector.classifier.name})\n")
    totals: dict[tuple, list[dict[str, float]]] = {}
    for full in exp.directions:
        d = replace(full, texts=full.tune_texts, references=full.tune_references)
        texts = list(d.texts)
        rungs, decoded = runner.rungs(d, FULL, "tune-rerank")
        settings = RerankSettings(FULL, mode_settings("guided", exp.base), 0.0)
        ranked = Reranker(Steerer(lm, runner.profile()), probe, runner.scorers().embedder).rank(
            texts, d.target, decoded, settings, rungs
        )
        per_rung = [
            evaluate([r.output for r in rows], sources=texts, target=d.target, metrics=("j",), scorers=selector,
                     per_sentence=True)["sentences"]
            for rows in decoded
        ]  # fmt: skip
        j = [[a * max(s, 0.0) * f for a, s, f in zip(x["accuracy"], x["similarity"], x["fluency"], strict=True)]
             for x in per_rung]  # fmt: skip
        print(f"## {d.name} ({len(texts)} tuning texts)\n")
        print("| ladder | length w | probe exp | J | Acc | Sim | sBLEU | Len | chosen λ |")
        print("|---|---|---|---|---|---|---|---|---|")
        for ladder, w, e in itertools.product(LADDERS, WEIGHTS, EXPONENTS):
            if len(ladder) == 1 and (w or e != 1.0):
                continue
            idx = [FULL.index(x) for x in ladder]
            picks = []
            for i, r in enumerate(ranked):
                cands = r.info["rerank"]["candidates"]
                scores = [_score(cands[k], texts[i], w, e) for k in idx]
                picks.append(idx[max(range(len(idx)), key=lambda m: (scores[m], -m))])
            outs = [decoded[k][i].output for i, k in enumerate(picks)]
            row = {
                "j": 100 * sum(j[k][i] for i, k in enumerate(picks)) / len(texts),
                "acc": 100 * sum(per_rung[k]["accuracy"][i] > 0.5 for i, k in enumerate(picks)) / len(texts),
                "sim": sum(per_rung[k]["similarity"][i] for i, k in enumerate(picks)) / len(texts),
                "sbleu": self_bleu(outs, texts).value,
                "len": sum(len(o.split()) / max(len(t.split()), 1) for o, t in zip(outs, texts, strict=True))
                / len(texts),
            }
            totals.setdefault((ladder, w, e), []).append(row)
            counts = ",".join(f"{FULL[k]:g}:{picks.count(k)}" for k in idx)
            print(
                f"| {','.join(f'{x:g}' for x in ladder)} | {w:g} | {e:g} | {row['j']:.1f} | {row['acc']:.1f} | "
                f"{row['sim']:.3f} | {row['sbleu']:.1f} | {row['len']:.2f} | {counts} |"
            )
        for k, x in enumerate(FULL):
            outs = [r.output for r in decoded[k]]
            row = {
                "j": 100 * sum(j[k]) / len(texts),
                "acc": 100 * sum(p > 0.5 for p in per_rung[k]["accuracy"]) / len(texts),
                "sim": sum(per_rung[k]["similarity"]) / len(texts),
                "sbleu": self_bleu(outs, texts).value,
                "len": sum(len(o.split()) / max(len(t.split()), 1) for o, t in zip(outs, texts, strict=True))
                / len(texts),
            }
            totals.setdefault((("only", x), 0.0, 1.0), []).append(row)
            print(f"| only λ={x:g} | – | – | {row['j']:.1f} | {row['acc']:.1f} | {row['sim']:.3f} | "
                  f"{row['sbleu']:.1f} | {row['len']:.2f} | |")  # fmt: skip
        print()
    print("## Mean over directions\n")
    print("| variant | J | Acc | Sim | sBLEU | Len |")
    print("|---|---|---|---|---|---|")
    for key, rows in sorted(totals.items(), key=lambda kv: -sum(r["j"] for r in kv[1])):
        mean = {m: sum(r[m] for r in rows) / len(rows) for m in rows[0]}
        print(f"| {key} | {mean['j']:.1f} | {mean['acc']:.1f} | {mean['sim']:.3f} | {mean['sbleu']:.1f} | "
              f"{mean['len']:.2f} |")  # fmt: skip


def _score(candidate: dict, source: str, weight: float, exponent: float) -> float:
    """The product steer.rerank ranks by, with this variant's length weight and probe exponent."""
    length = length_term(candidate["output"], source, weight)
    return candidate_scores(
        [candidate["style"]], [candidate["similarity"]], [candidate["fluency"]], [length], exponent
    )[0]


if __name__ == "__main__":
    main()
