"""Read style corpora: one text per item, from files, Hugging Face datasets or stdin.

A SOURCE is `path.txt` (one text per line), `path.jsonl[:FIELD]`, `path.csv[:COLUMN]`,
`path.tsv[:COLUMN]`, `path.parquet[:COLUMN]` (FIELD/COLUMN default to `text`; a column may be a
header name or a 0-based index; Parquet needs pyarrow, which `steer[ray]` brings),
`hf:NAME[:CONFIG]:SPLIT:COLUMN`, or `-` for stdin. Empty lines are skipped.

A `.txt`, `.jsonl` or `.parquet` file can also be read in blocks (`BlockedInput`): one pass over
its bytes finds where each block of lines starts, and each block is read on its own, where it is
decoded — so the Ray engine's driver never holds the texts.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from steer.errors import SteerError
from steer.files import json_lines

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
FORMATS = (".txt", ".jsonl", ".csv", ".tsv", ".parquet")


@dataclass(frozen=True)
class Corpus:
    """The texts of one style, with where they came from and a hash of exactly what was used."""

    name: str
    texts: tuple[str, ...]
    source: str
    sha256: str
    duplicates_removed: int = 0


def parse_style(spec: str) -> tuple[str, str]:
    """Split `NAME=SOURCE`, checking that NAME is a plain identifier."""
    name, sep, source = spec.partition("=")
    if not sep or not source:
        raise SteerError(f"`styles` {spec!r} must look like NAME=SOURCE, e.g. formal=data/formal.txt")
    if not _NAME.match(name):
        raise SteerError(f"style name {name!r} must be letters, digits, '_', '-', '.' or '+'")
    return name, source


def _decode_lines(data: bytes, origin: str) -> list[str]:
    """UTF-8 lines of a file or stdin; a byte-order mark at the start is dropped (editors on
    Windows write one, and it would reach the model or rename the first CSV column)."""
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    out = []
    for number, raw in enumerate(lines, start=1):
        try:
            out.append(raw.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError:
            raise SteerError(f"{origin}: line {number} is not valid UTF-8; re-encode the file as UTF-8") from None
    return out


def _split_selector(source: str) -> tuple[str, str | None]:
    for ext in FORMATS:
        marker = ext + ":"
        if marker in source:
            path, _, selector = source.rpartition(marker)
            return path + ext, selector
    return source, None


def source_file(source: str) -> str | None:
    """The file a corpus spec reads (`x.tsv:col` → `x.tsv`), or None for stdin and `hf:` sources."""
    if source == "-" or source.startswith("hf:"):
        return None
    return _split_selector(source)[0]


def _read_bytes(path: str) -> bytes:
    p = Path(path)
    if not p.exists():
        raise SteerError(f"corpus file {path} does not exist")
    if p.is_dir():
        raise SteerError(f"corpus {path} is a directory; pass a file")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise SteerError(f"cannot read corpus file {path}: {exc.strerror}") from None


def _from_table(lines: list[str], path: str, selector: str | None, delimiter: str) -> list[str]:
    """The column `selector` (default "text") of a TSV/CSV file's rows below its header; blank
    lines are skipped, and a row too short to have the column is refused with its line number
    (a silently blank text would be rewritten or profiled as nothing)."""
    reader = csv.reader(iter(lines), delimiter=delimiter)
    rows = [(reader.line_num, row) for row in reader if row and any(cell.strip() for cell in row)]
    if not rows:
        return []
    header, body = rows[0][1], rows[1:]
    column = selector or "text"
    if column in header:
        index = header.index(column)
    elif column.isdigit() and int(column) < len(header):
        index = int(column)
    else:
        raise SteerError(f"{path} has no column {column!r}; columns: {', '.join(header)} (select with {path}:COLUMN)")
    for number, row in body:
        if index >= len(row):
            raise SteerError(
                f"{path}: line {number} has {len(row)} of the header's {len(header)} columns, so no {column!r}; "
                f"fill the row in (a {'tab' if delimiter == chr(9) else 'comma'} inside a text must be quoted)"
            )
    return [row[index] for _, row in body]


def _from_jsonl(lines: list[str], path: str, selector: str | None, first_line: int = 1) -> list[str]:
    """The field `selector` (default "text") of every non-blank line; errors name the line
    (`first_line`: the number of `lines[0]` in the file, for a block read on its own)."""
    field = selector or "text"
    texts = []
    for number, record in json_lines(lines, path, first_line=first_line):
        if field not in record:
            raise SteerError(f"{path}: line {number} has no field {field!r} (select with {path}:FIELD)")
        value = record[field]
        if not isinstance(value, str):
            shown = "null" if value is None else type(value).__name__
            raise SteerError(
                f"{path}: line {number}'s field {field!r} is {shown}, not a string; give every text as a string"
            )
        texts.append(value)
    return texts


def _from_parquet(path: str, selector: str | None) -> list[str]:
    """One column of a Parquet file (pyarrow reads it; no pickles)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SteerError(f"{path}: Parquet needs pyarrow: pip install pyarrow (or 'steer[ray]')") from None
    _read_bytes(path)  # the same errors as other files for a missing path or a directory
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow's errors for a damaged or non-Parquet file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SteerError(f"{path} is not a readable Parquet file ({first})") from None
    column = _parquet_column(table.column_names, selector, path)
    return ["" if x is None else str(x) for x in table.column(column).to_pylist()]


