"""How far the LLM judge's raw answers can go towards the blind read's usable: every stored way of
asking style and meaning, combined by thresholds (one set for all directions, or one for the
sentiment directions and one for the rest) and by a logistic regression, each chosen on part of the
labelled texts and graded on the others.

    python research/scripts/judge_combinations.py [--mpnet] [--seeds 10]
    python research/scripts/judge_combinations.py --prompt steer/data/judge.toml

Reads the labelled set (research/reads/judge-agreement-judge-v2.json: the read labels, judge-v2's
answers) and the raw scores the trials stored in research/judge-trials/: judge-v2's style shift
(target-ness of the rewrite minus the source's) and the meaning choice "same or different"
(judge-v3-meaning-trial-680.json), and the 2026-12-06 framings written by
`research/scripts/judge_meaning_framings.py --out` (2026-12-06-facts-aside.json: meaning with tone and
opinion set aside; 2026-12-06-more-target.json: "which text is more {target}?";
2026-12-06-opposite.json, sentiment only: "the opposite of the first about the same thing?").
`--mpnet` adds the evaluation encoder's similarity of rewrite and source (loads all-mpnet-base-v2;
no LLM is loaded). A rewrite passes a combination when every signal clears its threshold; any
threshold may be "off" (−inf), so a combination is never worse than its best subset. Held out:
the labelled texts (both systems' rewrites of a text together) split in random halves; the
thresholds are chosen on one half and κ is reported on the other, for each seed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LABELS = ROOT / "research" / "reads" / "judge-agreement-judge-v2.json"
TRIALS = ROOT / "research" / "judge-trials"
SENTIMENT = {"negative->positive", "positive->negative"}
NAMES = ("read", "id", "direction", "system", "same_model_judge")
OFF = -math.inf
# Thresholds tried per signal (log-odds in nats, a probability or a cosine); OFF lets every rewrite pass.
GRIDS = {
    "style": [OFF, -0.5, 0, 0.25, 0.5, 1, 2, 4, 6, 8, 9.4, 11],
    "more_target": [OFF, -0.5, 0, 0.25, 0.5, 1, 2, 4],
    "meaning_choice": [OFF, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2],
    "facts_aside": [OFF, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2],
    "opposite": [OFF, -3, -2, -1, -0.5, 0, 0.5, 1, 2],
    "meaning_yes": [OFF, 0.6, 0.65, 0.7, 0.75, 0.8],
    "mpnet": [OFF, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "fluency": [OFF, 0.5, 0.7, 0.9],
    "read_style": [OFF, 0.5],  # the read's own style = 2 (an oracle)
    "read_meaning": [OFF, 0.5],  # the read's own meaning = 2 (an oracle)
}
COMBINATIONS = {  # name → the signals that must all pass
    "style shift, meaning yes/no, fluency (judge-v2's questions)": ("style", "meaning_yes", "fluency"),
    "style shift, meaning choice, fluency": ("style", "meaning_choice", "fluency"),
    "style shift, meaning with opinion aside, fluency": ("style", "facts_aside", "fluency"),
    "style comparison, meaning choice, fluency": ("more_target", "meaning_choice", "fluency"),
    "style shift and comparison, meaning choice, fluency": ("style", "more_target", "meaning_choice", "fluency"),
    "style shift, mpnet similarity, fluency": ("style", "mpnet", "fluency"),
    "style shift, meaning choice, mpnet, fluency": ("style", "meaning_choice", "mpnet", "fluency"),
    "oracle: style shift, the read's meaning, fluency": ("style", "read_meaning", "fluency"),
    "oracle: the read's style, meaning choice, fluency": ("read_style", "meaning_choice", "fluency"),
}
# In sentiment directions only: the "opposite" question (asked of them alone) may stand in for meaning.
SENTIMENT_ONLY = {"style shift, opposite, fluency": ("style", "opposite", "fluency")}


def keyed(path: Path, field: str) -> dict[tuple[Any, ...], Any]:
    """A stored file's `field` per labelled rewrite, keyed by the rewrite's names."""
    return {tuple(i[n] for n in NAMES): i[field] for i in json.loads(path.read_text(encoding="utf-8"))["items"]}


def table(mpnet: bool) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """(signal → one value per labelled rewrite, read usable, is-sentiment, text index)."""
    items = json.loads(LABELS.read_text(encoding="utf-8"))["items"]
    raw = keyed(TRIALS / "judge-v3-meaning-trial-680.json", "llm_scores")
    framed = {name: keyed(TRIALS / f"2026-12-06-{name}.json", "meaning") for name in ("facts-aside", "more-target")}
    opposite = keyed(TRIALS / "2026-12-06-opposite.json", "meaning")
    keys = [tuple(i[n] for n in NAMES) for i in items]
    signals = {
        "style": [raw[k]["style"] for k in keys],
        "meaning_choice": [raw[k]["meaning"] for k in keys],
        "fluency": [raw[k]["fluency"] for k in keys],
        "meaning_yes": [i["llm"]["meaning"] for i in items],
        "facts_aside": [framed["facts-aside"][k] for k in keys],
        "more_target": [framed["more-target"][k] for k in keys],
        "opposite": [opposite.get(k, math.nan) for k in keys],
        "read_style": [float(i["labels"]["style"] == 2) for i in items],
        "read_meaning": [float(i["labels"]["meaning"] == 2) for i in items],
    }
    if mpnet:
        from steer.scoring.encoders import shared_embedder

        encoder = shared_embedder("all-mpnet-base-v2")
        signals["mpnet"] = encoder.similarities([i["rewrite"] for i in items], [i["source"] for i in items])
    texts = {key: n for n, key in enumerate(dict.fromkeys((i["read"], i["direction"], i["id"]) for i in items))}
    return (
        {name: np.array(values, dtype=float) for name, values in signals.items()},
        np.array([i["labels"]["usable"] == 1 for i in items]),
        np.array([i["direction"] in SENTIMENT for i in items]),
        np.array([texts[(i["read"], i["direction"], i["id"])] for i in items]),
    )


def kappa(predicted: np.ndarray, labels: np.ndarray) -> float:
    """Cohen's κ of two yes/no labellings (0 where chance agreement is 1): the statistic of
    `steer.evaluation.llm_judge.agreement`, on arrays, for the grid's thousands of evaluations."""
    observed = float(np.mean(predicted == labels))
    p, t = float(np.mean(predicted)), float(np.mean(labels))
    chance = p * t + (1 - p) * (1 - t)
    return 0.0 if chance >= 1 else (observed - chance) / (1 - chance)


