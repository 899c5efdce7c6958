"""Whether another judge prompt agrees better with reading: re-judge the labelled rewrites of an
agreement file with a trial prompt, and print each answer's AUC, llm-usable's κ at 0.5 and the
split-half κ of the product beside the stored judge-v1 answers.

    python scripts/judge_prompt_trial.py docs/judge-trials/judge-v2-trial.toml \
        docs/reads/2026-12-03-smollm2-135m-nine/judge-agreement.json --dtype fp16-linear \
        -o docs/judge-trials/judge-v2-trial-135m.json

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_signal import POSITIVE, auc, split_half_kappa  # noqa: E402


def main() -> None:
    import steer.scoring.llm_judge as llm_judge
    from steer.model.loading import load_model
    from steer.scoring.llm_judge import QUESTIONS, JudgeItem, LLMJudge, agreement

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt", type=Path, help="the trial prompt (TOML)")
    parser.add_argument("agreement", type=Path, help="a judge-agreement.json of scripts/judge_agreement.py")
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--cache", type=Path, help="a folder for the judge's answer cache (a rerun then costs no pass)")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    trial = tomllib.loads(args.prompt.read_text(encoding="utf-8"))
    llm_judge.load_judge_prompt = lambda: trial  # this script's judge only; the packaged prompt is untouched
    data = json.loads(args.agreement.read_text(encoding="utf-8"))
    items = [i for i in data["items"] if not i["same_model_judge"]]
    judge = LLMJudge(load_model(args.judge, dtype=args.dtype, progress=False), cache_dir=args.cache, batch_size=8)
    start = time.perf_counter()
    verdicts = judge.verdicts([JudgeItem(i["source"], i["rewrite"], *i["direction"].split("->")) for i in items])
    print(f"judged {len(items)} rewrites in {time.perf_counter() - start:.0f} s")
    for item, v in zip(items, verdicts, strict=True):
        item["llm_trial"] = {"style": v.style, "meaning": v.meaning, "fluency": v.fluency}
    out = {"judge": judge.name, "prompt_version": judge.version, "items": items}
    args.output.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    read = [bool(i["labels"]["usable"]) for i in items]
    print(f"{len(items)} rewrites, {sum(read)} read usable")
    for name, label in (("llm", str(data["prompt_version"])), ("llm_trial", judge.version)):
        aucs = []
        for q in QUESTIONS:
            own = [i["labels"][q] >= POSITIVE[q] for i in items]
            scores = [i[name][q] for i in items]
            aucs.append(f"{q} {auc(scores, read):.3f} / {auc(scores, own):.3f}")
        product = [i[name]["style"] * i[name]["meaning"] * i[name]["fluency"] for i in items]
        at_half = [min(i[name].values()) >= 0.5 for i in items]
        kappa = agreement(at_half, read)
        _, chose, held = split_half_kappa(product, read)
        print(
            f"{label}: AUC vs read usable / the read's own answer: {'; '.join(aucs)}; product AUC "
            f"{auc(product, read):.3f}; llm-usable at 0.5: {sum(at_half)} yes, accuracy {kappa['accuracy']:.3f}, "
            f"κ {kappa['kappa']:.3f}; best product cut κ {chose:.3f} on the choosing half → {held:.3f} held out"
        )


if __name__ == "__main__":
    main()
