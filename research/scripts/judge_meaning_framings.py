"""How to ask an LLM judge about meaning: the yes/no question (judge-v2) against the forced choice
"same or different" (judge-v3, `steer.evaluation.llm_judge`), ranked against the blind-read labels.

    python research/scripts/judge_meaning_framings.py --dtype fp16-linear research/reads/judge-agreement-judge-v2.json
        [--prompt research/judge-trials/judge-v3-meaning-trial.toml] [--question Q --answers A B] [--out F]

- yes/no (judge-v2): the stored P(Yes) of "Apart from the change from {source} to {target}, does the
  rewrite say what the source text says, with nothing invented, nothing important dropped, and no
  reply to the source or comment on the task?" asked after the judge's instructions.
- choice (`[meaning_choice]` of `--prompt`, by default research/judge-trials/judge-v3-meaning-trial.toml):
  the log-odds of "same" over "different", asked of the source and the rewrite side by side, both
  orders of the two words, averaged.
Prints each framing's AUC against the read's meaning = 2 and usable = 1, pooled and per direction,
for the judge's own rewrites and another model's; the choice's answers land in the judge's cache
($STEER_CACHE/judge), so a later `judge_agreement.py --rejudge --prompt` with the same prompt does
not compute them again. `--out` writes each item's choice score (its names, not its texts) for
research/scripts/judge_combinations.py (three such files: research/judge-trials/2026-12-06-{facts-aside,
more-target,opposite}.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_agreement import combined  # noqa: E402
from judge_signal import auc  # noqa: E402

from steer.evaluation.llm_judge import JudgeItem, LLMJudge  # noqa: E402

# What names an item in a written score file (the texts stay in the agreement JSON).
NAMES = ("read", "id", "direction", "system", "same_model_judge")

TRIAL = Path(__file__).resolve().parents[2] / "research" / "judge-trials" / "judge-v3-meaning-trial.toml"


def main() -> None:
    from steer.model.embedded import cache_dir
    from steer.model.loading import load_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agreement", type=Path, nargs="+", help="agreement JSONs with judge-v2's yes/no answers")
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--prompt", type=Path, default=TRIAL, help="a judge prompt (TOML) with a [meaning_choice]")
    parser.add_argument("--answers", nargs=2, help="a trial's two answers (kept, changed) instead of the packaged")
    parser.add_argument("--directions", nargs="+", help="only these directions (e.g. positive->negative)")
    parser.add_argument("--question", help="a trial's choice question instead of the packaged one ({a}, {b}, "
                        "{source}, {target})")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write each item's choice score (names, no texts) to this JSON")
    args = parser.parse_args()
    if args.out and args.out.exists():
        parser.error(f"--out {args.out} exists; give a new file name (it is never overwritten)")
    items = [i for i in combined(args.agreement) if not args.directions or i["direction"] in args.directions]
    prompt = tomllib.loads(args.prompt.read_text(encoding="utf-8"))
    if "meaning_choice" not in prompt:
        parser.error(f"{args.prompt} has no [meaning_choice]; use research/judge-trials/judge-v3-meaning-trial.toml")
    lm = load_model(args.judge, dtype=args.dtype, progress=False)
    judge = LLMJudge(lm, cache_dir=cache_dir() / "judge", prompt=prompt)
    if args.question:
        judge.choices["meaning"] = {**judge.choices["meaning"], "question": args.question.replace("\\n", "\n")}
    if args.answers:
        judge.choices["meaning"] = {**judge.choices["meaning"], "answers": list(args.answers)}
    asked = [JudgeItem(i["source"], i["rewrite"], *i["direction"].split("->")) for i in items]
    choice = [s["meaning"] for s in judge.scores(asked, ["meaning"])]
    if args.out:
        named = [{k: i[k] for k in NAMES} | {"meaning": c} for i, c in zip(items, choice, strict=True)]
        question = judge.choices["meaning"]["question"]
        args.out.write_text(json.dumps({"question": question, "answers": judge.choices["meaning"]["answers"],
                                        "items": named}, indent=1), encoding="utf-8")  # fmt: skip
    scores = {"yes/no (judge-v2)": [i["llm"]["meaning"] for i in items], "choice": choice}
    groups = {"all": list(range(len(items)))}
    for whose, same in (("another model's", False), ("its own", True)):
        groups[f"{whose} rewrites"] = [k for k, i in enumerate(items) if i["same_model_judge"] == same]
    for direction in sorted({i["direction"] for i in items}):
        groups[direction] = [k for k, i in enumerate(items) if i["direction"] == direction]
    print("AUC against the read's meaning = 2 / usable = 1")
    for group, rows in groups.items():
        meaning = [items[k]["labels"]["meaning"] == 2 for k in rows]
        usable = [items[k]["labels"]["usable"] == 1 for k in rows]
        shown = ", ".join(
            f"{name} {auc([s[k] for k in rows], meaning):.3f} / {auc([s[k] for k in rows], usable):.3f}"
            for name, s in scores.items()
        )
        print(f"  {group} ({len(rows)}): {shown}")


if __name__ == "__main__":
    main()
