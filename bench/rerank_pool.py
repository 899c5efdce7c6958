"""Which rerank candidates to decode: a pool of recipes on the tuning texts, every K-subset re-chosen.

For every direction of the run configs, a pool of candidate recipes — the plain prompt, the guided
preset at λ = 1, 2, 3 and shift *without* guidance at several λ (one decoded row per text instead
of the guided preset's two) — is decoded on the tuning texts (reused from the run's `outputs/`
where tuning already decoded them), ranked once by the style probe, MiniLM similarity and fluency,
and every subset of the pool that holds the plain prompt is re-chosen from the stored scores. Each
subset is scored with the *selection* judge (never the evaluation judge): J, accuracy, similarity,
and whether accuracy rose ≥ min(10, 95 − prompt) points at similarity ≥ 0.8× prompting's. Rows =
decoded rows per text, the decoding cost.

    python bench/rerank_pool.py configs/formality.toml --data-dir ../shared/data/formality -o runs/formality \
        --json pool.jsonl          # once per corpus: decodes the pool, appends one table per direction
    python bench/rerank_pool.py summarise pool.jsonl   # every subset × probe exponent, best usable first,
                                                       # then the default ladder under each choice rule
                                                       # (--score-only: subsets chosen as before usable first)

Pool names: p = the plain prompt (rung 0); gλ = the guided preset at λ (rung λ); sλ = the same
shift without guidance (rung uλ); d = the paper's neurons switched off at generated positions
inside guidance (not a rung type: measured, not chosen). A `kβ` suffix (`g3k2`) favours the
source's content words by β (`keep_words`, steer.generation.keeping); an `aα` suffix after it
(`g3a0.02`, `g3k4a0.02`) sets guidance's plausibility filter α (default 0.1).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steer.evaluation.metrics import evaluate  # noqa: E402
from steer.generation.rerank import Reranker, candidate_scores, flag_level, pick  # noqa: E402
from steer.lab.experiment import load_experiment  # noqa: E402
from steer.lab.runner import Runner  # noqa: E402
from steer.ladder import RerankSettings, Rung  # noqa: E402
from steer.model.loading import load_model  # noqa: E402
from steer.scoring.encoders import SELECTION_ENCODER, shared_embedder  # noqa: E402
from steer.settings import TransferSettings  # noqa: E402


def pool(base: TransferSettings) -> dict[str, TransferSettings]:
    """The recipes a run builds for these rungs (so their outputs are shared), plus `d`."""
    guided = TransferSettings.resolve("guided", base=base)
    recipes = {"p": TransferSettings.resolve("prompt", base=base)}
    for x in (1.0, 2.0, 3.0, 4.0):
        recipes[f"g{x:g}"] = Rung(x).recipe(guided)
    for x in (0.25, 0.5, 0.75, 1.0):  # without guidance λ ≥ 2 wrecks the text (measured on formality: J ≤ 3)
        recipes[f"s{x:g}"] = Rung(x, guided=False).recipe(guided)
    # the paper's neurons switched off, at generated positions only, inside guidance
    recipes["d"] = TransferSettings.resolve("guided", base=base, mode="deactivate", method="paper", top_k="1%")
    # few-shot: k texts of the target style nearest the source shown before the instruction, alone and with the shift
    recipes["f"] = replace(recipes["p"], examples=EXAMPLES)
    for x in (1.0, 2.0, 3.0):
        recipes[f"fg{x:g}"] = Rung(x, shots=True).recipe(guided, EXAMPLES)
    recipes["fs0.5"] = Rung(0.5, guided=False, shots=True).recipe(guided, EXAMPLES)
    return recipes


EXAMPLES = RerankSettings.examples


def recipe_of(recipes: dict[str, TransferSettings], name: str) -> TransferSettings:
    """A pool name; `NAMEkβ` is NAME with the source's content words favoured by β (`keep_words`),
    `NAMEaα` (after any `kβ`) NAME with guidance's plausibility filter at α instead of 0.1."""
    name, _, alpha = name.partition("a")
    base, _, beta = name.partition("k")
    recipe = replace(recipes[base], keep_words=float(beta)) if beta else recipes[name]
    return replace(recipe, alpha=float(alpha)) if alpha else recipe


