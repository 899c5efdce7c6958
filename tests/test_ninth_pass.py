"""What the ninth fresh-clone hostile pass (issue 43) found — at the level a user meets it: one
line, the exit code, every file there before unchanged, and the corrected rerun not blocked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_hostile import files_in, refused
from test_hostile import no_model as no_model  # a fixture
from test_reliability import run, transfer_args

from steer.config import SteerError

BLOCKS = 3  # the tiny llama's blocks (conftest.make_config)


# D1: blocks beyond the model's are known from the profile, so they are refused before any model loads
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (str(BLOCKS), f"--edit-layers '{BLOCKS}' is out of range; layers must be in 0..{BLOCKS - 1} (the model has "
                      f"{BLOCKS} blocks)"),
        (f"0-{BLOCKS + 5}", f"layers must be in 0..{BLOCKS - 1} (the model has {BLOCKS} blocks)"),
        (f"last:{BLOCKS + 1}", f"--edit-layers 'last:{BLOCKS + 1}' is out of range; use last:N with N in 1..{BLOCKS}"),
    ],
)  # fmt: skip
def test_blocks_beyond_the_model_are_refused_from_the_profile_before_it_loads(
    tmp_path: Path, prof: Path, no_model: None, spec: str, message: str
) -> None:
    before = files_in(tmp_path)
    out = tmp_path / "o.jsonl"
    export = ["export", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(tmp_path / "exp"), "-q"]
    for args in ([*transfer_args(prof), "--mode", "deactivate", "-o", str(out), "hello"], export):
        refused(run(*args, "--edit-layers", spec), message)
    assert files_in(tmp_path) == before  # no output, no partial file, no export folder


def test_the_last_block_is_still_accepted(tmp_path: Path, prof: Path) -> None:
    out = tmp_path / "o.jsonl"
    result = run(*transfer_args(prof), "--mode", "deactivate", "--edit-layers", f"last:{BLOCKS}", "-o", str(out), "hi")
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text().splitlines()[0])["settings"]["edit_layers"] == f"last:{BLOCKS}"


# D1: a run that fails after -o FILE.partial is opened but before its first batch leaves no partial
# file behind, so the corrected rerun is not told to --resume an interrupted run that holds nothing
def test_a_run_failing_before_its_first_batch_leaves_nothing_to_resume(
    tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steer.generation.steerer

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise SteerError("the edit cannot be built (a stand-in for any failure before the first batch)")

    out = tmp_path / "o.jsonl"
    args = [*transfer_args(prof), "--mode", "deactivate", "-o", str(out), "hello", "good day"]
    before = files_in(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(steer.generation.steerer.Steerer, "build_edit", fails)
        refused(run(*args), "the edit cannot be built")
    assert files_in(tmp_path) == before  # no header-only o.jsonl.partial
    rerun = run(*args)
    assert rerun.exit_code == 0, rerun.output
    assert len(out.read_text().splitlines()) == 2 and not list(tmp_path.glob("o.jsonl.partial*"))


@pytest.mark.parametrize("resume", [False, True])
def test_a_partial_file_holding_only_its_header_does_not_block_the_run(
    tmp_path: Path, prof: Path, resume: bool
) -> None:
    """What a run killed before its first batch (or by an older steer) leaves: steer's header, no
    rewrite. Without --resume it is not 'rewrites of an interrupted run'; with --resume it is
    nothing to continue, whatever key it carries; either way the run writes its output."""
    out = tmp_path / "o.jsonl"
    partial = tmp_path / "o.jsonl.partial"
    partial.write_text(json.dumps({"partial_of": "o.jsonl", "key": "another run", "record_version": 1}) + "\n")
    result = run(*transfer_args(prof), "--mode", "deactivate", "-o", str(out), *(["--resume"] * resume), "hello")
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 1 and not partial.exists()


def test_a_partial_file_with_a_rewrite_still_asks_for_resume(tmp_path: Path, prof: Path) -> None:
    out = tmp_path / "o.jsonl"
    partial = tmp_path / "o.jsonl.partial"
    header = json.dumps({"partial_of": "o.jsonl", "key": "k", "record_version": 1})
    partial.write_text(header + "\n" + json.dumps({"index": 0, "record": {}}) + "\n")
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "--mode", "deactivate", "-o", str(out), "hello"),
        f"{partial} holds rewrites of an interrupted run; add --resume to continue it or --force to start over",
    )
    assert files_in(tmp_path) == before


def test_close_removes_only_a_header_only_file_it_created(tmp_path: Path) -> None:
    from steer.runs.partial import PartialRecords
    from steer.runs.records import TransferRecord

    out = tmp_path / "o.jsonl"
    empty = PartialRecords(out, "k")
    empty.open()
    assert empty.path.exists()
    empty.close()
    assert not empty.path.exists()  # nothing was finished: nothing to resume

    written = PartialRecords(out, "k")
    written.open()
    fields = ("source_text", "output", "source_style", "target_style", "mode", "model_id", "fingerprint")
    record = TransferRecord.from_dict({name: "x" for name in fields}, "test")
    written.append([(0, record)])
    written.close()
    assert PartialRecords.leftovers(out) == [written.path]  # a finished rewrite stays, resumable
    assert list(PartialRecords.read_all(out, "k")) == [0]
