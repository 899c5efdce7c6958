"""Hooks (`steer.model.hooks`): edits equal weight surgery, no-ops are exact, nothing is left behind."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from steer.errors import SteerError
from steer.model.hooks import NeuronEdit, capture_hidden, edit_neurons, record_activations


def _hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _logits(lm: Any) -> torch.Tensor:
    ids = torch.tensor([[5, 9, 13, 7, 22], [8, 8, 30, 31, 2]])
    with torch.no_grad():
        return lm.model(input_ids=ids).logits


def test_record_leaves_logits_and_hooks_unchanged(lm: Any) -> None:
    before, hooks = _logits(lm), _hook_count(lm.model)
    with record_activations(lm.model.base_model, lm.activation_sites()) as rec:
        inside = _logits(lm)
        assert _hook_count(lm.model) == hooks + lm.num_layers + 1
    assert torch.equal(before, inside)
    assert _hook_count(lm.model) == hooks
    assert torch.equal(before, _logits(lm))
    assert rec.num_tokens == 10


def test_hooks_removed_after_exception(lm: Any) -> None:
    hooks = _hook_count(lm.model)
    with pytest.raises(RuntimeError, match="boom"):
        with record_activations(lm.model.base_model, lm.activation_sites()):
            _logits(lm)
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        with capture_hidden(lm.blocks(), [0, 2]):
            raise RuntimeError("boom")
    assert _hook_count(lm.model) == hooks


def test_only_own_hooks_are_removed(llama_lm: Any) -> None:
    calls: list[int] = []
    site = llama_lm.activation_sites()[0]
    handle = site.register_forward_hook(lambda *a: calls.append(1))
    try:
        with record_activations(llama_lm.model.base_model, llama_lm.activation_sites()):
            pass
        _logits(llama_lm)
        assert calls == [1]
    finally:
        handle.remove()


def test_capture_hidden_equals_hidden_states(lm: Any) -> None:
    ids = torch.tensor([[5, 9, 13, 7, 22]])
    with capture_hidden(lm.blocks(), [0, 1]) as store, torch.no_grad():
        out = lm.model(input_ids=ids, output_hidden_states=True)
    # hidden_states[l + 1] is the residual after block l (the last entry is after the final norm).
    for layer in (0, 1):
        assert torch.equal(store[layer], out.hidden_states[layer + 1][:, -1, :])


IDS = torch.tensor([[5, 9, 13, 7, 22, 30], [8, 8, 30, 31, 12, 40]])


def _zero_columns(lm: Any, layer: int, neurons: list[int]) -> torch.nn.Module:
    """The reference: a copy of the model with those down-projection input columns set to 0."""
    model = copy.deepcopy(lm.model)
    proj = model.get_submodule(lm.arch.down_proj.format(layer=layer))
    with torch.no_grad():
        if lm.arch.down_proj_transposed:  # GPT-2 Conv1D: [in, out]
            proj.weight[neurons, :] = 0
        else:
            proj.weight[:, neurons] = 0
    return model


def test_zeroing_via_hook_equals_zeroed_down_proj(lm: Any) -> None:
    mask = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.bool)
    mask[1, [0, 4, 36]] = True
    edit = NeuronEdit.empty(lm.num_layers, lm.num_neurons).with_scale(mask, 0.0)
    with torch.no_grad():
        plain = lm.model(input_ids=IDS).logits
        with edit_neurons(lm.activation_sites(), edit):
            hooked = lm.model(input_ids=IDS).logits
        surgery = _zero_columns(lm, 1, [0, 4, 36])(input_ids=IDS).logits
    assert not torch.equal(plain, hooked)
    torch.testing.assert_close(hooked, surgery, rtol=1e-5, atol=1e-6)


def test_identity_edit_is_an_exact_noop(lm: Any) -> None:
    everything = torch.ones(lm.num_layers, lm.num_neurons, dtype=torch.bool)
    identity = NeuronEdit.empty(lm.num_layers, lm.num_neurons).with_scale(everything, 1.0)
    with torch.no_grad():
        plain = lm.model(input_ids=IDS).logits
        with edit_neurons(lm.activation_sites(), identity):
            assert _hook_count(lm.model) == lm.num_layers
            hooked = lm.model(input_ids=IDS).logits
    assert torch.equal(plain, hooked)
    assert _hook_count(lm.model) == 0


def test_generated_positions_leave_the_prompt_untouched(llama_lm: Any) -> None:
    lm = llama_lm
    mask = torch.ones(lm.num_layers, lm.num_neurons, dtype=torch.bool)
    edit = NeuronEdit.empty(lm.num_layers, lm.num_neurons).with_scale(mask, 0.0)
    with torch.no_grad():
        plain = lm.model(input_ids=IDS).logits
        with edit_neurons(lm.activation_sites(), edit, positions="generated"):
            gen = lm.model(input_ids=IDS).logits
        with edit_neurons(lm.activation_sites(), edit, positions="all"):
            every = lm.model(input_ids=IDS).logits
    assert torch.equal(gen[:, :-1], plain[:, :-1])
    assert not torch.equal(gen[:, -1], plain[:, -1])
    assert not torch.equal(every[:, 0], plain[:, 0])
    with pytest.raises(SteerError, match="`positions`"):
        with edit_neurons(lm.activation_sites(), edit, positions="prompt"):
            pass


def test_row_restricted_edit_touches_only_those_rows(llama_lm: Any) -> None:
    lm = llama_lm
    mask = torch.ones(lm.num_layers, lm.num_neurons, dtype=torch.bool)
    edit = NeuronEdit.empty(lm.num_layers, lm.num_neurons).with_scale(mask, 0.0)
    rows = torch.tensor([False, True])
    with torch.no_grad():
        plain = lm.model(input_ids=IDS).logits
        with edit_neurons(lm.activation_sites(), edit):
            every = lm.model(input_ids=IDS).logits
        with edit_neurons(lm.activation_sites(), edit, rows=rows):
            some = lm.model(input_ids=IDS).logits
        with edit_neurons(lm.activation_sites(), edit, rows=torch.tensor([False, False])):
            none = lm.model(input_ids=IDS).logits
    assert torch.equal(some[0], plain[0])
    assert torch.equal(some[1], every[1])
    assert not torch.equal(some[1], plain[1])
    assert torch.equal(none, plain)
    with pytest.raises(SteerError, match="batch rows"), edit_neurons(lm.activation_sites(), edit, rows=rows):
        lm.model(input_ids=IDS[:1])
    assert _hook_count(lm.model) == 0
