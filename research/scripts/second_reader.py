"""How much two blind readers agree, as the ceiling against which the LLM judge's agreement is read:
a second reader's labels of a random subset of the labelled set, against the first reader's, the
LLM judge's (judge-v2) and the rules' on the same rewrites.

    python research/scripts/second_reader.py sheets research/reads/2026-12-06-second-reader --seed 20261206
    python research/scripts/second_reader.py agree research/reads/2026-12-06-second-reader

`sheets` draws 11 texts per direction at random from the labelled set (both systems' rewrites of
each, under A/B in a random order) into three sheets of three directions: sheet-N.jsonl (what the
second reader sees, the system hidden) and key-N.jsonl (which rewrite of which read each letter
is). The reader writes labels-N.jsonl by the rating protocol. `agree` compares them with the first
reader's labels, the judge's answers and the rules' usable from
research/reads/judge-agreement-judge-v2.json. No model is loaded.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from steer.evaluation.llm_judge import agreement  # noqa: E402

LABELLED = ROOT / "research" / "reads" / "judge-agreement-judge-v2.json"
SENTIMENT = {"negative->positive", "positive->negative"}
# Each label as yes/no: what counts as a pass (the protocol's scales are style 0–2, meaning 0–2).
PASS = {"usable": 1, "style": 2, "meaning": 2, "fluency": 1}
SHEETS = (  # three directions per sheet (one reader each)
    ("formal->informal", "informal->formal", "impolite->polite"),
    ("polite->impolite", "toxic->neutral", "negative->positive"),
    ("positive->negative", "modern->shakespearean", "shakespearean->modern"),
)
PER_DIRECTION = 11


def make_sheets(folder: Path, seed: int) -> None:
    """The second read's sheets and keys: texts drawn at random per direction, rewrites shuffled
    under letters, texts shuffled within a sheet; an existing sheet is never overwritten."""
    texts: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for item in json.loads(LABELLED.read_text(encoding="utf-8"))["items"]:
        texts[(item["read"], item["direction"], item["id"])].append(item)
    rng = random.Random(seed)
    by_direction: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for key in sorted(texts):
        by_direction[key[1]].append(key)
    made = [folder / f"{name}-{n}.jsonl" for n in range(1, len(SHEETS) + 1) for name in ("sheet", "key", "labels")]
    if any(path.exists() for path in made):
        raise SystemExit(f"{folder} already holds a read's sheets, keys or labels; choose a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    for n, directions in enumerate(SHEETS, 1):
        sheet, keys = [], []
        for direction in directions:
            for key in rng.sample(by_direction[direction], min(PER_DIRECTION, len(by_direction[direction]))):
                rewrites = texts[key]
                if len(rewrites) > 2:
                    raise SystemExit(f"{key}: {len(rewrites)} rewrites of one text; a sheet holds two (A, B)")
                rng.shuffle(rewrites)
                lettered = list(zip("AB", rewrites, strict=False))
                sheet.append({"direction": direction, "source": rewrites[0]["source"],
                              "rewrites": {x: r["rewrite"] for x, r in lettered}})  # fmt: skip
                keys.append({"read": key[0], "id": key[2], "direction": direction,
                             "systems": {x: r["system"] for x, r in lettered}})  # fmt: skip
        order = list(range(len(sheet)))
        rng.shuffle(order)
        for name, rows in (("sheet", sheet), ("key", keys)):
            shuffled = [{"n": k, **rows[j]} for k, j in enumerate(order, 1)]
            text = "".join(json.dumps(r) + "\n" for r in shuffled)
            (folder / f"{name}-{n}.jsonl").write_text(text, encoding="utf-8")


def lines(path: Path) -> list[dict[str, Any]]:
    """A JSONL file's objects; a missing file is one line naming it."""
    if not path.is_file():
        raise SystemExit(f"{path} is missing; a read's folder holds sheet-N, key-N and labels-N for each N")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def paired(folder: Path) -> list[dict[str, Any]]:
    """Each rewrite the second reader labelled, with the first reader's item from the labelled set."""
    first = {
        (i["read"], i["id"], i["direction"], i["system"]): i
        for i in json.loads(LABELLED.read_text(encoding="utf-8"))["items"]
    }
    out = []
    for sheet in sorted(folder.glob("sheet-*.jsonl")):
        n = sheet.stem.removeprefix("sheet-")
        keys, labels = lines(folder / f"key-{n}.jsonl"), lines(folder / f"labels-{n}.jsonl")
        for text, key, label in zip(lines(sheet), keys, labels, strict=True):
            if not text["n"] == key["n"] == label["n"]:
                raise SystemExit(f"{folder}: sheet, key and labels {n} are not in the same order at n={text['n']}")
            for letter, rewrite in text["rewrites"].items():
                item = first[(key["read"], key["id"], key["direction"], key["systems"][letter])]
                if item["rewrite"] != rewrite:
                    raise SystemExit(f"{folder}: {n}/{text['n']}{letter} is not the labelled set's rewrite")
                second = label.get("labels", {}).get(letter, {})
                if any(q not in second for q in PASS):
                    raise SystemExit(
                        f"labels-{n}.jsonl n={text['n']} {letter}: needs {', '.join(PASS)}; it has {second}"
                    )
                out.append({"first": item, "second": second})
    return out


def kappa(a: list[bool], b: list[bool]) -> str:
    """'accuracy / κ' of two yes/no labellings, as printed."""
    stats = agreement(a, b)
    value = stats["kappa"]
    return f"{stats['accuracy']:.2f} / {'n/a' if value != value else f'{value:.2f}'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("sheets", "agree"), help="make the sheets, or compare the labels")
    parser.add_argument("folder", type=Path, help="the second read's folder (sheets, keys, labels)")
    parser.add_argument("--seed", type=int, default=20261206, help="sampling seed (sheets)")
    args = parser.parse_args()
    if args.command == "sheets":
        make_sheets(args.folder, args.seed)
        return
    rows = paired(args.folder)
    groups = {
        "all": rows,
        "sentiment": [r for r in rows if r["first"]["direction"] in SENTIMENT],
        "other seven": [r for r in rows if r["first"]["direction"] not in SENTIMENT],
    }
    distinct = list({(r["first"]["direction"], r["first"]["source"], r["first"]["rewrite"]): r for r in rows}.values())
    groups["distinct rewrites (an identical A and B once)"] = distinct
    print("accuracy / Cohen's κ on the rewrites both readers labelled")
    for group, rs in groups.items():
        second = {q: [r["second"][q] >= PASS[q] for r in rs] for q in PASS}
        first = {q: [r["first"]["labels"][q] >= PASS[q] for r in rs] for q in PASS}
        usable = f"first {sum(first['usable'])}, second {sum(second['usable'])}"
        print(f"{group} ({len(rs)} rewrites; read usable: {usable}):")
        for q in PASS:
            print(f"  {q}: second reader vs first {kappa(second[q], first[q])}")
        llm = [bool(r["first"]["llm_usable"]) for r in rs]
        rules = [bool(r["first"]["usable_rule"]) for r in rs]
        print(
            f"  llm-usable (judge-v2) vs first {kappa(llm, first['usable'])}, vs second {kappa(llm, second['usable'])}"
        )
        print(f"  rules' usable vs first {kappa(rules, first['usable'])}, vs second {kappa(rules, second['usable'])}")


if __name__ == "__main__":
    main()
