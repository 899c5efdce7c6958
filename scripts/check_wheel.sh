#!/usr/bin/env bash
# A non-editable install must behave like the checkout: build a wheel, install it into a fresh venv
# outside the checkout (dependencies borrowed from .venv), and check that `steer transfer` uses the
# packaged per-direction prompt. Run by .ci/run after the tests; needs `make install` first.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python -m pip wheel --quiet --no-deps --no-build-isolation -w "$tmp/dist" .
python3 -m venv "$tmp/venv"
site_new=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
site_dev=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# Dependencies only: .pth files inside a directory named by a .pth are not run, so the checkout's
# editable steer stays invisible and `import steer` finds the wheel.
echo "$site_dev" > "$site_new/zz-steer-dependencies.pth"
"$tmp/venv/bin/python" -m pip install --quiet --no-deps --no-index "$tmp"/dist/steer-*.whl
cd "$tmp"
venv/bin/steer transfer --help > /dev/null
STEER_CACHE="$tmp/cache" HF_HUB_OFFLINE=1 venv/bin/python - "$ROOT" <<'PY'
import json
import subprocess
import sys
from pathlib import Path

import steer

root = Path(sys.argv[1])
assert root not in Path(steer.__file__).resolve().parents, f"steer was imported from the checkout: {steer.__file__}"
sys.path.append(str(root / "tests"))
from conftest import FORMAL, INFORMAL, make_model, make_tokenizer  # noqa: E402

model = Path("tiny")
make_model("llama").save_pretrained(model)
make_tokenizer().save_pretrained(model)
Path("formal.txt").write_text("\n".join(FORMAL) + "\n")
Path("informal.txt").write_text("\n".join(INFORMAL) + "\n")
steer_bin = str(Path(sys.executable).parent / "steer")
subprocess.run([steer_bin, "profile", "--model", "tiny", "--style", "formal=formal.txt", "--style",
                "informal=informal.txt", "-o", "p.safetensors", "-q"], check=True)
subprocess.run([steer_bin, "transfer", "-p", "p.safetensors", "--from", "formal", "--to", "informal",
                "--max-new-tokens", "3", "-q", "-o", "o.jsonl", "hello"], check=True)
record = json.loads(Path("o.jsonl").read_text().splitlines()[0])
from steer.generation.steerer import GENERIC_PROMPT, load_prompts  # noqa: E402

from importlib import resources  # noqa: E402

assert resources.files("steer.serve").joinpath("static/index.html").is_file(), "steer serve's page is not in the wheel"
expected = load_prompts()["formal->informal"]
assert record["prompt_template"] == expected != GENERIC_PROMPT, record["prompt_template"]
print(f"wheel install OK: steer {steer.__version__} from {Path(steer.__file__).parent}, per-direction prompt used")
PY
