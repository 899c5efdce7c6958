"""How often the meta rule (`steer.scoring.faithfulness.meta`) fires on human-written sentences:
its false-positive rate per style of the shared corpora (`../shared/data/*/train.*.txt`), on up to
5,000 random sentences each (seed 0), with the matched phrase nouns.

    python research/scripts/meta_false_positives.py [DATA_DIR]
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

from steer.scoring.faithfulness import _TASK_PHRASES, meta, words


def main(data: Path) -> None:
    for path in sorted(data.glob("*/train.*.txt")):
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        random.Random(0).shuffle(lines)
        lines = lines[:5000]
        hits = [t for t in lines if meta(t, "")]
        nouns = Counter(m.group(0).split()[-1] for t in hits for m in _TASK_PHRASES[0].finditer(" ".join(words(t))))
        share = 100 * len(hits) / len(lines)
        print(f"{path.parent.name}/{path.name}: {len(hits)} of {len(lines)} ({share:.2f}%) {dict(nouns)}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data"))
