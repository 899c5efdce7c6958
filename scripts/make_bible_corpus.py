"""Extract the verse-aligned King James / World English Bible pair into data/bible/.

Both translations are in the public domain. They come from Debian's `sword-text-kjv` and
`sword-text-web` packages and are read with PyPI `pysword`:

    apt-get install sword-text-kjv sword-text-web && pip install pysword==0.2.8
    python scripts/make_bible_corpus.py --sword /usr/share/sword --out data/bible

The split is by book, so no chapter of a dev or test book is seen in training.
"""

from __future__ import annotations

import argparse
import csv
import html
import re
from pathlib import Path

KJV, WEB = "engKJV2006eb", "engWEB2015eb"
DEV_BOOKS = {"Ruth", "Joel", "Jonah", "Philippians", "James"}
TEST_BOOKS = {"Esther", "Micah", "Mark", "Colossians", "1 Peter"}
MAX_CHARS = 300

_DROP = re.compile(r"<(note|title)\b[^>]*?(/>|>.*?</\1>)", re.S)
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def clean(raw: str) -> str:
    """Strip OSIS markup (footnotes and headings dropped whole) and collapse whitespace."""
    text = _DROP.sub(" ", raw)
    text = html.unescape(_TAG.sub("", text))
    text = _SPACE.sub(" ", text).strip()
    return re.sub(r" ([,.;:?!])", r"\1", text)


def main() -> None:
    from pysword.modules import SwordModules  # only this script needs pysword

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sword", default="/usr/share/sword")
    ap.add_argument("--out", type=Path, default=Path("data/bible"))
    args = ap.parse_args()
    modules = SwordModules(args.sword)
    modules.parse_modules()
    kjv, web = modules.get_bible_from_module(KJV), modules.get_bible_from_module(WEB)
    rows: dict[str, list[list[str]]] = {"train": [], "dev": [], "test": []}
    skipped = 0
    for testament in ("ot", "nt"):
        for book in kjv.get_structure().get_books()[testament]:
            split = "dev" if book.name in DEV_BOOKS else "test" if book.name in TEST_BOOKS else "train"
            for chapter, n_verses in enumerate(book.chapter_lengths, start=1):
                for verse in range(1, n_verses + 1):
                    ref = dict(books=[book.osis_name], chapters=[chapter], verses=[verse], clean=False)
                    archaic, modern = clean(kjv.get(**ref)), clean(web.get(**ref))
                    if not archaic or not modern or max(len(archaic), len(modern)) > MAX_CHARS:
                        skipped += 1
                        continue
                    rows[split].append([book.name, str(chapter), str(verse), archaic, modern])
    args.out.mkdir(parents=True, exist_ok=True)
    for split, items in rows.items():
        with open(args.out / f"{split}.tsv", "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
            writer.writerow(["book", "chapter", "verse", "archaic", "modern"])
            writer.writerows(items)
        print(f"{split}: {len(items)} verses")
    print(f"skipped {skipped} verses (empty in one translation or longer than {MAX_CHARS} characters)")


if __name__ == "__main__":
    main()
