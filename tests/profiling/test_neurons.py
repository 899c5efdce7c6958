"""Selection on hand-made counts; profile save/load round trip and validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from steer.errors import SteerError
from steer.profiling.neurons import lape_scores, parse_top_k, select_neurons
from steer.profiling.profile import FORMAT_VERSION, ActivationCounts, StyleProfile


def counts(style: str, fired: list[list[int]], tokens: int) -> ActivationCounts:
    f = torch.tensor(fired, dtype=torch.int64)
    return ActivationCounts(style, f, f.double() * 0.5, tokens, 3)


def make_profile() -> StyleProfile:
    # 2 layers × 4 neurons. Formal saw 100 tokens, informal 10: raw counts would mislead.
    formal = counts("formal", [[90, 80, 10, 0], [50, 5, 60, 1]], 100)
    informal = counts("informal", [[1, 8, 9, 10], [5, 0, 6, 0]], 10)
    return StyleProfile("m", "llama", "abc", 2, 4, {"formal": formal, "informal": informal}, settings={"k": 1})


def test_rates_not_raw_counts() -> None:
    prof = make_profile()
    assert prof.counts["informal"].rate[0].tolist() == [0.1, 0.8, 0.9, 1.0]
    # Top-2 by rate difference for informal: neurons (0,3) 1.0-0.0 and (0,2) 0.9-0.1.
    sel = prof.neurons("formal", "informal", top_k=2, method="diff")
    assert sel.target.mask.nonzero().tolist() == [[0, 2], [0, 3]]
    # formal − informal: (0,0) 0.8, (0,1) 0.0, (1,0) 0.0, (1,1) 0.05, (1,2) 0.0, (1,3) 0.01.
    assert sel.source.mask.nonzero().tolist() == [[0, 0], [1, 1]]
    assert len(sel.shared) == 0


def test_paper_method_removes_overlap() -> None:
    prof = make_profile()
    # Formal rates: .9 .8 .1 0 / .5 .05 .6 .01 → top-3: (0,0) (0,1) (1,2)
    # Informal rates: .1 .8 .9 1 / .5 0 .6 0 → top-3: (0,3) (0,2) (0,1)/(1,2) tie at .8/.6 → (0,1)
    sel = prof.neurons("formal", "informal", top_k=3, method="paper")
    assert sel.shared.mask.nonzero().tolist() == [[0, 1]]
    assert sel.source.mask.nonzero().tolist() == [[0, 0], [1, 2]]
    assert sel.target.mask.nonzero().tolist() == [[0, 2], [0, 3]]
    assert not (sel.source.mask & sel.target.mask).any()


def test_lape_entropy_and_assignment() -> None:
    rates = torch.tensor([[[0.5, 0.5, 0.9, 0.0]], [[0.5, 0.0, 0.1, 0.0]]], dtype=torch.float64)
    h = lape_scores(rates)[0]
    assert h[0].item() == pytest.approx(torch.log(torch.tensor(2.0)).item())
    assert h[1].item() == 0.0 and h[3].item() == 0.0
    sel = select_neurons({"a": rates[0], "b": rates[1]}, "a", "b", 1, "lape", lape_filter=0.5)
    # Neuron 1 is the lowest-entropy neuron above the rate bar, and only style a fires it.
    assert sel.source.mask.nonzero().tolist() == [[0, 1]] and len(sel.target) == 0


@pytest.mark.parametrize(("value", "expected"), [("5", 5), (5, 5), ("1%", 1), ("50%", 4), ("0.25", 2), ("87%", 7)])
def test_parse_top_k(value: str, expected: int) -> None:
    assert parse_top_k(value, 8) == expected


@pytest.mark.parametrize("value", ["0", "-3", "9", "8", "99%", "0.99", "0%", "100%", "150%", "abc", "1.0", "1.5", ""])
def test_parse_top_k_rejects(value: str) -> None:
    with pytest.raises(SteerError, match="`top_k`"):
        parse_top_k(value, 8)


def test_unknown_style_and_method_list_choices() -> None:
    prof = make_profile()
    with pytest.raises(SteerError, match="its styles: formal, informal"):
        prof.neurons("formal", "casual")
    with pytest.raises(SteerError, match="paper, diff, lape"):
        prof.neurons("formal", "informal", method="magic")
    with pytest.raises(SteerError, match="both"):
        prof.neurons("formal", "formal")


def test_save_load_round_trip(tmp_path: Path) -> None:
    prof = make_profile()
    path = prof.save(tmp_path / "p.safetensors")
    loaded = StyleProfile.load(path)
    assert loaded.metadata() == prof.metadata()
    for style in prof.styles:
        assert torch.equal(loaded.counts[style].fired, prof.counts[style].fired)
        assert torch.equal(loaded.counts[style].sums, prof.counts[style].sums)
    assert not list(tmp_path.glob(".*tmp"))  # no temp file left behind


def test_save_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "p.safetensors"
    path.write_bytes(b"keep me")
    with pytest.raises(SteerError, match="`force`"):
        make_profile().save(path)
    assert path.read_bytes() == b"keep me"
    make_profile().save(path, force=True)
    assert StyleProfile.load(path).styles == ["formal", "informal"]


def test_load_rejects_corrupt_foreign_and_newer(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00\x01not a safetensors file")
    with pytest.raises(SteerError, match="not a readable"):
        StyleProfile.load(corrupt)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, str(foreign))
    with pytest.raises(SteerError, match="not a steer profile"):
        StyleProfile.load(foreign)
    prof = make_profile()
    newer = tmp_path / "newer.safetensors"
    meta = prof.metadata() | {"format_version": FORMAT_VERSION + 1}
    save_file({"w": torch.zeros(2)}, str(newer), metadata={"steer": json.dumps(meta)})
    with pytest.raises(SteerError, match="upgrade steer"):
        StyleProfile.load(newer)
    wrong_shape = tmp_path / "shape.safetensors"
    tensors = {f"fired.{s}": torch.zeros(3, 3, dtype=torch.int64) for s in prof.styles}
    tensors |= {f"sums.{s}": torch.zeros(3, 3, dtype=torch.float64) for s in prof.styles}
    save_file(tensors, str(wrong_shape), metadata={"steer": json.dumps(prof.metadata())})
    with pytest.raises(SteerError, match="not 2×4"):
        StyleProfile.load(wrong_shape)
    with pytest.raises(SteerError, match="does not exist"):
        StyleProfile.load(tmp_path / "missing.safetensors")


def test_check_model_names_both() -> None:
    with pytest.raises(SteerError, match=r"made for m \(llama 2×4.*but the model is other \(qwen2 24×9"):
        make_profile().check_model("qwen2", 24, 9, "zzz", "other")
    make_profile().check_model("llama", 2, 4, "abc", "m")