def passes(signals: dict[str, np.ndarray], names: Sequence[str], cuts: Sequence[float]) -> np.ndarray:
    """Whether each rewrite clears every signal's threshold (a threshold that is off passes all)."""
    ok = np.ones(len(next(iter(signals.values()))), dtype=bool)
    for name, cut in zip(names, cuts, strict=True):
        if cut != OFF:
            ok &= signals[name] > cut
    return ok


def fit(signals: dict[str, np.ndarray], usable: np.ndarray, rows: np.ndarray, names: Sequence[str]) -> tuple:
    """The thresholds (one per signal) with the highest κ on `rows`."""
    sub = {n: signals[n][rows] for n in names}
    grid = itertools.product(*(GRIDS[n] for n in names))
    return max(grid, key=lambda cuts: kappa(passes(sub, names, cuts), usable[rows]))


def predict(signals, usable, sentiment, train, names, by_group, sentiment_names=None) -> np.ndarray:  # noqa: ANN001
    """Pass/fail of every rewrite, with thresholds chosen on `train` (per group when `by_group`:
    the sentiment directions with `sentiment_names`, or `names`, and the rest with `names`)."""
    if not by_group:
        return passes(signals, names, fit(signals, usable, train, names))
    out = np.zeros(len(usable), dtype=bool)
    for group, group_names in ((sentiment, sentiment_names or names), (~sentiment, names)):
        cuts = fit(signals, usable, train & group, group_names)
        out[group] = passes(signals, group_names, cuts)[group]
    return out


