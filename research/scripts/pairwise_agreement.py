"""How the LLM judge's pairwise preference agrees with a blind read's `best` label, per direction.

    python research/scripts/pairwise_agreement.py research/reads/2026-12-07-qwen1.5b-contrast \\
        --system contrast --judge qwen2.5-coder-1.5b --allow-same-model -o agreement.json

For each direction of the read folder (records/<direction>.prompt.jsonl and .<system>.jsonl, in the
sheet's order; key-*.jsonl says which letter each system had), the judge is asked which rewrite is the
better (`steer eval --judge llm --pairwise`: both orders, both answer words) with the plain prompt as
A and the system as B; the read's `best` letters are turned into the same A/B/tie and compared by
`steer.evaluation.pairwise.pairwise_agreement` (sign agreement on the pairs the read decided, three-way
agreement and Cohen's κ). The judge never saw the read's labels.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> None:
    from steer.evaluation.pairwise import pairwise_agreement, preference_counts

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("read", type=Path)
    parser.add_argument("--system", required=True, help="the system read against the plain prompt")
    parser.add_argument("--judge", required=True)
    parser.add_argument("--allow-same-model", action="store_true")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    out: dict[str, Any] = {"read": str(args.read), "system": args.system, "judge": args.judge, "directions": {}}
    every_pref: list[float] = []
    every_best: list[str] = []
    for labels_path in sorted(args.read.glob("labels-*.jsonl")):
        tag = labels_path.stem.removeprefix("labels-")
        keys = {k["id"]: k for k in _jsonl(args.read / f"key-{tag}.jsonl")}
        labels = sorted(_jsonl(labels_path), key=lambda r: r["id"])
        direction = labels[0]["direction"].replace("->", "-")
        prompt, other = (args.read / "records" / f"{direction}.{s}.jsonl" for s in ("prompt", args.system))
        if not other.is_file():
            continue
        command = [sys.executable, "-m", "steer", "eval", str(prompt), "--judge", f"llm:{args.judge}"]
        command += ["--pairwise", str(other), "--json"] + (["--allow-same-model"] if args.allow_same_model else [])
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        preferences = result["log_odds"]  # > 0: the plain prompt's rewrite is the better
        records = _jsonl(prompt)
        best, kept = [], []
        for label in labels:
            record = records[label["id"] - 1]
            if record["source_text"] != label["source"]:
                sys.exit(f"{tag}: sheet id {label['id']} is not record {label['id']} of {prompt}")
            key = keys[label["id"]]
            chosen = label["best"] if label["best"] == "tie" else key[label["best"]]
            if chosen not in ("tie", "prompt", args.system):  # a third system read best: no verdict on this pair
                continue
            best.append({"tie": "tie", "prompt": "A"}.get(chosen, "B"))
            kept.append(label)
        picked = [preferences[label["id"] - 1] for label in kept]
        out["directions"][labels[0]["direction"]] = {
            "agreement": pairwise_agreement(picked, best),
            "judge": preference_counts(picked),
            "read": {"prompt": best.count("A"), args.system: best.count("B"), "tie": best.count("tie")},
        }
        every_pref += picked
        every_best += best
        print(labels[0]["direction"], json.dumps(out["directions"][labels[0]["direction"]]), file=sys.stderr)
    out["all"] = {"agreement": pairwise_agreement(every_pref, every_best), "judge": preference_counts(every_pref)}
    args.output.write_text(json.dumps(out, indent=1, ensure_ascii=False), encoding="utf-8")
    print(json.dumps(out["all"]))


if __name__ == "__main__":
    main()
