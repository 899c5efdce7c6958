"""steer's CLI on a CUDA device, end to end, on a tiny random model (the tests' own, built in code):
profile, then transfer with the plain prompt, the guided preset and layer contrast, each on
`--device cuda` and on the CPU; prints per recipe whether it ran and how many of the rewrites are
token-identical between the two devices (greedy decoding on different kernels may part on a near
tie). Run by bench/gpu.sh on the GPU machine; needs no download.

    python bench/cuda_smoke.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import FORMAL, INFORMAL, make_model, make_tokenizer  # noqa: E402

RECIPES = {
    "prompt": ["--preset", "prompt"],
    "guided": ["--preset", "guided", "--top-k", "10%", "--method", "diff"],
    "contrast": ["--mode", "deactivate", "--top-k", "10%", "--method", "diff", "--contrast", "--contrast-layers", "0"],
}


def steer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "steer", *args], capture_output=True, text=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--recipes", default=",".join(RECIPES))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    model = work / "tiny"
    make_model("llama").save_pretrained(model)
    make_tokenizer().save_pretrained(model)
    for name, texts in (("formal", FORMAL), ("informal", INFORMAL)):
        (work / f"{name}.txt").write_text("\n".join(texts) + "\n")
    styles = ["--style", f"formal={work / 'formal.txt'}", "--style", f"informal={work / 'informal.txt'}"]
    for device in (args.device, "cpu"):
        target = str(work / f"{device}.st")
        made = steer("profile", "--model", str(model), *styles, "--device", device, "-q", "-o", target)
        print(f"profile on {device}: exit {made.returncode}", (made.stderr.strip().splitlines() or [""])[-1])
    for recipe in args.recipes.split(","):
        flags = RECIPES[recipe]
        outputs: dict[str, list[str]] = {}
        for turn, device in enumerate((args.device, "cpu")):
            out = work / f"{recipe}-{turn}-{device}.jsonl"
            done = steer("transfer", "-p", str(work / "cpu.st"), "--from", "formal", "--to", "informal", *flags,
                         "--device", device, "--max-new-tokens", "8", "-q", "-o", str(out), *FORMAL)  # fmt: skip
            if done.returncode != 0:
                print(f"{recipe} on {device}: exit {done.returncode}\n{done.stderr[-3000:]}")
                continue
            outputs[device] = [json.loads(line)["raw_output"] for line in out.read_text().splitlines()]
        if len(outputs) == 2:
            same = sum(a == b for a, b in zip(outputs[args.device], outputs["cpu"], strict=True))
            print(f"{recipe}: ran on {args.device}; {same} of {len(FORMAL)} rewrites identical to the CPU's")


if __name__ == "__main__":
    main()
