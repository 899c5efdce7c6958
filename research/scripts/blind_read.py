"""Blind reads by ../shared/rating-protocol.md: build the shuffled sheet and its key from two systems'
records, count the labels per direction, and record the default each direction's read decides.

    python research/scripts/blind_read.py sheet --system prompt=a.jsonl --system default=b.jsonl \\
        --seed 1611 -o DIR --tag fi
    python research/scripts/blind_read.py tally DIR
    python research/scripts/blind_read.py samples DIR --system prompt --system default --seed 7
    python research/scripts/blind_read.py decide DIR --profile data/profiles/X.safetensors --force

`sheet` writes DIR/sheet-TAG.jsonl (what the reader sees: source and rewrites under letters A/B,
in random order per text) and DIR/key-TAG.jsonl (which letter is which system; the reader never
opens it). The reader writes DIR/labels-TAG.jsonl. `tally` joins labels and keys: usable% per
system, best counts and a two-sided sign test per direction. `decide` applies the rule of issue 39:
the steered default stays a direction's default only if its usable% is at least the plain
prompt's + 10 points **and** it is the better rewrite at least as often; otherwise the direction's
default is the plain prompt. It writes that choice beside the profile
(`steer.profiling.defaults`), where `steer transfer` reads it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sheet(systems: list[str], seed: int, out: Path, tag: str) -> None:
    named = [s.split("=", 1) for s in systems]
    records = {name: _jsonl(Path(path)) for name, path in named}
    lengths = {len(r) for r in records.values()}
    if len(lengths) != 1:
        sys.exit(f"the systems' records differ in length: {lengths}")
    rng = random.Random(seed)
    rows, keys = [], []
    first = next(iter(records.values()))
    for i in range(len(first)):
        source = first[i]["source_text"]
        if any(r[i]["source_text"] != source for r in records.values()):
            sys.exit(f"record {i}: the systems rewrote different sources")
        order = list(records)
        rng.shuffle(order)
        letters = "ABC"[: len(order)]
        direction = f"{first[i]['source_style']}->{first[i]['target_style']}"
        rewrites = {letter: records[name][i]["output"] or "" for letter, name in zip(letters, order, strict=True)}
        rows.append({"id": i + 1, "direction": direction, "source": source, "rewrites": rewrites})
        keys.append({"id": i + 1, "direction": direction, **dict(zip(letters, order, strict=True))})
    shown = list(range(len(rows)))
    rng.shuffle(shown)  # the reader meets the texts in random order too
    out.mkdir(parents=True, exist_ok=True)
    for name, items in (("sheet", [rows[i] for i in shown]), ("key", keys)):
        path = out / f"{name}-{tag}.jsonl"
        if path.exists():
            sys.exit(f"{path} exists; a read's files are never overwritten")
        path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items), encoding="utf-8")


def _sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p for `wins` against `losses` (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    p = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * p)


def tally(folder: Path) -> dict[str, dict[str, Any]]:
    """Per direction: n, usable count per system, best counts per system and ties, sign-test p — per
    sheet where a folder holds several sheets of one direction (keyed `direction [tag]`)."""
    counts: dict[str, dict[str, Any]] = {}
    sheets = {p.stem.removeprefix("labels-"): _jsonl(p) for p in sorted(folder.glob("labels-*.jsonl"))}
    tags_of: dict[str, set[str]] = {}
    for tag, rows in sheets.items():
        for row in rows:
            tags_of.setdefault(row["direction"], set()).add(tag)
    for tag, rows in sheets.items():
        keys = {k["id"]: k for k in _jsonl(folder / f"key-{tag}.jsonl")}
        for row in rows:
            key = keys[row["id"]]
            name = row["direction"] if len(tags_of[row["direction"]]) == 1 else f"{row['direction']} [{tag}]"
            entry = counts.setdefault(name, {"n": 0, "usable": {}, "best": {"tie": 0}})
            entry["n"] += 1
            for letter, label in row["labels"].items():
                system = key[letter]
                entry["usable"][system] = entry["usable"].get(system, 0) + int(label["usable"])
                entry["best"].setdefault(system, 0)
            best = row["best"]
            entry["best"]["tie" if best == "tie" else key[best]] += 1
    for entry in counts.values():
        systems = [s for s in entry["best"] if s != "tie"]
        if len(systems) == 2:
            entry["p"] = _sign_test(entry["best"][systems[0]], entry["best"][systems[1]])
    return counts


def samples(folder: Path, systems: list[str], k: int, seed: int) -> str:
    """Markdown tables of `k` random read texts per direction (`seed`): the source, each system's
    rewrite (u: read usable) and the read's best, by system name."""
    out = []
    for labels_path in sorted(folder.glob("labels-*.jsonl")):
        tag = labels_path.stem.removeprefix("labels-")
        keys = {key["id"]: key for key in _jsonl(folder / f"key-{tag}.jsonl")}
        rows = sorted(_jsonl(labels_path), key=lambda r: r["id"])
        picked = sorted(random.Random(f"{seed}-{tag}").sample(range(len(rows)), min(k, len(rows))))
        shown = [s for s in systems if any(s in keys[r["id"]].values() for r in rows)]
        direction = rows[0]["direction"].replace("->", " → ")
        out.append(f"**{direction}** ({len(picked)} random texts of the {len(rows)}, seed {seed}; u = read usable):\n")
        out.append("| source | " + " | ".join(shown) + " | best |")
        out.append("|---|" + "---|" * (len(shown) + 1))
        for i in picked:
            row, key = rows[i], keys[rows[i]["id"]]
            letter_of = {system: letter for letter, system in key.items() if letter in row["rewrites"]}
            cells = []
            for system in shown:
                letter = letter_of[system]
                text = row["rewrites"][letter].replace("|", "\\|").replace("\n", " ")
                cells.append(text + (" (u)" if row["labels"][letter]["usable"] else ""))
            best = "tie" if row["best"] == "tie" else key[row["best"]]
            source = row["source"].replace("|", "\\|").replace("\n", " ")
            out.append(f"| {source} | " + " | ".join(cells) + f" | {best} |")
        out.append("")
    return "\n".join(out)


