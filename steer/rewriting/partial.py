"""Resumable output: the partial files that hold the finished rewrites of a `steer transfer -o FILE`
run (per process, or per Ray block with an index), read back by `--resume` — and of a run's label
files (`steer.lab.store.RunStore.decode`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import write_text
from steer.rewriting.records import RECORD_VERSION, TransferRecord

logger = logging.getLogger(__name__)


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte to `fd` (os.write may write fewer) and push them to disk."""
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


class PartialRecords:
    """The finished rewrites of a `steer transfer -o FILE` still running or interrupted.

    `FILE.partial` (process 0) or `FILE.partial.<rank>` (other processes) hold one JSON line per
    rewrite with its input index, appended and flushed after every batch, so a crash loses at most
    one batch. The Ray engine writes a shard per finished block instead, `FILE.partial.b<first
    index>` (`write_block`: atomic, so a block is on disk whole or not at all, and a block Ray
    retries is written once), and lists each in the index `FILE.partial.index` (one JSON line per
    shard: name, first index, count, sha256; a shard that no longer matches its line is refused).
    Every file starts with a header line that carries the run's `key` (settings, inputs, model,
    profile), so `--resume` only continues a run made the same way; every record line carries its
    input index, which restores input order whatever wrote it. The final FILE is written once every
    text is done; then the partial files are removed.
    """

    def __init__(self, output: str | Path, key: str, rank: int = 0) -> None:
        self.output, self.key, self.rank = Path(output), key, rank
        self.path = self.output.with_name(self.output.name + ".partial" + (f".{rank}" if rank else ""))
        self._lock: int | None = None  # the open, locked descriptor of `path` (`open` to `close`)
        self._created = False  # `open` wrote the header: `close` removes the file if nothing followed

    @classmethod
    def files(cls, output: str | Path) -> list[Path]:
        """Every partial file of `output` (all processes'): exactly `FILE.partial`,
        `FILE.partial.<rank>` and `FILE.partial.b<first>` that carry steer's header — never another
        file that merely starts so (`FILE.partial.bak`) or a user's own file of such a name, and no
        glob, so names with brackets or stars (`run[1].jsonl`) find their own files."""
        return [p for p in cls._named(output) if not p.name.endswith(".index") and cls._header(p) is not None]

    @classmethod
    def leftovers(cls, output: str | Path) -> list[Path]:
        """The partial files of `output` that hold at least one finished rewrite: what an
        interrupted run left to resume. A file with steer's header alone (a run that failed before
        its first batch, or one killed then) holds nothing to resume."""
        return [p for p in cls.files(output) if not cls._header_only(p)]

    @classmethod
    def remove_empty(cls, output: str | Path) -> None:
        """Delete the partial files of `output` that hold steer's header and nothing else (no
        rewrite is lost): a run that failed before its first batch must not stand in the way of
        the corrected rerun, with or without --resume."""
        for path in cls.files(output):  # regular files with steer's header only
            if cls._header_only(path):
                path.unlink()

    @classmethod
    def _header_only(cls, path: Path) -> bool:
        """`path` is a steer partial file whose only complete line is its header."""
        try:
            with path.open("rb") as fh:
                fh.readline()
                return not fh.readline().endswith(b"\n")
        except OSError:
            return False

    @classmethod
    def foreign(cls, output: str | Path, processes: int = 1, blocks: bool = False) -> list[Path]:
        """Entries named as this run's partial files would be that steer did not write: those of
        ranks below `processes` (and every block shard's name and the index under `blocks`, the Ray
        engine's), which this run would open or replace — a regular file without steer's header, a
        symbolic link (dangling or not: steer never writes through a link, nor removes a user's
        link), a FIFO, device or socket. A user's `FILE.partial.7` beside a one-process run is not
        among them: nothing touches it."""
        own = {cls(output, "", rank).path.name for rank in range(processes)}
        if blocks:
            own.add(cls.index_path(output).name)
        return [
            p
            for p in cls._named(output, regular_only=False)
            if (p.name in own or (blocks and ".partial.b" in p.name))
            and (not cls._regular(p) or cls._header(p) is None)
        ]

    @staticmethod
    def _regular(path: Path) -> bool:
        """A regular file that is not a symbolic link (what steer may write, append to or remove)."""
        return path.is_file() and not path.is_symlink()

    @classmethod
    def _named(cls, output: str | Path, regular_only: bool = True) -> list[Path]:
        import re

        output = Path(output)
        if not output.parent.is_dir():
            return []
        own = re.compile(re.escape(output.name) + r"\.partial(?:\.[1-9][0-9]*|\.b[0-9]+|\.index)?")
        return sorted(
            p for p in output.parent.iterdir() if own.fullmatch(p.name) and (cls._regular(p) or not regular_only)
        )

    @classmethod
    def check_free(cls, output: str | Path) -> None:
        """Refuse when another steer run is writing `output` now (it holds the lock on one of its
        partial files, `hold`): a second run on one -o must not remove, append to or replace
        what the first is writing. Checked before any model loads and again before the partial
        files are touched."""
        import fcntl

        for path in cls.files(output):
            with path.open("rb") as fh:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise SteerError(
                        f"{output} is being written by another steer run now (it holds {path.name}); wait for "
                        "it to finish, or pick another -o"
                    ) from None
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def index_path(output: str | Path) -> Path:
        """The Ray engine's index of finished block shards."""
        output = Path(output)
        return output.with_name(output.name + ".partial.index")

    @classmethod
    def _index(cls, output: str | Path, key: str) -> dict[str, str]:
        """Shard name → sha256 from the index (empty when there is none); a line cut by a crash is ignored."""
        path = cls.index_path(output)
        if not cls._regular(path):
            return {}
        header = cls._header(path)
        if header is None or header.get("key") != key:
            raise SteerError(
                f"{path} is not the index of this run's shards; rerun with the same options to `resume`, or add "
                "`force` (without `resume`) to start over"
            )
        return {str(item["shard"]): str(item["sha256"]) for item in cls._index_lines(output)}

    @staticmethod
    def _header(path: Path) -> dict[str, Any] | None:
        try:
            with path.open(encoding="utf-8") as fh:
                first = json.loads(fh.readline() or "null")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return first if isinstance(first, dict) and "partial_of" in first else None

    @classmethod
    def read_all(cls, output: str | Path, key: str) -> dict[int, TransferRecord]:
        """Finished rewrites by input index from every partial file of `output` made with `key`."""

        done: dict[int, TransferRecord] = {}
        listed = cls._index(output, key)
        for path in cls.files(output):
            digest = listed.get(path.name)
            if digest is not None:
                cls._check_sha256(path, digest, output)
            cls._check_key(path, key)
            with path.open(encoding="utf-8") as fh:
                fh.readline()
                for number, line in enumerate(fh, start=2):
                    try:
                        item = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a line cut by the crash: that rewrite is decoded again
                    index = item.get("index") if isinstance(item, dict) else None
                    if not isinstance(index, int) or isinstance(index, bool) or "record" not in item:
                        raise SteerError(
                            f"{path}: line {number} is not a rewrite steer wrote (no input index and record); "
                            "the file was changed — add --force (without --resume) to start over"
                        )
                    done[index] = TransferRecord.from_dict(item["record"], str(path))
        return done

    @staticmethod
    def check_indices(done: dict[int, Any], total: int, output: str | Path) -> None:
        """Refuse finished rewrites whose input index is not one of the `total` inputs (a partial
        file edited by hand: "2 of 6 done" would count rewrites of texts that do not exist)."""
        outside = sorted(i for i in done if not 0 <= i < total)
        if outside:
            raise SteerError(
                f"{output}.partial holds rewrites of input {outside[0]}, but the input has {total} texts "
                f"(0 to {total - 1}); the file was changed — add --force (without --resume) to start over"
            )

    @classmethod
    def finished_blocks(cls, output: str | Path, key: str) -> dict[int, int]:
        """First input index → count of every shard listed in the index (`write_block`) that is on
        disk as listed — without reading the records into memory (a streamed input's resume)."""

        done: dict[int, int] = {}
        listed = cls._index(output, key)
        for path in cls.files(output):
            cls._check_key(path, key)
        for line in cls._index_lines(output):
            shard = Path(output).with_name(line["shard"])
            if not shard.is_file():
                continue  # listed, then removed by hand: decoded again
            cls._check_sha256(shard, listed[line["shard"]], output)
            done[int(line["first"])] = int(line["count"])
        return done

    @classmethod
    def _check_key(cls, path: Path, key: str) -> None:
        """Refuse a partial file that steer did not write, or that another run (`key`) wrote."""
        header = cls._header(path)
        if header is None:
            raise SteerError(f"{path} is not a steer partial file; move it away or pick another -o")
        if header.get("key") != key:
            raise SteerError(
                f"{path} was made with other settings or inputs; rerun with the same options to "
                "`resume`, or add `force` (without `resume`) to start over"
            )

    @classmethod
    def _check_sha256(cls, shard: Path, expected: str, output: str | Path) -> None:
        """Refuse a shard whose bytes are no longer the ones its index line lists (read in chunks)."""
        import hashlib

        digest = hashlib.sha256()
        with shard.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != expected:
            raise SteerError(
                f"{shard} changed after it was written (its sha256 is not the one in "
                f"{cls.index_path(output).name}); remove it and run again with --resume to decode its block again"
            )

    @classmethod
    def _index_lines(cls, output: str | Path) -> list[dict[str, Any]]:
        """The shard lines of the index (a line cut by a crash is left out)."""
        path = cls.index_path(output)
        if not path.is_file():
            return []
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return lines

    @classmethod
    def block_records(cls, output: str | Path, first: int) -> Iterator[TransferRecord]:
        """The records of the shard that starts at input index `first`, in input order, read lazily."""
        path = Path(output).with_name(f"{Path(output).name}.partial.b{first}")
        with path.open(encoding="utf-8") as fh:
            fh.readline()
            items = [json.loads(line) for line in fh]
        for item in sorted(items, key=lambda x: int(x["index"])):
            yield TransferRecord.from_dict(item["record"], str(path))

    @classmethod
    def remove_all(cls, output: str | Path) -> None:
        """Delete the partial files of `output` — only files steer wrote (they carry its header)."""
        for path in [*cls.files(output), cls.index_path(output)]:
            if cls._regular(path) and cls._header(path) is not None:
                path.unlink()

    @classmethod
    def remove_unless(cls, output: str | Path, key: str) -> None:
        """Delete the partial files of `output` when any of them was made with another `key` (a run
        directory's leftovers from a recipe its config no longer asks for)."""
        if any((cls._header(path) or {}).get("key") not in (key, None) for path in cls.files(output)):
            cls.remove_all(output)

    def open(self) -> None:
        """Start (or, resuming, continue) this process's partial file and hold an exclusive lock on
        it until `close` (or the process ends), so a second run on the same -o is refused
        (`check_free`) instead of interleaving with this one. The lock is taken before the file is
        changed: a last line cut by a crash (SIGKILL, OOM, a full disk) is then dropped, so
        appended lines start on a line of their own. A file of this name that steer did not write
        is refused, never truncated."""
        import fcntl
        import os
        import stat

        try:  # never through a symbolic link (a dangling one would create its target elsewhere)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
        except OSError as exc:
            raise SteerError(
                f"{self.path} cannot be opened as steer's partial file ({exc.strerror}); move it away or pick "
                "another -o"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, device or socket of this name: never written into
            os.close(fd)
            raise SteerError(f"{self.path} is not a regular file; move it away or pick another -o")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SteerError(
                f"{self.output} is being written by another steer run now (it holds {self.path.name}); wait for "
                "it to finish, or pick another -o"
            ) from None
        self._lock = fd
        if os.fstat(fd).st_size == 0:
            header = {"partial_of": self.output.name, "key": self.key, "record_version": RECORD_VERSION}
            _write_all(fd, (json.dumps(header) + "\n").encode("utf-8"))
            self._created = True
            return
        if self._header(self.path) is None:
            self.close()
            raise SteerError(f"{self.path} is not a steer partial file; move it away or pick another -o")
        self._drop_cut_tail()

    def close(self) -> None:
        """Release the lock `open` took (the file stays until the output is written). A partial file
        removed since the last batch is put back first (`_still_here`), so a run interrupted then
        (Ctrl-C, an error) keeps every rewrite it finished, resumable; one replaced by another file
        is left as it is. A file this `open` created that still holds only its header is removed:
        a run that failed before its first batch leaves nothing that asks for --resume."""
        import os

        if self._lock is not None:
            try:
                self._still_here()  # `path` names this run's file (or raises)
                if self._created and self._header_only(self.path):
                    self.path.unlink()
            except (SteerError, OSError):
                pass  # replaced by another file: not steer's to touch; the run already stops
        fd, self._lock = self._lock, None
        if fd is not None:
            os.close(fd)

    def _drop_cut_tail(self) -> None:
        """Truncate the file after its last complete, parseable line (its rewrites are decoded again)."""
        data = self.path.read_bytes()
        keep = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                break
            keep += len(line)
        if keep < len(data):
            with self.path.open("r+b") as fh:
                fh.truncate(keep)

    def append(self, items: Sequence[tuple[int, TransferRecord]]) -> None:
        """Add finished rewrites (input index, record) and push them to disk, through the file
        `open` locked (`_still_here` first: a partial file removed mid-run is put back whole)."""
        lines = [json.dumps({"index": i, "record": r.to_dict()}, ensure_ascii=False) + "\n" for i, r in items]
        _write_all(self._still_here(), "".join(lines).encode("utf-8"))

    def _still_here(self) -> int:
        """The locked descriptor, after checking that `self.path` still names its file. Removed
        mid-run (by hand, or a cleaner), the file is created again exclusively with everything this
        run wrote so far, read back through the descriptor — so the run stays resumable and loses
        nothing. Replaced by another file, the run stops with one line and leaves that file alone."""
        import fcntl
        import os

        fd = self._lock
        if fd is None:
            raise RuntimeError("PartialRecords.open() must come before append()")
        mine = os.fstat(fd)
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        replaced = SteerError(
            f"{self.path} was replaced by another file while this run was writing it; this run stops and leaves "
            "that file as it is — find what else writes there, then run again"
        )
        if now is not None:
            raise replaced
        written = os.pread(fd, mine.st_size, 0)
        try:
            new = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            raise replaced from None
        fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _write_all(new, written)
        os.close(fd)
        self._lock = new
        logger.warning("%s was removed while this run was writing it; put back (%d bytes)", self.path, len(written))
        return new

    def write_block(self, items: Sequence[tuple[int, TransferRecord]]) -> None:
        """One finished block (input index, record) as a shard of its own, written atomically and
        then listed in the index (flushed), so an interrupted run resumes after its last listed or
        renamed shard. Shards are named by their first input index, which no other block has."""
        import hashlib
        import os

        if not items:
            return
        first = min(i for i, _ in items)
        shard = self.output.with_name(f"{self.output.name}.partial.b{first}")
        header = {"partial_of": self.output.name, "key": self.key, "record_version": RECORD_VERSION}
        lines = [json.dumps(header)] + [
            json.dumps({"index": i, "record": r.to_dict()}, ensure_ascii=False) for i, r in items
        ]
        text = "\n".join(lines) + "\n"
        write_text(shard, text)
        index = self.index_path(self.output)
        entry = {"shard": shard.name, "first": first, "count": len(items)}
        entry["sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with index.open("a", encoding="utf-8") as fh:
            if fh.tell() == 0:
                fh.write(json.dumps({**header, "index_of": "shards"}) + "\n")
            fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
