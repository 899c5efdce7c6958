"""How well the LLM judge and the rule-based `usable` agree with blind-read labels, per direction.

    python research/scripts/judge_agreement.py --read DIR=PROFILE[=MODEL] ... --judge qwen2.5-coder-1.5b \\
        -o agreement.json

(`--add-to EARLIER.json`: the earlier file's judged items join the new ones in the output's table;
`--combine A.json B.json`: the table of several agreement files' items, each rewrite once, no model
(with `--systems`: per decoding model, direction and system, how many rewrites the read, the LLM
judge and the rules call usable — does each measure rank prompt and rerank as reading does?);
`--rejudge A.json B.json -o OUT.json`: those items, each once, judged again by the packaged judge
prompt — their rule-based `usable` is kept as stored, so no profile is needed.)

Each read folder holds a protocol read (sheet-*.jsonl, key-*.jsonl, labels-*.jsonl; see
research/scripts/blind_read.py); PROFILE is the profile the rewrites were steered with (its corpora train
the evaluation style judge of the rule-based `usable`), MODEL the model that decoded them. A judge
that is the decoding model is used only with --allow-same-model, and the output says so per item.
Every labelled rewrite is scored by `steer.evaluation.metrics.evaluate` (rule-based usable, with
the evaluation encoder and judge) and by the LLM judge; agreement is accuracy and Cohen's κ
(`steer.evaluation.llm_judge.agreement`) of llm-usable, usable, and each of the judge's answers
against the read's style = 2, meaning = 2, fluency = 1 and usable labels.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def labelled(folder: Path) -> list[dict[str, Any]]:
    """One row per labelled rewrite: direction, system, source, rewrite, the read's labels."""
    rows = []
    for labels_path in sorted(folder.glob("labels-*.jsonl")):
        tag = labels_path.stem.removeprefix("labels-")
        sheet = {r["id"]: r for r in _jsonl(folder / f"sheet-{tag}.jsonl")}
        keys = {k["id"]: k for k in _jsonl(folder / f"key-{tag}.jsonl")}
        for row in _jsonl(labels_path):
            shown = sheet[row["id"]]
            for letter, label in row["labels"].items():
                rows.append(
                    {
                        "read": str(folder),
                        "id": row["id"],
                        "direction": row["direction"],
                        "system": keys[row["id"]][letter],
                        "source": shown["source"],
                        "rewrite": shown["rewrites"][letter],
                        "labels": label,
                    }
                )
    return rows