def decide(folder: Path, profile: Path, steered: str, force: bool, only: list[str] | None = None) -> dict[str, Any]:
    """Each direction's default by the read (issue 39's rule), written beside the profile; `only`
    keeps the named directions (SOURCE->TARGET) of a read that covers several profiles."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from steer.profiling.defaults import write_read_defaults

    choices = {}
    for direction, entry in tally(folder).items():
        if only and direction not in only:
            continue
        n, usable, best = entry["n"], entry["usable"], entry["best"]
        keeps = usable.get(steered, 0) / n >= usable.get("prompt", 0) / n + 0.10 and best.get(steered, 0) >= best.get(
            "prompt", 0
        )
        choices[direction] = {
            "preset": "rerank" if keeps else "prompt",
            "read": str(folder),
            "n": n,
            "usable": {"prompt": usable.get("prompt", 0), "rerank": usable.get(steered, 0)},
            "best": {"prompt": best.get("prompt", 0), "rerank": best.get(steered, 0), "tie": best.get("tie", 0)},
        }
    write_read_defaults(profile, choices, force=force)
    return choices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sheet")
    s.add_argument("--system", action="append", required=True, metavar="NAME=RECORDS.jsonl")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("-o", "--output", type=Path, required=True)
    s.add_argument("--tag", required=True)
    t = sub.add_parser("tally")
    t.add_argument("folder", type=Path)
    d = sub.add_parser("decide")
    d.add_argument("folder", type=Path)
    d.add_argument("--profile", type=Path, required=True)
    d.add_argument("--steered", default="default", help="the steered system's name in the keys")
    d.add_argument("--force", action="store_true")
    d.add_argument("--direction", action="append", help="only this SOURCE->TARGET (repeatable)")
    m = sub.add_parser("samples")
    m.add_argument("folder", type=Path)
    m.add_argument("--system", action="append", required=True, help="system names, in column order")
    m.add_argument("-k", type=int, default=10)
    m.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    if args.command == "samples":
        print(samples(args.folder, args.system, args.k, args.seed))
    elif args.command == "sheet":
        sheet(args.system, args.seed, args.output, args.tag)
    elif args.command == "tally":
        print(json.dumps(tally(args.folder), indent=1))
    else:
        print(json.dumps(decide(args.folder, args.profile, args.steered, args.force, args.direction), indent=1))


if __name__ == "__main__":
    main()
