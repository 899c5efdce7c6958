"""Reading corpora from every supported source, and the one-line errors for bad ones."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import INFORMAL, files_in, one_line_error, refused, run, transfer_args

from steer.errors import SteerError
from steer.profiling.corpus import corpus_hash, load_corpus, load_styles, parse_style, read_texts


def test_txt_skips_blank_lines_and_strips(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_text(" one \n\n two\r\n   \nthree", encoding="utf-8")
    assert read_texts(str(p)) == ["one", "two", "three"]


def test_jsonl_csv_tsv_with_selectors(tmp_path: Path) -> None:
    j = tmp_path / "a.jsonl"
    j.write_text("\n".join(json.dumps({"text": t, "s": t.upper()}) for t in ["x", "y"]) + "\n", encoding="utf-8")
    assert read_texts(str(j)) == ["x", "y"]
    assert read_texts(f"{j}:s") == ["X", "Y"]
    c = tmp_path / "a.csv"
    c.write_text('id,text\n1,"hello, world"\n2,bye\n', encoding="utf-8")
    assert read_texts(str(c)) == ["hello, world", "bye"]
    assert read_texts(f"{c}:id") == ["1", "2"]
    t = tmp_path / "a.tsv"
    t.write_text("a\tb\nx1\ty1\nx2\ty2\n", encoding="utf-8")
    assert read_texts(f"{t}:b") == ["y1", "y2"]
    assert read_texts(f"{t}:0") == ["x1", "x2"]


def test_stdin() -> None:
    stream = io.TextIOWrapper(io.BytesIO(b"a\nb\n"), encoding="utf-8")
    assert read_texts("-", stdin=stream) == ["a", "b"]


def test_limit_dedupe_and_hash(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_text("a\nb\na\nc\n", encoding="utf-8")
    c = load_corpus("s", str(p), dedupe=True, limit=2)
    assert c.texts == ("a", "b") and c.duplicates_removed == 1
    assert c.sha256 == corpus_hash(["a", "b"])
    assert load_corpus("s", str(p)).texts == ("a", "b", "a", "c")


@pytest.mark.parametrize(
    ("content", "source_suffix", "message"),
    [
        (None, "", "does not exist"),
        (b"\n \n", "", "has no texts"),
        (b"ok\n\xff\xfe bad\n", "", "line 2 is not valid UTF-8"),
        (b'{"x": 1}\n', ".jsonl", "no field 'text'"),
        (b"{broken\n", ".jsonl", "line 1 is not valid JSON"),
        (b"a,b\n1,2\n", ".csv:c", "no column 'c'; columns: a, b"),
    ],
)
def test_bad_corpora(tmp_path: Path, content: bytes | None, source_suffix: str, message: str) -> None:
    ext = source_suffix.split(":")[0] or ".txt"
    p = tmp_path / f"c{ext}"
    if content is not None:
        p.write_bytes(content)
    source = str(p) + (source_suffix[len(ext) :] if ":" in source_suffix else "")
    with pytest.raises(SteerError, match=message):
        load_corpus("s", source)


def test_unknown_format_directory_and_hf_specs(tmp_path: Path) -> None:
    with pytest.raises(SteerError, match="unknown format .xml"):
        read_texts(str(tmp_path / "a.xml"))
    (tmp_path / "d.txt").mkdir()
    with pytest.raises(SteerError, match="is a directory"):
        read_texts(str(tmp_path / "d.txt"))
    with pytest.raises(SteerError, match="hf:NAME"):
        read_texts("hf:onlyname")


def test_hf_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'nobody/nothing' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(
        SteerError, match=r"could not load dataset 'hf:nobody/nothing:train:text'.*offline\? use a local"
    ):
        read_texts("hf:nobody/nothing:train:text")
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(SteerError, match="pip install datasets"):
        read_texts("hf:nobody/nothing:train:text")


def test_style_specs(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_text("x\n", encoding="utf-8")
    assert parse_style(f"formal={p}") == ("formal", str(p))
    with pytest.raises(SteerError, match="NAME=SOURCE"):
        parse_style("formal")
    with pytest.raises(SteerError, match="style name"):
        parse_style(f"bad name={p}")
    with pytest.raises(SteerError, match="at least two styles"):
        load_styles([f"a={p}"])
    with pytest.raises(SteerError, match="'a' is given twice"):
        load_styles([f"a={p}", f"a={p}"])
    with pytest.raises(SteerError, match="only one style"):
        load_styles(["a=-", "b=-"])


def test_parquet_columns_by_name_or_index_and_clear_errors(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["hey dude", None, " ok lol "]}), path)
    assert read_texts(str(path)) == ["hey dude", "ok lol"]
    assert read_texts(str(path), keep_empty=True) == ["hey dude", "", "ok lol"]
    assert read_texts(f"{path}:0") == ["1", "2", "3"]
    with pytest.raises(SteerError, match="no column 'body'; columns: id, text"):
        read_texts(f"{path}:body")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(SteerError, match="not a readable Parquet file"):
        read_texts(str(bad))


def test_blocked_input_reads_what_read_texts_reads(tmp_path: Path) -> None:
    """`BlockedInput` (the Ray engine's streamed read) against `read_texts(keep_empty=True)` on
    hand-made files: blank lines, whitespace, CRLF, a byte-order mark, no final newline, JSONL blank
    lines and empty fields, Parquet nulls over several row groups, at block sizes 1–5 — the same
    items in the same order, blocks numbered by line, non-blank texts counted."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from steer.profiling.corpus import BlockedInput

    rng = random.Random(0)
    words = ["a", "b  ", "", "  ", "héllo wörld", "x\r", "tab\tz"]
    for _ in range(40):
        lines = [rng.choice(words) for _ in range(rng.randint(0, 9))]
        bom = rng.choice([b"", b"\xef\xbb\xbf"])
        (tmp_path / "t.txt").write_bytes(bom + ("\n".join(lines) + rng.choice(["", "\n", "\r\n"])).encode())
        records = [json.dumps({"text": w}) if rng.random() < 0.8 else "" for w in lines]
        (tmp_path / "t.jsonl").write_bytes(bom + ("\n".join(records) + rng.choice(["", "\n"])).encode())
        column = pa.array([w if rng.random() < 0.8 else None for w in lines], pa.string())
        pq.write_table(pa.table({"text": column}), tmp_path / "t.parquet", row_group_size=rng.randint(1, 4))
        for name in ("t.txt", "t.jsonl", "t.parquet"):
            source = str(tmp_path / name)
            expected = read_texts(source, keep_empty=True)
            for size in (1, 2, 5):
                blocked = BlockedInput.scan(source, size)
                assert [t for b in blocked.blocks for t in blocked.read(b)] == expected, (name, size)
                assert [b.first for b in blocked.blocks] == list(range(0, len(expected), size))
                assert blocked.texts == sum(1 for t in expected if t) and blocked.lines == len(expected)


def test_blocked_input_refuses_bad_lines_before_any_work(tmp_path: Path) -> None:
    """The scan checks every line, so a bad one fails in one line that names it — as `read_texts` does."""
    from steer.profiling.corpus import BlockedInput

    (tmp_path / "bad.txt").write_bytes(b"ok\nfine\n\xff\xfe\n")
    with pytest.raises(SteerError, match=r"bad.txt: line 3 is not valid UTF-8"):
        BlockedInput.scan(str(tmp_path / "bad.txt"), 2)
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n\n{"text": \n', encoding="utf-8")
    with pytest.raises(SteerError, match=r"bad.jsonl: line 3 is not valid JSON"):
        BlockedInput.scan(str(tmp_path / "bad.jsonl"), 2)
    with pytest.raises(SteerError, match=r"line 1 has no field 'body'"):
        BlockedInput.scan(str(tmp_path / "bad.jsonl") + ":body", 2)
    with pytest.raises(SteerError, match="does not exist"):
        BlockedInput.scan(str(tmp_path / "none.txt"), 2)
    with pytest.raises(SteerError, match=r"only \.txt, \.jsonl, \.parquet files are read in blocks"):
        BlockedInput.scan(str(tmp_path / "x.csv"), 2)
    (tmp_path / "a.txt").write_text("a\nb\nc\n", encoding="utf-8")
    first, second = BlockedInput.scan(str(tmp_path / "a.txt"), 2), BlockedInput.scan(str(tmp_path / "a.txt"), 2)
    assert first.sha256 == second.sha256  # a resume tells the same input from another by its bytes
    (tmp_path / "a.txt").write_text("a\nb\nd\n", encoding="utf-8")
    assert BlockedInput.scan(str(tmp_path / "a.txt"), 2).sha256 != first.sha256


# 9. a byte-order mark is no text, and does not rename the first column
def test_byte_order_marks_are_dropped(tmp_path: Path) -> None:
    txt, csv = tmp_path / "a.txt", tmp_path / "a.csv"
    txt.write_bytes(b"\xef\xbb\xbfhello\nworld\n")
    csv.write_bytes(b"\xef\xbb\xbftext,id\nhello,1\n")
    assert read_texts(str(txt)) == ["hello", "world"]
    assert read_texts(str(csv)) == ["hello"]


# issue 43, case 15: a JSONL text that is null or a number is refused with its line, not rewritten as "None"
@pytest.mark.parametrize(("value", "shown"), [("null", "null"), ("5", "int"), ('["a"]', "list")])
def test_a_jsonl_text_that_is_not_a_string_is_refused(tmp_path: Path, prof: Path, value: str, shown: str) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "fine"}\n{"text": ' + value + "}\n")
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-i", str(data), "-q"]
    one_line_error(run(*args), f"line 2's field 'text' is {shown}, not a string")


# case 21: a TSV row too short to have the selected column
def test_a_table_row_without_the_column_is_refused_with_its_line(
    tmp_path: Path, prof: Path, saved_model: Path, no_model: None
) -> None:
    table = tmp_path / "in.tsv"
    table.write_text("id\ttext\n1\thello there\n\n2\n3\tgood day\n")
    before = files_in(tmp_path)
    message = f"{table}: line 4 has 1 of the header's 2 columns, so no 'text'"
    refused(run(*transfer_args(prof), "-i", str(table), "-o", str(tmp_path / "o.jsonl")), message)
    other = tmp_path / "b.txt"
    other.write_text("\n".join(INFORMAL) + "\n")
    style = ["profile", "--model", str(saved_model), "--style", f"formal={table}", "--style", f"informal={other}"]
    refused(run(*style, "-o", str(tmp_path / "p2.safetensors")), message)
    assert files_in(tmp_path) == {**before, "b.txt": other.read_bytes()}