def halves(texts: np.ndarray, seed: int) -> np.ndarray:
    """A random half of the labelled texts (both systems' rewrites of a text fall together)."""
    chosen = np.random.RandomState(seed).permutation(texts.max() + 1)[: (texts.max() + 1) // 2]
    return np.isin(texts, chosen)


def report(name: str, data: tuple, names: Sequence[str], seeds: int, by_group: bool, sentiment_names=None) -> None:  # noqa: ANN001
    """κ in-sample (thresholds fitted on all 680) and held out (chosen on half the texts, graded on
    the other half; one κ per seed: range and mean)."""
    signals, usable, sentiment, texts = data
    every = np.ones(len(usable), dtype=bool)
    inside = predict(signals, usable, sentiment, every, names, by_group, sentiment_names)
    held = []
    for seed in range(seeds):
        train = halves(texts, seed)
        predicted = predict(signals, usable, sentiment, train, names, by_group, sentiment_names)
        held.append(kappa(predicted[~train], usable[~train]))
    groups = {"sentiment": sentiment, "other": ~sentiment}
    parts = ", ".join(f"{g} {kappa(inside[rows], usable[rows]):.2f}" for g, rows in groups.items())
    cuts = ""
    if not by_group:
        at = fit(signals, usable, every, names)
        cuts = " at " + ", ".join(f"{n} {'off' if c == OFF else c}" for n, c in zip(names, at, strict=True))
    print(
        f"- {name}: in-sample {kappa(inside, usable):.2f} ({parts}){cuts}; held out {min(held):.2f}–{max(held):.2f}, "
        f"mean {np.mean(held):.2f} ({seeds} seeds)"
    )


def regression(data: tuple, names: Sequence[str], seeds: int) -> list[float]:
    """Held-out κ of a logistic regression on the (standardised) signals, "sentiment direction" and
    their products, fitted and its cut chosen on half the texts, graded on the other half."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    signals, usable, sentiment, texts = data
    x = np.column_stack([np.clip(signals[n], -15, 15) for n in names])
    s = sentiment[:, None].astype(float)
    x = np.hstack([x, s, x * s])
    kappas = []
    for seed in range(seeds):
        train = halves(texts, seed)
        scaler = StandardScaler().fit(x[train])
        model = LogisticRegression(max_iter=5000, class_weight="balanced").fit(
            scaler.transform(x[train]), usable[train]
        )
        p = model.predict_proba(scaler.transform(x))[:, 1]
        cut = max(np.unique(np.round(p[train], 2)), key=lambda c: kappa(p[train] >= c, usable[train]))
        kappas.append(kappa(p[~train] >= cut, usable[~train]))
    return kappas


def with_prompt(path: Path) -> None:
    """llm-usable of a trial prompt whose questions are those the stored scores answered (the
    meaning-choice trial's), its margins (and `[[pair_margins]]`) applied: in all, per direction."""
    import tomllib

    from steer.evaluation.judge_prompt import check_judge_prompt, margins_for, pair_margins
    from steer.evaluation.llm_judge import Verdict, _sigmoid, agreement

    prompt = check_judge_prompt(tomllib.loads(path.read_text(encoding="utf-8")))
    stored = tomllib.loads((TRIALS / "judge-v3-meaning-trial.toml").read_text(encoding="utf-8"))

    def questions(data: dict[str, Any]) -> list[Any]:  # what a prompt asks, its margins apart
        choices = [
            {k: v for k, v in data.get(t, {}).items() if k != "margin"} for t in ("style_choice", "meaning_choice")
        ]
        return [data.get("instructions"), data.get("item"), data.get("questions"), *choices]

    same = questions(prompt) == questions(stored)
    if not same:
        raise SystemExit(f"{path} asks other questions than the stored scores answered (judge-v3-meaning-trial.toml)")
    margins = {"style": float(prompt["style_choice"]["margin"]), "meaning": float(prompt["meaning_choice"]["margin"])}
    pairs = pair_margins(prompt)
    items = json.loads(LABELS.read_text(encoding="utf-8"))["items"]
    raw = keyed(TRIALS / "judge-v3-meaning-trial-680.json", "llm_scores")
    rows = []
    for item in items:
        score = raw[tuple(item[n] for n in NAMES)]
        m = margins_for(margins, pairs, *item["direction"].split("->"))
        verdict = Verdict(_sigmoid(score["style"] - m["style"]), _sigmoid(score["meaning"] - m["meaning"]),
                          score["fluency"])  # fmt: skip
        rows.append((item["direction"], verdict.usable, item["labels"]["usable"] == 1))
    print(f"{path.name}: llm-usable against the read's usable (accuracy / κ; margins chosen on these labels)")
    for direction in [*sorted({r[0] for r in rows}), "sentiment", "other seven", "all"]:
        picked = [r for r in rows if direction in (r[0], "all") or (direction == "sentiment") == (r[0] in SENTIMENT)
                  and direction in ("sentiment", "other seven")]  # fmt: skip
        a = agreement([r[1] for r in picked], [r[2] for r in picked])
        print(f"  {direction} ({len(picked)}): {a['accuracy']:.2f} / {a['kappa']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mpnet", action="store_true", help="add all-mpnet-base-v2 similarity as a signal")
    parser.add_argument("--seeds", type=int, default=10, help="random halves of the texts (default 10)")
    parser.add_argument(
        "--prompt", type=Path, help="instead: llm-usable of a trial prompt's margins on the stored scores"
    )
    args = parser.parse_args()
    if args.prompt:
        with_prompt(args.prompt)
        return
    data = table(args.mpnet)
    signals, usable, sentiment, texts = data
    print(f"{len(usable)} labelled rewrites of {texts.max() + 1} texts, {usable.sum()} read usable; κ of llm-usable")
    for by_group in (False, True):
        print("one set of thresholds for all nine directions:" if not by_group else
              "one set for the two sentiment directions, one for the other seven:")  # fmt: skip
        for name, names in COMBINATIONS.items():
            if "mpnet" not in names or args.mpnet:
                report(name, data, names, args.seeds, by_group)
    for name, names in SENTIMENT_ONLY.items():
        report(f"{name} in sentiment, style shift, meaning choice, fluency elsewhere", data,
               ("style", "meaning_choice", "fluency"), args.seeds, True, names)  # fmt: skip
    llm = ("style", "more_target", "meaning_choice", "facts_aside", "meaning_yes", "fluency")
    for name, names in (("the judge's six signals", llm), ("the judge's and mpnet", (*llm, "mpnet"))):
        if "mpnet" not in names or args.mpnet:
            kappas = regression(data, names, args.seeds)
            print(f"- logistic regression on {name}: held out {min(kappas):.2f}–{max(kappas):.2f}, "
                  f"mean {np.mean(kappas):.2f} ({args.seeds} seeds)")  # fmt: skip


if __name__ == "__main__":
    main()