def rows_of(name: str) -> int:
    return 2 if name.lstrip("f").startswith(("g", "d")) else 1  # `k` (keep words) adds no row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--data-dir")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--json", help="append per-direction candidate tables here")
    ap.add_argument("--only", help="comma-separated pool names to decode (default: all), e.g. p,s0.5,g1,g3,f,fg1")
    args = ap.parse_args()
    exp = load_experiment(args.config, data_dir=args.data_dir)
    lm = load_model(exp.model)
    runner = Runner(exp, args.out, lm, progress=False)
    probe = runner.artefacts.probe()
    selector = runner.scorers.selection
    recipes = pool(exp.base)
    if args.only:
        recipes = {n: recipe_of(recipes, n) for n in args.only.split(",")}
    names = list(recipes)
    for full in exp.directions:
        d = replace(full, texts=full.tune_texts, references=full.tune_references)
        texts = list(d.texts)
        decoded = runner.rewrites.candidates(d, list(recipes.values()), [f"tune-pool-{n}" for n in names])
        settings = RerankSettings(tuple(float(i) for i in range(len(names))))
        ranked = Reranker(runner.rewrites.service(d).steerer, probe, shared_embedder(SELECTION_ENCODER)).rank(
            texts, d.target, decoded, settings, list(recipes.values()), runner.rewrites.instruction(d)
        )
        per = [
            evaluate([r.output for r in rows], sources=texts, target=d.target, metrics=("j",), scorers=selector,
                     per_sentence=True)["sentences"]
            for rows in decoded
        ]  # fmt: skip
        table = {
            "direction": d.name,
            "names": names,
            "cands": [
                [
                    {**{k: c[k] for k in ("style", "similarity", "fluency")}, "flagged": flag_level(c["flags"])}
                    for c in r.info["rerank"]["candidates"]
                ]
                for r in ranked
            ],  # fmt: skip
            "judge": [
                [{"acc": x["accuracy"][i], "sim": x["similarity"][i], "flu": x["fluency"][i]} for x in per]
                for i in range(len(texts))
            ],
        }
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(table) + "\n")
        print(f"## {d.name}: {len(texts)} tuning texts")
        for k, n in enumerate(names):
            j = sum(t[k]["acc"] * max(t[k]["sim"], 0) * t[k]["flu"] for t in table["judge"]) / len(texts)
            acc = sum(t[k]["acc"] > 0.5 for t in table["judge"]) / len(texts)
            sim = sum(t[k]["sim"] for t in table["judge"]) / len(texts)
            flagged = sum(bool(c[k]["flagged"]) for c in table["cands"]) / len(texts)
            ok = sum(usable(t[k], c[k]) for t, c in zip(table["judge"], table["cands"], strict=True)) / len(texts)
            print(f"{n}: J {100 * j:.1f} acc {100 * acc:.0f} sim {sim:.3f} flagged {100 * flagged:.0f} "
                  f"usable {100 * ok:.0f}")  # fmt: skip


USABLE_SIMILARITY = 0.5  # the evaluation's threshold, applied here to the selection encoder (a proxy on tuning texts)


def usable(judged: dict, cand: dict) -> bool:
    """Selection-side proxy of `usable`: the selection judge says target style, MiniLM similarity ≥ 0.5, no flag."""
    return judged["acc"] > 0.5 and judged["sim"] >= USABLE_SIMILARITY and not cand.get("flagged", False)


