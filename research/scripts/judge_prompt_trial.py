"""Whether another judge prompt agrees better with reading: re-judge the labelled rewrites of an
agreement file with a trial prompt, and print llm-usable's κ at 0.5 and `judge_signal.report`
(each answer's AUC, the split-half κ of the product) beside the stored judge-v1 answers. The
output holds the trial's answers per item, named as in the agreement file.

    python research/scripts/judge_prompt_trial.py research/judge-trials/judge-v2-trial.toml \
        research/reads/2026-12-03-smollm2-135m-nine/judge-agreement.json --dtype fp16-linear \
        -o research/judge-trials/judge-v2-trial-135m.json

Only the items judged by another model than the one that decoded them are re-judged. The trial
prompt has the packaged prompt's keys (version, instructions, item, questions); the packaged
prompt is left as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_signal import report  # noqa: E402


def main() -> None:
    from steer.evaluation.llm_judge import JudgeItem, LLMJudge, agreement
    from steer.model.loading import load_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", type=Path, help="the trial prompt (TOML)")
    parser.add_argument("agreement", type=Path, help="a judge-agreement.json of research/scripts/judge_agreement.py")
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--cache", type=Path, help="a folder for the judge's answer cache (a rerun then costs no pass)")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    trial = tomllib.loads(args.prompt.read_text(encoding="utf-8"))
    data = json.loads(args.agreement.read_text(encoding="utf-8"))
    items = [i for i in data["items"] if not i["same_model_judge"]]
    lm = load_model(args.judge, dtype=args.dtype, progress=False)
    judge = LLMJudge(lm, cache_dir=args.cache, batch_size=8, prompt=trial)  # the packaged prompt is untouched
    start = time.perf_counter()
    verdicts = judge.verdicts([JudgeItem(i["source"], i["rewrite"], *i["direction"].split("->")) for i in items])
    print(f"judged {len(items)} rewrites in {time.perf_counter() - start:.0f} s")
    for item, v in zip(items, verdicts, strict=True):
        item["llm_trial"] = {"style": v.style, "meaning": v.meaning, "fluency": v.fluency}
    # the trial's answers only, each named as in the agreement file (its texts and labels are there)
    named = [{k: i[k] for k in ("read", "id", "direction", "system", "llm_trial")} for i in items]
    out = {"judge": judge.name, "prompt_version": judge.version, "agreement": str(args.agreement), "items": named}
    args.output.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    read = [bool(i["labels"]["usable"]) for i in items]
    for answers, version in (("llm", data["prompt_version"]), ("llm_trial", judge.version)):
        said = [min(i[answers].values()) >= 0.5 for i in items]
        at_half = agreement(said, read)
        print(
            f"{version}: llm-usable at 0.5: {sum(said)} yes of {len(items)}, accuracy {at_half['accuracy']:.3f}, "
            f"κ {at_half['kappa']:.3f}; style yes {sum(i[answers]['style'] >= 0.5 for i in items)}"
        )
        report(items, answers)


if __name__ == "__main__":
    main()
