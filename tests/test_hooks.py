"""Hooks are exact no-ops when they should be and leave nothing behind, even after exceptions."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from steer.model.hooks import capture_hidden, record_activations


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