def summarise(path: str, first: bool = True) -> None:
    """Every subset with the prompt, several exponents: mean J, target count, rows — each chosen as
    rerank chooses (usable first unless `first` is False: `summarise FILE --score-only`)."""
    latest = {}
    for line in open(path):
        table = json.loads(line)
        latest[table["direction"]] = table  # a direction measured again: its latest pool
    tables = list(latest.values())
    names = [n for n in tables[0]["names"] if all(n in t["names"] for t in tables)]
    for t in tables:  # every table restricted to the shared pool, in one order
        keep = [t["names"].index(n) for n in names]
        t["cands"] = [[row[k] for k in keep] for row in t["cands"]]
        t["judge"] = [[row[k] for k in keep] for row in t["judge"]]
    results = []
    others = [n for n in names if n != "p"]
    for k in range(1, 6):  # the prompt and up to four other rungs
        for combo in itertools.combinations(others, k - 1):
            subset = ["p", *combo]
            idx = [names.index(n) for n in subset]
            for e in (1.0, 0.5, 0.25, 2.0):
                js, hits, accs, sims, oks = [], 0, [], [], []
                for t in tables:
                    n = len(t["cands"])
                    picked = []
                    for i in range(n):
                        c = t["cands"][i]
                        s = candidate_scores(
                            [c[m]["style"] for m in idx], [c[m]["similarity"] for m in idx],
                            [c[m]["fluency"] for m in idx], [1.0] * len(idx), e,
                        )  # fmt: skip
                        best, _, _ = pick(
                            s, [c[m]["style"] for m in idx], [c[m]["similarity"] for m in idx],
                            [c[m].get("flagged", False) for m in idx], [1.0] * len(idx), first,
                        )  # fmt: skip
                        picked.append(idx[best])
                    g = t["judge"]
                    j = sum(g[i][m]["acc"] * max(g[i][m]["sim"], 0) * g[i][m]["flu"] for i, m in enumerate(picked)) / n
                    acc = sum(g[i][m]["acc"] > 0.5 for i, m in enumerate(picked)) / n
                    sim = sum(g[i][m]["sim"] for i, m in enumerate(picked)) / n
                    p_acc = sum(g[i][0]["acc"] > 0.5 for i in range(n)) / n
                    p_sim = sum(g[i][0]["sim"] for i in range(n)) / n
                    hits += acc - p_acc >= min(0.10, 0.95 - p_acc) - 1e-9 and sim >= 0.8 * p_sim
                    oks.append(sum(usable(g[i][m], t["cands"][i][m]) for i, m in enumerate(picked)) / n)
                    js.append(j)
                    accs.append(acc - p_acc)
                    sims.append(sim / p_sim)
                rows = sum(rows_of(n) for n in subset)
                results.append((sum(js) / len(js), hits, rows, "+".join(subset), e, accs, sims, oks))
    results.sort(key=lambda r: (-sum(r[7]), -r[0]))  # mean selection-side usable first, then J
    directions = ", ".join(t["direction"] for t in tables)
    print(f"Directions: {directions}. Hits: accuracy +min(10, 95 − prompt) points at similarity ≥ 0.8×.")
    print("Usable (selection proxy): selection judge hit, MiniLM similarity ≥ 0.5, no faithfulness flag.")
    print(f"Subsets chosen {'usable first' if first else 'by score only'}, no rung weights.\n")
    print("| candidates | probe exponent | rows / text | mean usable | usable per direction | mean J | hits |")
    print("|---|---|---|---|---|---|---|")
    # the best, the ladders shipped before and now (0,u0.5,3,2k4,4k4), the prompt
    shown = {r[3] for r in results[:15]} | {"p", "p+s0.5+g1+g3", "p+s0.5+g1+g3+g3k4", "p+s0.5+g3+g2k4+g4k4", "p+f"}
    for j, hits, rows, subset, e, _accs, _sims, oks in results:
        if subset in shown and e == 0.5:
            print(f"| {subset} | {e:g} | {rows} | {100 * sum(oks) / len(oks):.1f} | "
                  f"{' '.join(f'{100 * x:.0f}' for x in oks)} | {100 * j:.1f} | {hits}/{len(tables)} |")  # fmt: skip
    choice_rules(tables)


# the default ladder 0,u0.5,3,2k4,4k4 and the one before it, 0,u0.5,1,3,3k4, in pool names
LADDERS = (("p", "s0.5", "g3", "g2k4", "g4k4"), ("p", "s0.5", "g1", "g3", "g3k4"))


def choice_rules(tables: list[dict]) -> None:
    """The default ladder (and the one before it) under each choice rule — score only or usable
    first, a weight on the keep-words rungs' scores: mean selection-side usable and per direction.
    Subsets above are chosen with no weights."""
    print("\n| ladder | choice rule | kβ weight | mean usable | usable per direction |\n|---|---|---|---|---|")
    for ladder in LADDERS:
        if not all(n in tables[0]["names"] for n in ladder):
            continue
        idx = [tables[0]["names"].index(n) for n in ladder]
        for first in (False, True):
            for w in (1.0, 1.1, 1.2, 1.3, 1.5, 2.0):
                oks = []
                for t in tables:
                    ok = 0
                    for c, g in zip(t["cands"], t["judge"], strict=True):
                        c, g = [c[m] for m in idx], [g[m] for m in idx]
                        style, sims = [x["style"] for x in c], [x["similarity"] for x in c]
                        s = candidate_scores(style, sims, [x["fluency"] for x in c], [1.0] * len(c), 0.5)
                        weights = [w if "k" in n else 1.0 for n in ladder]
                        m, _, _ = pick(s, style, sims, [x.get("flagged", False) for x in c], weights, first)
                        ok += usable(g[m], c[m])
                    oks.append(ok / len(t["cands"]))
                rule = "usable first" if first else "score only"
                print(
                    f"| {'+'.join(ladder)} | {rule} | {w:g} | {100 * sum(oks) / len(oks):.1f} | "
                    f"{' '.join(f'{100 * x:.0f}' for x in oks)} |"
                )


if __name__ == "__main__":
    if sys.argv[1] == "summarise":
        summarise(sys.argv[2], first="--score-only" not in sys.argv[3:])
    else:
        main()
