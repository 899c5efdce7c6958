#!/usr/bin/env bash
# The GPU machine's one prepared run (issues 39 and 40, item 5): steer's CLI on CUDA end to end (a tiny
# random model, bench/cuda_smoke.py), then bench/shapes.py — the three embedded architectures with random
# weights and a fixed 32 tokens per text, in bfloat16 and float32 — since their GGUF files (98 MB to 1.1 GB)
# cannot reach a machine that receives at most 64 MiB. Needs .gpu/configs.tgz and .gpu/{formal,informal}.txt
# (`python bench/shapes.py --export .gpu/configs`, then tar; the dev texts of ../shared/data/formality).
set -uo pipefail
OUT=${OUT:-out/gpu}
mkdir -p "$OUT" .gpu/c
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 STEER_CACHE=/tmp/steer-cache TOKENIZERS_PARALLELISM=false
tar xzf .gpu/configs.tgz -C .gpu/c
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
timeout 200 python bench/cuda_smoke.py --device cuda 2>&1 | grep -v -i warn | tee "$OUT/smoke.txt"
shapes() { timeout 130 python bench/shapes.py --configs .gpu/c/configs --device cuda "$@" 2>&1 | grep -v -i warn; }
shapes --dtype bfloat16 --batch-size 64 --texts 256 --profile-texts 300 | tee "$OUT/shapes-bf16-b64.md"
shapes --dtype float32 --batch-size 64 --texts 256 --profile-texts 300 | tee "$OUT/shapes-fp32-b64.md"
shapes --dtype bfloat16 --batch-size 8 --texts 64 --profile-texts 300 | tee "$OUT/shapes-bf16-b8.md"