def _parquet_column(names: Sequence[str], selector: str | None, path: str) -> str:
    """The column a Parquet selector names: a column name or a 0-based index (default `text`)."""
    column = selector or "text"
    if column not in names and column.isdigit() and int(column) < len(names):
        column = names[int(column)]
    if column not in names:
        raise SteerError(f"{path} has no column {column!r}; columns: {', '.join(names)} (select with {path}:COLUMN)")
    return column


def _from_hf(spec: str) -> list[str]:
    parts = spec[3:].split(":")
    if len(parts) not in (3, 4):
        raise SteerError(f"Hugging Face source {spec!r} must look like hf:NAME[:CONFIG]:SPLIT:COLUMN")
    name, config, split, column = (parts[0], None, *parts[1:]) if len(parts) == 3 else parts
    try:
        import datasets
    except ImportError:
        raise SteerError("hf: sources need the 'datasets' package: pip install datasets") from None
    try:
        data = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # datasets raises many types for offline/missing data
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SteerError(f"could not load dataset {spec!r}: {first} (offline? use a local file)") from None
    if column not in data.column_names:
        raise SteerError(f"dataset {spec!r} has no column {column!r}; columns: {', '.join(data.column_names)}")
    return [str(x) for x in data[column]]


def _read_stdin(stream: TextIO | None) -> bytes:
    """The bytes of standard input. A closed stdin (`steer … <&-`, a service without one: Python's
    `sys.stdin` is then None) is a one-line error naming the fix, not a traceback from `.read()`."""
    closed = "standard input is closed, so '-' has no texts to read; pipe them in (… | steer …) or give a file"
    if stream is None or getattr(stream, "closed", False):
        raise SteerError(closed)
    buffer = getattr(stream, "buffer", None)
    try:
        return buffer.read() if buffer is not None else stream.read().encode("utf-8")
    except ValueError:  # "I/O operation on closed file": closed under the wrapper
        raise SteerError(closed) from None
    except OSError as exc:  # EBADF and the like: the descriptor is not readable
        raise SteerError(f"cannot read standard input ({exc.strerror or exc}); {closed.partition('; ')[2]}") from None


def read_texts(source: str, stdin: TextIO | None = None, *, keep_empty: bool = False) -> list[str]:
    """All non-empty texts of SOURCE, stripped, in file order.

    With `keep_empty`, empty items stay (as "") so the result aligns row by row with another
    file, e.g. references with missing cells.
    """
    if source == "-":
        raw = _decode_lines(_read_stdin(stdin if stdin is not None else sys.stdin), "<stdin>")
        raw = raw[:-1] if raw and raw[-1] == "" else raw  # the final newline ends a line
    elif source.startswith("hf:"):
        raw = _from_hf(source)
    else:
        path, selector = _split_selector(source)
        suffix = Path(path).suffix.lower() or ".txt"  # no extension: one text per line
        if suffix not in FORMATS:
            raise SteerError(
                f"corpus {path} has an unknown format {suffix or '(none)'}; use one of {', '.join(FORMATS)}"
            )
        lines = _decode_lines(_read_bytes(path), path) if suffix != ".parquet" else []
        if suffix == ".parquet":
            raw = _from_parquet(path, selector)
        elif suffix == ".txt":
            if selector:
                raise SteerError(f"{path}: a .txt corpus takes no ':{selector}' selector")
            raw = lines[:-1] if lines and lines[-1] == "" else lines  # the final newline ends a line
        elif suffix == ".jsonl":
            raw = _from_jsonl(lines, path, selector)
        else:
            raw = _from_table(lines, path, selector, "\t" if suffix == ".tsv" else ",")
    if keep_empty:
        return [visible(text) for text in raw]
    return [text for text in map(visible, raw) if text]


