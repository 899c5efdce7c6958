"""Training pairs from the model's own rewrites (issue 64's setting without parallel data): the
records `steer transfer -o` wrote for training texts of the source style, kept where the LLM judge
(`steer eval RECORDS --judge llm --allow-same-model --json`) calls the rewrite usable, as the TSV
`steer train --pairs` reads. The judge selects here, so its numbers on the trained recipe are
self-selected and do not count; the blind read decides.

    python research/scripts/self_pairs.py --records cand.jsonl --judged judged.json -o pairs.tsv [--top 40]

`--top N` keeps instead the N rewrites the judge scores highest by llm-style × llm-meaning (copies of
the source left out): where the judge calls almost nothing usable (formal → informal: 4 of 112 plain
prompt rewrites), it still ranks them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--judged", type=Path, required=True, help="steer eval --judge llm --json's output")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--top", type=int, default=None, help="keep the N best by llm-style × llm-meaning instead")
    args = parser.parse_args()
    records = [json.loads(line) for line in args.records.read_text(encoding="utf-8").splitlines() if line.strip()]
    judged = json.loads(args.judged.read_text(encoding="utf-8"))["sentences"]
    usable = judged["llm_usable"]
    if len(usable) != len(records):
        raise SystemExit(f"{len(records)} records but {len(usable)} judged rewrites")
    source, target = records[0]["source_style"], records[0]["target_style"]
    clean = lambda text: " ".join(text.split())  # noqa: E731  (one line per pair: no tabs or newlines)
    pairs = [(clean(r["source_text"]), clean(r["output"])) for r in records]
    if args.top is None:
        kept = [pair for pair, ok in zip(pairs, usable, strict=True) if ok]
    else:
        score = [s * m for s, m in zip(judged["llm_style"], judged["llm_meaning"], strict=True)]
        ranked = sorted(zip(score, pairs, strict=True), key=lambda item: -item[0])
        kept = [pair for _, pair in ranked if pair[1] and pair[1] != pair[0]][: args.top]
    kept = [(s, o) for s, o in kept if o and o != s]
    args.output.write_text(f"{source}\t{target}\n" + "".join(f"{s}\t{o}\n" for s, o in kept), encoding="utf-8")
    print(f"{args.output}: {len(kept)} of {len(records)} rewrites kept")


if __name__ == "__main__":
    main()
