"""The style probe (`steer.profiling.probe`): a planted neuron found, its file round-trips, bad files name the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FORMAL, INFORMAL, files_in, make_lm, refused, run, transfer_args

from steer.errors import SteerError
from steer.probe_fit import PROBE_C, PROBE_LIMIT, probe_fit
from steer.profiling.corpus import Corpus
from steer.profiling.probe import StyleProbe, build_probe, probe_path, read_features
from steer.profiling.profile import profile_styles

PLANTED_LAYER, PLANTED_NEURON = 0, 7


def _planted_lm() -> Any:
    """The tiny llama whose layer-0 neuron 7 fires hard on the token 'lol' (layer 0's attention is
    switched off, so that neuron reads each token's own embedding)."""
    lm = make_lm("llama")
    block = lm.model.model.layers[PLANTED_LAYER]
    mlp = block.mlp
    with torch.no_grad():
        block.self_attn.o_proj.weight.zero_()
    lol = lm.model.model.embed_tokens.weight[lm.tokenizer.convert_tokens_to_ids("lol")].detach()
    direction = lol / lol.norm()
    with torch.no_grad():
        mlp.gate_proj.weight[PLANTED_NEURON] = 40 * direction
        mlp.up_proj.weight[PLANTED_NEURON] = 40 * direction
    return lm


def test_probe_finds_a_planted_neuron_and_separates_the_styles() -> None:
    from steer.profiling.probe import style_neurons

    lm = _planted_lm()
    styles = {"formal": [f"{t} please" for t in FORMAL * 6], "informal": [f"{t} lol" for t in INFORMAL * 5]}
    profile = profile_styles(lm, [Corpus(s, tuple(t), s, s) for s, t in styles.items()])
    layers, neurons = style_neurons(profile, 1)
    assert (int(layers[0]), int(neurons[0])) == (PLANTED_LAYER, PLANTED_NEURON)
    probe = build_probe(lm, profile, styles, top=1, compare_judges=False)
    assert probe.heldout_accuracy == 1.0 and probe.heldout_size >= 5
    feats = read_features(lm, ["hey dude lol", "please kindly reply ."], probe.layers, probe.neurons).activations
    probs = probe.probabilities_of(feats)
    assert probs[0, probe.styles.index("informal")] > 0.5 > probs[1, probe.styles.index("informal")]
    assert torch.allclose(probs.sum(-1), torch.ones(2))


def test_read_features_ignores_padding_and_batching(llama_lm: Any) -> None:
    layers, neurons = torch.tensor([0, 1, 2]), torch.tensor([3, 7, 11])
    texts = ["hey", "i would be grateful if you could reply .", "ok lol"]
    batched = read_features(llama_lm, texts, layers, neurons, batch_size=3)
    single = read_features(llama_lm, texts, layers, neurons, batch_size=1)
    torch.testing.assert_close(batched.activations, single.activations, rtol=1e-5, atol=1e-6)
    assert [n for _, n in batched.nll] == [n for _, n in single.nll]
    for (a, _), (b, _) in zip(batched.nll, single.nll, strict=True):
        assert a == pytest.approx(b, rel=1e-5)


def test_probe_round_trip_and_corrupt_files(tmp_path: Path) -> None:
    lm = make_lm("llama")
    styles = {"formal": FORMAL * 4, "informal": INFORMAL * 4}
    profile = profile_styles(lm, [Corpus(s, tuple(t), s, s) for s, t in styles.items()])
    probe = build_probe(lm, profile, styles, top=5, compare_judges=False, profile_sha256="abc")
    path = probe.save(tmp_path / "p.probe.safetensors")
    loaded = StyleProbe.load(path)
    x = torch.randn(3, 5)
    assert torch.equal(loaded.probabilities_of(x), probe.probabilities_of(x))
    assert loaded.styles == probe.styles and loaded.profile_sha256 == "abc"
    assert loaded.fit == probe.fit == probe_fit(top=5) == {"top": 5, "limit": PROBE_LIMIT, "c": PROBE_C}
    with pytest.raises(SteerError, match="exists"):
        probe.save(path)
    (tmp_path / "bad.safetensors").write_bytes(b"nope")
    with pytest.raises(SteerError, match="not a readable"):
        StyleProbe.load(tmp_path / "bad.safetensors")
    assert probe_path("x/formality.safetensors") == Path("x/formality.probe.safetensors")


def test_a_probe_just_built_scores_with_the_bits_of_its_file(tmp_path: Path) -> None:
    """A run ranks with the probe it just built, a rerun with the one it reads back: scikit-learn's
    one-row `coef_` arrives with stride 0, and a product's rounding follows its operands' strides, so
    the probe keeps row-major copies and both score every row with the same bits."""
    from steer.model.invariant import one_thread

    lm = make_lm("llama")
    styles = {"formal": FORMAL * 4, "informal": INFORMAL * 4}
    profile = profile_styles(lm, [Corpus(s, tuple(t), s, s) for s, t in styles.items()])
    probe = build_probe(lm, profile, styles, top=64, compare_judges=False)
    k = probe.coef.shape[1]
    assert probe.coef.stride() == (k, 1)
    loaded = StyleProbe.load(probe.save(tmp_path / "p.probe.safetensors"))
    rows = torch.randn(200, k) * 3
    with one_thread():
        for row in rows:
            assert torch.equal(probe.probabilities_of(row[None]), loaded.probabilities_of(row[None]))


# case 23: a probe that is not one names the fix; a profile that is not one says only that
def test_a_bad_probe_or_profile_names_the_fix(tmp_path: Path, prof: Path) -> None:
    probe = tmp_path / "p.probe.safetensors"
    probe.write_text("junk")
    before = files_in(tmp_path)
    refused(
        run(*transfer_args(prof), "--preset", "rerank", "hey"),
        f"not a probe; rebuild it with: steer probe {prof} --force",
    )
    refused(run("push", str(prof), "me/repo"), "not a probe; rebuild it with")
    bad = tmp_path / "bad.safetensors"
    bad.write_text("not a profile")
    refused(run(*transfer_args(bad), "hey"), "not a profile; pass the file 'steer profile' wrote, or make one with it")
    refused(run("inspect", str(bad)), "not a profile; pass the file")
    assert files_in(tmp_path) == {**before, "bad.safetensors": b"not a profile"}