_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"  # zero-width spaces and joiners, word joiner, BOM, soft hyphen


def visible(text: str) -> str:
    """`text` stripped of surrounding white space — and "" when nothing visible is left (a line of
    zero-width spaces is an empty line, not a text to rewrite or profile)."""
    stripped = text.strip()
    return stripped if stripped.strip(_INVISIBLE).strip() else ""


def corpus_hash(texts: Sequence[str]) -> str:
    """sha256 of the texts joined by newlines: identifies exactly what was profiled."""
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


def load_corpus(
    name: str, source: str, *, limit: int | None = None, dedupe: bool = False, stdin: TextIO | None = None
) -> Corpus:
    """Read one style's corpus, optionally de-duplicated (first occurrence kept) and cut to `limit`."""
    texts = read_texts(source, stdin=stdin)
    removed = 0
    if dedupe:
        unique = list(dict.fromkeys(texts))
        removed, texts = len(texts) - len(unique), unique
    if limit is not None:
        texts = texts[:limit]
    if not texts:
        raise SteerError(f"style {name!r}: corpus {source} has no texts")
    return Corpus(name, tuple(texts), source, corpus_hash(texts), removed)


def load_styles(
    specs: Sequence[str], *, limit: int | None = None, dedupe: bool = False, stdin: TextIO | None = None
) -> list[Corpus]:
    """Parse and read every `--style NAME=SOURCE`; needs two or more distinct names, one stdin at
    most, and different texts: two styles read from the same texts (`a=f.txt b=f.txt`, or a copy)
    have no neuron that tells them apart, so they are refused rather than profiled into nothing."""
    parsed = [parse_style(s) for s in specs]
    names = [n for n, _ in parsed]
    if len(parsed) < 2:
        raise SteerError(f"need at least two styles to compare, got {len(parsed)}; repeat `styles` NAME=SOURCE")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SteerError(f"style {dupes[0]!r} is given twice; each of `styles` needs its own name")
    if sum(src == "-" for _, src in parsed) > 1:
        raise SteerError("only one style can read from stdin ('-')")
    corpora = [load_corpus(n, s, limit=limit, dedupe=dedupe, stdin=stdin) for n, s in parsed]
    first_of: dict[str, Corpus] = {}
    for corpus in corpora:
        same = first_of.setdefault(corpus.sha256, corpus)
        if same is not corpus:
            raise SteerError(
                f"styles {same.name!r} ({same.source}) and {corpus.name!r} ({corpus.source}) have the same "
                f"{len(corpus.texts)} texts, so nothing tells them apart; give each style its own texts"
            )
    return corpora


STREAMED = (".txt", ".jsonl", ".parquet")  # formats `BlockedInput` reads block by block
_CHUNK = 1 << 20


def reads_in_blocks(source: str) -> bool:
    """Whether `BlockedInput` can read SOURCE: a .txt, .jsonl or .parquet file (not stdin, not `hf:`)."""
    path = source_file(source)
    return path is not None and (Path(path).suffix.lower() or ".txt") in STREAMED


@dataclass(frozen=True)
class InputBlock:
    """Lines `first` … `first + count − 1` of a file (blank ones counted, as `read_texts(…,
    keep_empty=True)` numbers them), at bytes `start` … `end` (rows, for Parquet)."""

    first: int
    count: int
    start: int
    end: int


@dataclass(frozen=True)
class BlockedInput:
    """A file cut into blocks of `block_size` lines by one streaming pass (`scan`), which also checks
    every line (UTF-8, JSON, the field or column) and hashes the bytes, so that a bad line fails
    before any work and a resume can tell the same input from another. `read(block)` gives the
    block's texts, stripped, "" for a blank line — the items `read_texts(keep_empty=True)` gives."""

    path: str
    suffix: str
    selector: str | None
    blocks: tuple[InputBlock, ...]
    sha256: str
    texts: int  # non-blank texts

    @property
    def lines(self) -> int:
        return sum(b.count for b in self.blocks)

    @classmethod
    def scan(cls, source: str, block_size: int) -> BlockedInput:
        """Blocks of `block_size` lines of a `.txt`, `.jsonl` or `.parquet` SOURCE (see the module)."""
        path, selector = _split_selector(source)
        suffix = Path(path).suffix.lower() or ".txt"
        if suffix not in STREAMED:
            raise SteerError(f"{path}: only {', '.join(STREAMED)} files are read in blocks; got {suffix}")
        if suffix == ".txt" and selector:
            raise SteerError(f"{path}: a .txt corpus takes no ':{selector}' selector")
        if not Path(path).is_file():
            _read_bytes(path)  # the same one-line errors as `read_texts` for a missing path or a directory
        scan = _scan_parquet if suffix == ".parquet" else _scan_lines
        blocks, digest, texts = scan(path, suffix, selector, block_size)
        return cls(path, suffix, selector, tuple(blocks), digest, texts)

    def read(self, block: InputBlock) -> list[str]:
        """The block's texts, stripped ("" for a blank line or a missing cell)."""
        if self.suffix == ".parquet":
            return _parquet_rows(self.path, self.selector, self.sha256, block.start, block.end)
        with open(self.path, "rb") as fh:
            fh.seek(block.start)
            data = fh.read(block.end - block.start)
        lines = [raw.decode("utf-8").rstrip("\r") for raw in data.split(b"\n")]
        lines = lines[:-1] if data.endswith(b"\n") else lines
        if self.suffix == ".jsonl":
            lines = _from_jsonl(lines, self.path, self.selector)
        return [visible(text) for text in lines]


