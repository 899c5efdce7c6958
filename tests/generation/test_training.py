"""Training a neuron edit: the loss from the cached lower blocks equals a full pass and a reference
computation, only the chosen neurons' values move, the untrained edit is the plain prompt token for
token, the file round-trips bit for bit, a learned scale bakes into weights with the hooked logits."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from steer.generation.export import apply_edit_to_weights
from steer.generation.steerer import Steerer
from steer.generation.training import Batch, EditParameters, Example, batch_loss, train_edit
from steer.labels import describe
from steer.model.hooks import edit_neurons
from steer.profiling.trained import TrainedEdits
from steer.settings import TransferSettings
from tests.conftest import FORMAL, INFORMAL, make_lm, toy_profile

STEPS = {"loop_guard": False, "echo_guard": False, "clean": False, "max_new_tokens": 6, "min_new_tokens": 6}


def _examples(lm: Any) -> list[Example]:
    tok = lm.tokenizer
    encode = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    return [Example(encode(f), encode(i) + [tok.eos_token_id]) for f, i in zip(FORMAL, INFORMAL, strict=False)]


def _upper_mask(lm: Any, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(lm.num_layers, lm.num_neurons, generator=g) < 0.3
    mask[0] = False  # the lowest block carries no edit: its output is what the cache keeps
    return mask


def _random_values(params: EditParameters, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    params.a.data.copy_(torch.randn(params.a.shape, generator=g) * 0.5)
    params.b.data.copy_(torch.randn(params.b.shape, generator=g) * 0.5)


def _reference_loss(lm: Any, examples: list[Example], edit: Any) -> torch.Tensor:
    """The same loss, one unpadded example at a time through the whole model."""
    losses = []
    with torch.no_grad(), edit_neurons(lm.activation_sites(), edit, "all"):
        for e in examples:
            logits = lm.model(torch.tensor([e.prompt + e.reply])).logits[0]
            at = torch.arange(len(e.prompt) - 1, len(e.prompt) - 1 + len(e.reply))
            losses.append(torch.nn.functional.cross_entropy(logits[at], torch.tensor(e.reply), reduction="none"))
    return torch.cat(losses).mean()


@pytest.mark.parametrize("kind", ["llama", "phi3", "gpt2", "qwen2", "gemma2", "gpt_neox", "opt"])
def test_the_loss_from_cached_lower_blocks_equals_a_full_pass_and_the_reference(kind: str) -> None:
    lm = make_lm(kind)
    examples = _examples(lm)
    params = EditParameters(_upper_mask(lm))
    _random_values(params)
    edit = params.detached()
    with torch.no_grad():
        batch = Batch.of(examples, lm.tokenizer.pad_token_id)
        full = batch_loss(lm, batch, edit, 1, cache=False)
        first = batch_loss(lm, batch, edit, 1)  # a full pass that keeps block 1's inputs
        assert batch.cached is not None
        cached = batch_loss(lm, batch, edit, 1)  # blocks 1.. only
        again = batch_loss(lm, batch, edit, 1)  # the kept inputs are not changed by a pass
    reference = _reference_loss(lm, examples, edit)
    assert torch.allclose(full, reference, atol=1e-5)
    assert torch.allclose(first, full, atol=1e-6)
    assert torch.allclose(cached, full, atol=1e-5) and torch.equal(again, cached)
    hidden, store = batch.cached
    assert hidden.shape[:2] == batch.ids.shape  # the hidden state entering block 1 is kept, and no other
    kept = [t for args, kwargs in store[1:] for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    assert not any(t.shape == hidden.shape for t in kept)


def test_an_edit_below_the_cached_block_is_refused() -> None:
    lm = make_lm("llama")
    mask = torch.ones(lm.num_layers, lm.num_neurons, dtype=torch.bool)
    with pytest.raises(Exception, match="below the cached block"):
        batch_loss(lm, Batch.of(_examples(lm), 0), EditParameters(mask).detached(), 1)


@pytest.mark.parametrize("params", ["scale+shift", "scale", "shift"])
def test_training_moves_only_the_chosen_neurons_and_lowers_the_loss(params: str) -> None:
    lm = make_lm("llama")
    examples = _examples(lm)
    mask = _upper_mask(lm)
    before = [p.detach().clone() for p in lm.model.parameters()]
    state = train_edit(lm, mask, examples * 4, examples, params=params, epochs=3, lr=0.05, batch_size=4)
    loss, epoch, edit = state.best
    assert epoch > 0 and loss < state.curve["held"][0]
    assert torch.equal(edit.scale[~mask], torch.ones_like(edit.scale[~mask]))
    assert torch.equal(edit.shift[~mask], torch.zeros_like(edit.shift[~mask]))
    assert bool((edit.scale[mask] != 1).any()) == ("scale" in params)
    assert bool((edit.shift[mask] != 0).any()) == ("shift" in params)
    assert all(torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True))  # the model is frozen
    assert all(p.requires_grad for p in lm.model.parameters())  # and its flags are restored


def test_the_untrained_edit_decodes_token_identically_to_the_plain_prompt() -> None:
    lm = make_lm("llama")
    prof = toy_profile(lm)
    untrained = EditParameters(_upper_mask(lm)).detached()
    trained = TrainedEdits(lm.fingerprint, None).with_edit("formal", "informal", untrained, {})
    steerer = Steerer(lm, prof, trained=trained)
    plain = steerer.transfer(FORMAL[:4], "formal", "informal", TransferSettings.preset("prompt", **STEPS))
    edited = steerer.transfer(FORMAL[:4], "formal", "informal", TransferSettings.preset("trained", **STEPS))
    assert [r.info["token_ids"] for r in plain] == [r.info["token_ids"] for r in edited]
    assert describe(TransferSettings.preset("trained")) == "trained edit"  # not the selection fields it ignores


def test_a_trained_file_round_trips_bit_for_bit_and_applies_as_saved(tmp_path: Any) -> None:
    lm = make_lm("llama")
    params = EditParameters(_upper_mask(lm))
    _random_values(params)
    saved = TrainedEdits(lm.fingerprint, "abc").with_edit("formal", "informal", params.detached(), {"seed": 3})
    path = saved.save(tmp_path / "x.trained.safetensors")
    loaded = TrainedEdits.load(path, (lm.num_layers, lm.num_neurons))
    a, b = saved.edit("formal", "informal"), loaded.edit("formal", "informal")
    assert torch.equal(a.mask, b.mask) and torch.equal(a.scale, b.scale) and torch.equal(a.shift, b.shift)
    assert loaded.info("formal", "informal") == {"seed": 3} and loaded.profile_sha256 == "abc"
    with pytest.raises(Exception, match="steer train"):
        loaded.edit("informal", "formal")
    ids = torch.tensor([_examples(lm)[0].prompt])
    with torch.no_grad():
        with edit_neurons(lm.activation_sites(), a, "all"):
            first = lm.model(ids).logits
        with edit_neurons(lm.activation_sites(), b, "all"):
            second = lm.model(ids).logits
    assert torch.equal(first, second)


def test_a_learned_scale_baked_into_weights_gives_the_hooked_logits() -> None:
    lm = make_lm("llama")
    state = train_edit(lm, _upper_mask(lm), _examples(lm), _examples(lm)[:2], params="scale", epochs=2, lr=0.05)
    edit = state.best[2]
    assert state.best[1] > 0
    baked = apply_edit_to_weights(lm, edit)
    ids = torch.tensor([_examples(lm)[1].prompt])
    with torch.no_grad():
        with edit_neurons(lm.activation_sites(), edit, "all"):
            hooked = lm.model(ids).logits
        assert torch.allclose(baked(ids).logits, hooked, atol=1e-5)


def test_the_preference_term_equals_simpo_computed_by_hand() -> None:
    from steer.generation.training import PREFERENCE_BETA, PREFERENCE_MARGIN

    lm = make_lm("llama")
    plain = _examples(lm)
    examples = [Example(e.prompt, e.reply, e.prompt[:3] + [lm.tokenizer.eos_token_id]) for e in plain]
    params = EditParameters(_upper_mask(lm))
    _random_values(params)
    edit = params.detached()
    with torch.no_grad():
        batch = Batch.of(examples, lm.tokenizer.pad_token_id)
        got = batch_loss(lm, batch, edit, 1, preference=True)
        likelihood = batch_loss(lm, Batch.of(plain, lm.tokenizer.pad_token_id), edit, 1)

        def mean_logp(prompt: list[int], reply: list[int]) -> torch.Tensor:
            with edit_neurons(lm.activation_sites(), edit, "all"):
                logits = lm.model(torch.tensor([prompt + reply])).logits[0]
            at = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(reply))
            return logits[at].log_softmax(-1).gather(1, torch.tensor(reply)[:, None]).mean()

        gaps = torch.stack([mean_logp(e.prompt, e.reply) - mean_logp(e.prompt, e.rejected) for e in examples])
    want = likelihood - torch.nn.functional.logsigmoid(PREFERENCE_BETA * gaps - PREFERENCE_MARGIN).mean()
    assert torch.allclose(got, want, atol=1e-5)
    with pytest.raises(Exception, match="rejected reply"):
        batch_loss(lm, Batch.of(plain, 0), edit, 1, preference=True)


def test_a_file_that_is_not_a_trained_edit_is_refused_in_one_line(tmp_path: Any) -> None:
    from safetensors.torch import save_file

    from steer.errors import SteerError

    path = tmp_path / "x.trained.safetensors"
    save_file({"mask:a->b": torch.ones(2, 3, dtype=torch.bool)}, str(path), metadata={"steer": '{"format": "other"}'})
    with pytest.raises(SteerError, match="is not a steer trained-edit file this version reads"):
        TrainedEdits.load(path)
    path.write_bytes(b"not safetensors")
    with pytest.raises(SteerError, match="not a readable .safetensors file"):
        TrainedEdits.load(path)
