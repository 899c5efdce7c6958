"""Layer specs (`steer.layers`): backwards, empty or out-of-range blocks refused before the model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import files_in, refused, run, transfer_args

BLOCKS = 3  # the tiny llama's blocks (conftest.make_config)


# issue 43, case 19: a layer range that runs backwards, or last:0, names the spec and the valid forms
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("29-0", "--edit-layers '29-0' is not valid: the range '29-0' runs backwards; write it LOW-HIGH ('0-29')"),
        ("last:0", "--edit-layers 'last:0' is not valid: last:N needs N ≥ 1, got 0"),
        ("3,-1", "--edit-layers '3,-1' is not valid"),
    ],
)
def test_backwards_or_empty_layer_specs_name_the_valid_forms(
    tmp_path: Path, prof: Path, no_model: None, spec: str, message: str
) -> None:
    before = files_in(tmp_path)
    export = ["export", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(tmp_path / "exp"), "-q"]
    for args in ([*transfer_args(prof), "--mode", "deactivate", "hello"], export):
        result = run(*args, "--edit-layers", spec)
        refused(result, message)
        assert "'24,26,28', '24-28' (LOW-HIGH) or 'last:4'" in result.output and "1000000" not in result.output
    assert files_in(tmp_path) == before


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