def _scan_lines(path: str, suffix: str, selector: str | None, size: int) -> tuple[list[InputBlock], str, int]:
    """`.txt` (every line is an item) and `.jsonl` (every non-blank line is one): block offsets,
    sha256 and the count of non-blank texts, in one pass that decodes and checks each line."""
    digest = hashlib.sha256()
    blocks: list[InputBlock] = []
    first = start = offset = count = texts = 0
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            digest.update(raw)
            line = raw.removeprefix(b"\xef\xbb\xbf") if number == 1 else raw
            offset += len(raw)
            if number == 1:
                start = len(raw) - len(line)  # a byte-order mark is not part of the first line
            if not line:
                continue  # a file that holds only a byte-order mark has no lines
            try:
                text = line.decode("utf-8").rstrip("\n").rstrip("\r")
            except UnicodeDecodeError:
                raise SteerError(f"{path}: line {number} is not valid UTF-8; re-encode the file as UTF-8") from None
            if suffix == ".jsonl":
                if not text.strip():
                    continue  # not an item (`read` skips it too)
                text = _from_jsonl([text], path, selector, first_line=number)[0]
            count += 1
            texts += bool(visible(text))
            if count == size:
                blocks.append(InputBlock(first, count, start, offset))
                first, start, count = first + count, offset, 0
    if count:
        blocks.append(InputBlock(first, count, start, offset))
    return blocks, digest.hexdigest(), texts


def _scan_parquet(path: str, suffix: str, selector: str | None, size: int) -> tuple[list[InputBlock], str, int]:
    """Parquet: blocks of rows (the column checked from the schema; its values counted, one row
    group at a time)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    handle = _parquet_file(path)
    column = _parquet_column(handle.schema_arrow.names, selector, path)
    texts = 0
    for group in range(handle.num_row_groups):
        values = handle.read_row_group(group, columns=[column]).column(0).to_pylist()
        texts += sum(1 for x in values if x is not None and visible(str(x)))
    rows = handle.metadata.num_rows
    blocks = [InputBlock(a, min(size, rows - a), a, min(a + size, rows)) for a in range(0, rows, size)]
    return blocks, digest.hexdigest(), texts


def _parquet_file(path: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SteerError(f"{path}: Parquet needs pyarrow: pip install pyarrow (or 'steer[ray]')") from None
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's errors for a damaged or non-Parquet file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SteerError(f"{path} is not a readable Parquet file ({first})") from None


def _parquet_rows(path: str, selector: str | None, sha256: str, start: int, end: int) -> list[str]:
    """Rows `start` … `end − 1` of the selected column, reading only the row groups they lie in."""
    handle = _parquet_file(path)
    column = _parquet_column(handle.schema_arrow.names, selector, path)
    out: list[str] = []
    first = 0
    for group in range(handle.num_row_groups):
        n = handle.metadata.row_group(group).num_rows
        if first < end and first + n > start:
            values = _row_group(path, sha256, column, group)
            out += ["" if x is None else visible(str(x)) for x in values[max(0, start - first) : end - first]]
        first += n
    return out


@functools.lru_cache(maxsize=1)
def _row_group(path: str, sha256: str, column: str, group: int) -> tuple[Any, ...]:
    """One row group's column, kept until another is read: a row group usually holds many blocks,
    and a worker reads its blocks in order, so each group is decoded once per worker rather than
    once per block (the scan's sha256 of the file is in the key, so a rewritten file is read again)."""
    return tuple(_parquet_file(path).read_row_group(group, columns=[column]).column(0).to_pylist())
