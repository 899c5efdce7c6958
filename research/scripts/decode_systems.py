"""Decode random dev texts of a run config's directions under the plain prompt and the best
tuned recipes of each kind, for a blind read (then `blind_read.py sheet`).

    python research/scripts/decode_systems.py configs/qwen2.5-coder-1.5b/formality.toml \
        --data-dir ../shared/data/formality --tuned runs/formality-qwen/tuned.json --n 20 --seed 1207 \
        --kind contrast=instruction_contrast --kind paper=mode:deactivate -o DIR

For each direction, `--n` texts are drawn at random (`--seed`) from its evaluated dev texts (the
config's first `limit`; `steer tune` chose on the texts after them). Each `--kind NAME=FIELD` picks,
among the direction's tune trials whose settings have FIELD (or FIELD:VALUE), the one with the
highest J (the selection side's score; the read never chooses); `--system NAME=JSON` decodes a fixed
recipe (its fields over the config's); `prompt` is always decoded. Writes
DIR/<direction>.<system>.jsonl (records of `steer transfer`) and DIR/systems.json (what each system
was, per direction, and its tuning J).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def best_trials(tuned: Path, kinds: dict[str, str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per direction and kind, the tune trial with the highest J among those of that kind."""
    trials = json.loads(tuned.read_text(encoding="utf-8"))["trials"]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, spec in kinds.items():
        field, _, value = spec.partition(":")
        for trial in trials:
            settings = trial["settings"]
            if field not in settings or (value and str(settings[field]) != value):
                continue
            if not value and not settings[field]:  # FIELD alone: the trials that set it (push, contrast γ > 0)
                continue
            kept = out.setdefault(trial["direction"], {}).get(name)
            j = float(trial["metrics"].get("j") or float("-inf"))
            if kept is None or j > kept["j"]:
                out[trial["direction"]][name] = {"settings": settings, "j": j}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--tuned", type=Path, help="tuned.json whose trials --kind picks from")
    parser.add_argument("--kind", action="append", default=[], metavar="NAME=FIELD[:VALUE]")
    parser.add_argument("--system", action="append", default=[], metavar="NAME=JSON", help="a fixed recipe's fields")
    parser.add_argument("--direction", action="append", help="only this SOURCE-TARGET (repeatable)")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()

    from steer.lab.experiment import load_experiment
    from steer.rewriting.opened import OpenedProfile
    from steer.rewriting.recipe import Recipe
    from steer.rewriting.service import service_for
    from steer.settings import TransferSettings

    exp = load_experiment(args.config, data_dir=args.data_dir)
    kinds = dict(k.split("=", 1) for k in args.kind)
    chosen = best_trials(args.tuned, kinds) if args.tuned is not None else {}
    fixed = {name: {"settings": json.loads(spec), "j": None} for name, spec in (s.split("=", 1) for s in args.system)}
    opened = OpenedProfile.open(exp.profile_path)
    lm = opened.load_model()
    args.output.mkdir(parents=True, exist_ok=True)
    described: dict[str, Any] = {}
    for direction in exp.directions:
        if args.direction and direction.name not in args.direction:
            continue
        rng = random.Random(f"{args.seed}-{direction.name}")
        picks = sorted(rng.sample(range(len(direction.texts)), min(args.n, len(direction.texts))))
        texts = [direction.texts[i] for i in picks]
        systems = {"prompt": {"settings": {"mode": "prompt"}, "j": None}, **chosen.get(direction.name, {}), **fixed}
        described[direction.name] = {"dev_indices": picks, **systems}
        for system, entry in systems.items():
            settings = TransferSettings.resolve(recipe=entry["settings"], base=exp.base)  # as `steer tune` decoded it
            service = service_for(opened, lm, direction.source, direction.target, Recipe(settings, preset=system))
            records = [service.record(r).to_dict() for r in service.results(texts)]
            path = args.output / f"{direction.source}-{direction.target}.{system}.jsonl"
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
            print(f"{path}: {len(records)} records ({system}: {service.job.recipe})", file=sys.stderr)
    known = args.output / "systems.json"  # several configs may decode into one folder: keep the others' entries
    if known.is_file():
        described = {**json.loads(known.read_text(encoding="utf-8")), **described}
    known.write_text(json.dumps(described, indent=1, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
