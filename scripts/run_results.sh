#!/usr/bin/env bash
# Regenerates docs/results.md's tables: tune on dev, then run prompt / deactivate / deactivate+contrast
# for every real corpus in ../shared/data (not shipped; see each config's header) on the embedded model.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
for name in formality politeness paradetox yelp; do
  .venv/bin/steer run "configs/$name.toml" --data-dir "$DATA/$name" --tune -q -o "runs/$name"
done
