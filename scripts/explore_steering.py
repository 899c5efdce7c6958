"""Compare many steering settings on a config's dev texts (issue: make steering beat prompting).

    .venv/bin/python scripts/explore_steering.py configs/formality.toml --data-dir ../shared/data/formality \
        --limit 32 -o runs/formality

Outputs are cached in the run directory like `steer run`'s, so reruns only score.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from steer.experiment import Runner, load_experiment
from steer.models import load_model
from steer.transfer import GENERIC_PROMPT, PRESETS

GRIDS: dict[str, list[dict[str, object]]] = {
    # first round: the paper's recipe and its neighbours, plus shift
    "edit": [
        {"mode": "prompt"},
        {"mode": "deactivate", "method": "paper", "top_k": "1%"},
        {"mode": "deactivate", "method": "diff", "top_k": "0.5%"},
        {"mode": "deactivate", "method": "diff", "top_k": "1%"},
        {"mode": "deactivate", "method": "diff", "top_k": "1%", "positions": "generated"},
        {"mode": "deactivate+amplify", "method": "diff", "top_k": "0.5%", "amplify_factor": 2.0},
        {"mode": "deactivate", "method": "paper", "top_k": "1%", "positions": "generated"},
        {"mode": "deactivate+amplify", "method": "paper", "top_k": "1%", "amplify_factor": 1.5},
        {"mode": "shift", "top_k": "5%", "strength": 0.5},
        {"mode": "shift", "top_k": "1%", "strength": 1.0},
        {"mode": "shift", "top_k": "1%", "strength": 2.0},
        {"mode": "shift", "top_k": "5%", "strength": 1.0},
        {"mode": "shift", "top_k": "5%", "strength": 2.0},
        {"mode": "shift", "top_k": "5%", "strength": 2.0, "positions": "generated"},
    ],
    # second round: guidance (edited vs unedited copy of each prompt in one batch)
    "guidance": [
        {"mode": "prompt"},
        {"mode": "deactivate", "method": "paper", "top_k": "1%", "guidance": 2.0},
        {"mode": "shift", "top_k": "5%", "strength": 1.0, "guidance": 1.0},
        {"mode": "shift", "top_k": "5%", "strength": 1.0, "guidance": 2.0},
        {"mode": "shift", "top_k": "5%", "strength": 2.0, "guidance": 1.0},
        {"mode": "shift", "top_k": "5%", "strength": 2.0, "guidance": 2.0},
        {"mode": "deactivate+amplify", "method": "paper", "top_k": "1%", "amplify_factor": 1.5, "guidance": 2.0},
    ],
    # third round: anchor guidance harder (α) and edit only the late blocks
    "anchored": [
        {"mode": "prompt"},
        {"mode": "shift", "top_k": "5%", "strength": 2.0, "guidance": 1.0, "alpha": 0.3},
        {"mode": "shift", "top_k": "5%", "strength": 2.0, "guidance": 1.0, "edit_layers": "last:10"},
        {"mode": "shift", "top_k": "5%", "strength": 3.0, "guidance": 1.0, "alpha": 0.3, "edit_layers": "last:10"},
        {"mode": "shift", "top_k": "5%", "strength": 2.0, "guidance": 1.0, "positions": "generated"},
        {"mode": "shift", "top_k": "5%", "strength": 1.0, "edit_layers": "last:10"},
    ],
    # fourth round: forbid the reply from repeating its own trigrams (steering provokes loops)
    # fifth round: one generic instruction for every direction instead of the per-pair chat phrasing
    "prompts": [
        {"mode": "prompt", "prompt": GENERIC_PROMPT},
        {"preset": "guided", "prompt": GENERIC_PROMPT},
    ],
    "norepeat": [
        {"mode": "prompt", "no_repeat_ngram": 3},
        {"preset": "guided", "no_repeat_ngram": 3},
        {"preset": "guided", "strength": 3.0, "no_repeat_ngram": 3},
    ],
}


def label(setting: dict[str, object]) -> str:
    named = {k: ("generic" if v == GENERIC_PROMPT else v) for k, v in setting.items()}
    return "explore-" + "-".join(f"{k}={v}" for k, v in named.items()).replace("%", "pct").replace("+", "_")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("config")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--limit", type=int, default=32)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--grid", default="edit", choices=sorted(GRIDS))
    ap.add_argument("--only", default=None, help="comma-separated grid indices to run (default: all)")
    args = ap.parse_args()
    exp = load_experiment(args.config, data_dir=args.data_dir, limit=args.limit)
    runner = Runner(exp, args.out, load_model(exp.model, progress=False), progress=False)
    rows = []
    for direction in exp.directions:
        grid = GRIDS[args.grid]
        picked = [grid[int(i)] for i in args.only.split(",")] if args.only else grid
        for setting in picked:
            fields = dict(setting)
            preset = fields.pop("preset", None)
            recipe = {**(PRESETS[str(preset)] if preset else {"contrast": False}), **fields}
            settings = replace(exp.base, **recipe)  # type: ignore[arg-type]
            metrics = runner.score(direction, runner.transfer(direction, settings, label(setting)))
            rows.append(
                {
                    "direction": direction.name,
                    "setting": setting,
                    **setting,
                    **{k: v for k, v in metrics.items() if k != "signatures"},
                }
            )
            m = rows[-1]
            print(
                f"{direction.name:<20} {label(setting)[8:]:<70} acc {m.get('accuracy', 0):.3f} "
                f"sim {m.get('similarity', 0):.3f} sbleu {m.get('self_bleu', 0):5.1f} ppl {m.get('ppl', 0):7.1f}",
                flush=True,
            )
    out = Path(args.out, f"explore-{args.grid}.json")
    old = json.loads(out.read_text()) if out.is_file() else []
    seen = {json.dumps(r["setting"], sort_keys=True) + r["direction"] for r in rows}
    kept = [r for r in old if json.dumps(r.get("setting"), sort_keys=True) + r["direction"] not in seen]
    out.write_text(json.dumps(kept + rows, indent=2))


if __name__ == "__main__":
    main()