def agreement_table(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Per direction and overall: n, the read's usable share, and the agreement (accuracy, κ) of
    llm-usable, the rule-based usable and each of the judge's answers with the read's labels."""
    from steer.evaluation.llm_judge import agreement

    table: dict[str, Any] = {}
    for direction in sorted({r["direction"] for r in items}) + ["all"]:
        rows = [r for r in items if direction in ("all", r["direction"])]
        read = [bool(r["labels"]["usable"]) for r in rows]
        table[direction] = {
            "n": len(rows),
            "read_usable": sum(read) / len(rows),
            "llm_usable": agreement([r["llm_usable"] for r in rows], read),
            "usable_rule": agreement([r["usable_rule"] for r in rows], read),
            "llm_style": agreement([r["llm"]["style"] >= 0.5 for r in rows], [r["labels"]["style"] == 2 for r in rows]),
            "llm_meaning": agreement(
                [r["llm"]["meaning"] >= 0.5 for r in rows], [r["labels"]["meaning"] == 2 for r in rows]
            ),
            "llm_fluency": agreement(
                [r["llm"]["fluency"] >= 0.5 for r in rows], [r["labels"]["fluency"] == 1 for r in rows]
            ),
        }
    return table


def combined(paths: list[Path]) -> list[dict[str, Any]]:
    """The judged items of several agreement files, each rewrite once (a read judged twice counts once)."""
    items, seen = [], set()
    for path in paths:
        for item in json.loads(path.read_text(encoding="utf-8"))["items"]:
            key = (item["direction"], item["system"], item["source"], item["rewrite"], item["same_model_judge"])
            if key not in seen:
                seen.add(key)
                items.append(item)
    return items


def markdown_table(items: list[dict[str, Any]]) -> str:
    """The agreement table as docs/results.md shows it."""

    def pair(a: dict[str, float]) -> str:
        return f"{a['accuracy']:.2f} / {a['kappa']:.2f}"

    lines = [
        "| direction | n | read usable | llm-usable acc / κ | usable (rules) acc / κ | llm-style κ | llm-meaning κ "
        "| llm-fluency κ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for direction, v in agreement_table(items).items():
        lines.append(
            f"| {direction.replace('->', ' → ')} | {v['n']} | {100 * v['read_usable']:.0f}% | {pair(v['llm_usable'])} "
            f"| {pair(v['usable_rule'])} | {v['llm_style']['kappa']:.2f} | {v['llm_meaning']['kappa']:.2f} "
            f"| {v['llm_fluency']['kappa']:.2f} |"
        )
    return "\n".join(lines)


def systems_table(items: list[dict[str, Any]]) -> str:
    """Per decoding model (the judge's own rewrites or another model's), direction and system: the
    count the read, llm-usable and the rules' usable call usable — and, per model, which system
    each measure puts ahead in how many directions."""
    counts: dict[tuple[bool, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0, 0]))
    for item in items:
        if item["system"] not in ("prompt", "default"):
            raise SystemExit(
                f"system {item['system']!r} is neither prompt nor default (rerank); --systems compares those two"
            )
        c = counts[(item["same_model_judge"], item["direction"])][item["system"]]
        c[0] += 1
        c[1] += int(item["labels"]["usable"])
        c[2] += int(bool(item["llm_usable"]))
        c[3] += int(bool(item["usable_rule"]))
    lines = [
        "| decoded by | direction | texts | read usable: prompt / rerank | llm-usable: prompt / rerank "
        "| usable (rules): prompt / rerank |",
        "|---|---|---|---|---|---|",
    ]
    ahead: dict[bool, list[list[int]]] = defaultdict(lambda: [[0, 0, 0] for _ in range(3)])  # measure: p, tie, r
    totals: dict[bool, list[list[int]]] = defaultdict(lambda: [[0, 0, 0, 0], [0, 0, 0, 0]])
    for (same, direction), systems in sorted(counts.items()):
        p, r = systems.get("prompt", [0, 0, 0, 0]), systems.get("default", [0, 0, 0, 0])
        for total, these in zip(totals[same], (p, r), strict=True):
            total[:] = [a + b for a, b in zip(total, these, strict=True)]
        cells = []
        for k in range(1, 4):
            cells.append(f"{p[k]} / {r[k]}")
            ahead[same][k - 1][0 if p[k] > r[k] else 2 if r[k] > p[k] else 1] += 1
        who = "the judge's model" if same else "another model"
        lines.append(f"| {who} | {direction.replace('->', ' → ')} | {p[0]} | " + " | ".join(cells) + " |")
    for same, (p, r) in sorted(totals.items()):
        who = "the judge's model" if same else "another model"
        lines.append(f"| {who} | all | {p[0]} | " + " | ".join(f"**{p[k]} / {r[k]}**" for k in range(1, 4)) + " |")
    lines.append("")
    for same, tallies in sorted(ahead.items()):
        who = "the judge's model" if same else "another model"
        said = "; ".join(
            f"{name}: prompt ahead in {t[0]}, tie {t[1]}, rerank ahead in {t[2]}"
            for name, t in zip(("read", "llm-usable", "rules"), tallies, strict=True)
        )
        lines.append(f"Directions, {who}: {said}.")
    return "\n".join(lines)


def rejudge(
    paths: list[Path], judge_model: str, dtype: str, allow_same_model: bool, output: Path, prompt: Path | None = None
) -> None:
    """Judge the items of earlier agreement files again with the packaged prompt (a new prompt
    version) or a trial `prompt` (TOML), keeping each item's stored rule-based `usable`; write
    them and their table."""
    import tomllib

    from steer.errors import SteerError
    from steer.evaluation.llm_judge import QUESTIONS, JudgeItem, LLMJudge
    from steer.model.embedded import cache_dir
    from steer.model.loading import load_model

    items = combined(paths)
    if any(i["same_model_judge"] for i in items) and not allow_same_model:
        raise SteerError("some items were decoded by the judge; pass --allow-same-model to judge them anyway")
    trial = None if prompt is None else tomllib.loads(prompt.read_text(encoding="utf-8"))
    lm = load_model(judge_model, dtype=dtype, progress=False)
    judge = LLMJudge(lm, cache_dir=cache_dir() / "judge", prompt=trial)
    asked = [JudgeItem(i["source"], i["rewrite"], *i["direction"].split("->")) for i in items]
    verdicts, scores = judge.verdicts(asked), judge.scores(asked)  # the scores come from the cache
    for item, verdict, score in zip(items, verdicts, scores, strict=True):
        # llm_scores: each answer before its margin (a choice's log-odds), for fitting a margin again
        item.update(llm={q: getattr(verdict, q) for q in QUESTIONS}, llm_usable=verdict.usable, llm_scores=score)
    table = agreement_table(items)
    out = {"judge": judge.name, "prompt_version": judge.version, "rejudged": [str(p) for p in paths], "table": table}
    output.write_text(json.dumps({**out, "items": items}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(markdown_table(items))


def main() -> None:
    from steer.errors import SteerError
    from steer.evaluation import metrics as ev
    from steer.evaluation.llm_judge import QUESTIONS, LLMJudge
    from steer.model.embedded import cache_dir
    from steer.model.loading import load_model
    from steer.profiling.profile import style_corpora
    from steer.scoring.encoders import SELECTION_ENCODER, Embedder
    from steer.scoring.judges import judge_for

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--read", action="append", metavar="DIR=PROFILE=MODEL")
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b")
    parser.add_argument("--allow-same-model", action="store_true")
    parser.add_argument("--dtype", default="auto", help="the judge's steer --dtype (e.g. fp16-linear on a CPU)")
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        help="agreement JSONs to merge; prints their table, no model",
    )
    parser.add_argument(
        "--systems", action="store_true", help="with --combine: prompt against rerank per model and measure"
    )
    parser.add_argument(
        "--add-to", type=Path, help="an earlier agreement JSON (same judge and prompt) whose items join these"
    )
    parser.add_argument(
        "--rejudge", type=Path, nargs="+", help="agreement JSONs whose items the packaged judge prompt judges again"
    )
    parser.add_argument(
        "--prompt", type=Path, help="with --rejudge: a trial judge prompt (TOML) instead of the packaged"
    )
    args = parser.parse_args()
    if args.systems and not args.combine:
        parser.error("--systems goes with --combine FILE...")
    if args.combine:
        print((systems_table if args.systems else markdown_table)(combined(args.combine)))
        return
    if args.rejudge:
        if args.output is None:
            parser.error("--rejudge needs -o OUT.json")
        rejudge(args.rejudge, args.judge, args.dtype, args.allow_same_model, args.output, args.prompt)
        return
    if not args.read or args.output is None:
        parser.error("--read and -o are needed (or --combine FILE...)")
    judge_lm = load_model(args.judge, dtype=args.dtype, progress=False)
    judge = LLMJudge(judge_lm, cache_dir=cache_dir() / "judge")
    embedder = Embedder("all-mpnet-base-v2")
    items: list[dict[str, Any]] = []
    for spec in args.read:
        folder, profile, model = (spec.split("=") + [""])[:3]
        same = model == args.judge
        if same and not args.allow_same_model:
            raise SteerError(f"{folder} was decoded by {model}, the judge; pass --allow-same-model to judge it anyway")
        rows = labelled(Path(folder))
        judges: dict[str, Any] = {}
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            groups[row["direction"]].append(row)
        for direction, group in groups.items():
            source, target = direction.split("->")
            if target not in judges:
                corpora = partial(style_corpora, (), profile)
                judges[target] = judge_for("auto", (), corpora, Embedder(SELECTION_ENCODER))[0]
            scorers = ev.Scorers(classifier=judges[target], embedder=embedder, llm_judge=judge)
            result = ev.evaluate(
                [r["rewrite"] for r in group],
                sources=[r["source"] for r in group],
                target=target,
                metrics=["usable"],
                scorers=scorers,
                per_sentence=True,
                source_style=source,
            )
            sentences = result["sentences"]
            for i, row in enumerate(group):
                row.update(
                    usable_rule=bool(sentences["usable"][i]),
                    llm={q: sentences[f"llm_{q}"][i] for q in QUESTIONS},
                    llm_usable=bool(sentences["llm_usable"][i]),
                    same_model_judge=same,
                )
            items += group
    if args.add_to is not None:  # the items of an earlier agreement file, judged by the same judge and prompt
        earlier = json.loads(args.add_to.read_text(encoding="utf-8"))
        if (earlier["judge"], earlier["prompt_version"]) != (judge.name, judge.version):
            raise SteerError(
                f"{args.add_to} was judged by {earlier['judge']} {earlier['prompt_version']}, not this judge"
            )
        items = earlier["items"] + items
    table = agreement_table(items)
    out = {"judge": judge.name, "prompt_version": judge.version, "table": table, "items": items}
    args.output.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
