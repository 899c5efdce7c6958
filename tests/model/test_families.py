"""Any causal LM a user brings: a tiny random model of every transformers family steer knows or finds
(the architecture table, or the model's own module tree) runs profile → the paper's recipe → guided →
`steer.apply` → export, each edit changing the activations it targets and leaving no hook behind;
mixture-of-experts families are refused in one line naming them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import FORMAL, VOCAB_SIZE, make_tokenizer, toy_profile

from steer import apply
from steer.errors import SteerError
from steer.generation.export import export_model
from steer.generation.steerer import Steerer, TransferSettings
from steer.model.hooks import edit_neurons
from steer.model.loading import wrap_model

# the table's families (fast path), then families whose pieces are found from the module tree
TABLE = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2", "phi3", "gpt2",
         "gpt_neox", "opt"]  # fmt: skip
FOUND = ["granite", "cohere", "cohere2", "stablelm", "gptj", "falcon", "bloom", "phi", "starcoder2", "gpt_bigcode",
         "codegen", "persimmon", "nemotron", "glm", "glm4", "helium", "smollm3", "olmo3", "exaone4", "arcee",
         "ministral", "seed_oss", "apertus", "ernie4_5", "hunyuan_v1_dense"]  # fmt: skip
MOE = ["mixtral", "qwen2_moe", "qwen3_moe", "granitemoe"]
NEURONS = 37  # every tiny config's odd MLP width
SIZES = dict(hidden_size=32, n_embd=32, intermediate_size=NEURONS, ffn_dim=NEURONS, n_inner=NEURONS,
             ffn_hidden_size=NEURONS, num_hidden_layers=2, n_layer=2, num_attention_heads=4, n_head=4,
             num_key_value_heads=2, head_dim=8, vocab_size=VOCAB_SIZE, max_position_embeddings=128, n_positions=128,
             num_local_experts=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=NEURONS,
             shared_expert_intermediate_size=NEURONS, rotary_dim=8, pad_token_id=0, bos_token_id=2,
             eos_token_id=3)  # fmt: skip
IDS = torch.tensor([[5, 9, 13, 7, 22, 30]])


def tiny(kind: str) -> Any:
    """A random 2-block model of `kind` from its default config with every size made tiny."""
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    config = CONFIG_MAPPING[kind]()
    for name, value in SIZES.items():
        if hasattr(config, name) or name in ("head_dim", "pad_token_id", "bos_token_id", "eos_token_id"):
            try:
                setattr(config, name, value)
            except AttributeError:  # a derived size (Falcon's head_dim is hidden_size / heads)
                pass
    if getattr(config, "layer_types", None):  # per-block attention kinds, one per block
        config.layer_types = list(config.layer_types)[: config.num_hidden_layers]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
    return model.eval()


def _hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _activations(lm: Any) -> list[torch.Tensor]:
    """Every block's MLP activation on IDS (recorded by a plain forward hook, removed after)."""
    seen: list[torch.Tensor] = []
    handles = [
        s.register_forward_hook(lambda _m, _a, out: seen.append(out.detach().clone())) for s in lm.activation_sites()
    ]
    try:
        with torch.no_grad():
            lm.model(input_ids=IDS)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("kind", TABLE + FOUND)
def test_every_family_profiles_steers_applies_and_exports(kind: str, tmp_path: Path) -> None:
    model = tiny(kind)
    lm = wrap_model(model, make_tokenizer(), f"tiny-{kind}")
    assert lm.num_layers == 2 and lm.num_neurons > 0
    prof = toy_profile(lm)
    steerer = Steerer(lm, prof)
    for preset in ("paper", "guided"):
        settings = TransferSettings.preset(preset, top_k="10%", max_new_tokens=2, batch_size=2)
        results = steerer.transfer(FORMAL[:2], "formal", "informal", settings)
        assert len(results) == 2, (kind, preset)
    before, hooks = _activations(lm), _hooks(model)
    with apply(model, prof, "formal", "informal", mode="deactivate", top_k="10%") as edit:
        assert len(edit) > 0
        edited = _activations(lm)
        with torch.no_grad():
            hooked = model(input_ids=IDS).logits
    assert _hooks(model) == hooks  # exactly its own hooks removed
    changed = [not torch.equal(a, b) for a, b in zip(before, edited, strict=True)]
    assert any(changed), kind  # no silent no-op
    for layer, (mask, act, was) in enumerate(zip(edit.mask, edited, before, strict=True)):
        assert torch.all(act[..., mask] == 0), (kind, layer)  # the deactivated neurons are zero on every token
        assert torch.equal(act[..., ~mask], was[..., ~mask]) or layer > 0  # block 0's others are untouched
    if lm.arch.down_proj is None:
        with pytest.raises(SteerError):
            export_model(lm, edit, tmp_path / "baked", description={})
        return
    import transformers
    from transformers import AutoModelForCausalLM

    if kind == "apertus" and transformers.__version__ == "5.0.0":
        pytest.skip("transformers 5.0.0 cannot load an Apertus checkpoint (its xIELU activation on the meta device)")
    out = export_model(lm, edit, tmp_path / "baked", description={"mode": "deactivate"})
    baked = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(baked(input_ids=IDS).logits, hooked, rtol=1e-4, atol=1e-4)
    with edit_neurons(lm.activation_sites(), edit), torch.no_grad():
        torch.testing.assert_close(model(input_ids=IDS).logits, hooked)


@pytest.mark.parametrize("kind", MOE)
def test_a_mixture_of_experts_model_is_refused_in_one_line_naming_it(kind: str) -> None:
    with pytest.raises(SteerError) as err:
        wrap_model(tiny(kind), make_tokenizer(), f"tiny-{kind}")
    message = str(err.value)
    assert "mixture-of-experts" in message and repr(kind) in message and "\n" not in message


def test_a_post_norm_opt_with_a_projection_before_its_head_steers_with_layer_contrast() -> None:
    """OPT-350m's shape: no final norm (post-LN blocks) and `project_out` before the LM head: the
    early exit reads the last block's output through the projection, as the model does."""
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(hidden_size=32, ffn_dim=NEURONS, num_hidden_layers=2, num_attention_heads=4,
                       word_embed_proj_dim=16, do_layer_norm_before=False, vocab_size=VOCAB_SIZE,
                       max_position_embeddings=128, pad_token_id=0, bos_token_id=2, eos_token_id=3)  # fmt: skip
    torch.manual_seed(0)
    model = OPTForCausalLM(config).eval()
    lm = wrap_model(model, make_tokenizer(), "tiny-opt-post-ln")
    assert lm.arch.final_norm is None and lm.arch.project_out == "model.decoder.project_out"
    last: list[torch.Tensor] = []
    handle = lm.blocks()[-1].register_forward_hook(
        lambda _m, _a, out: last.append(out[0] if isinstance(out, tuple) else out)
    )
    try:
        with torch.no_grad():
            logits = model(input_ids=IDS).logits
            assert torch.allclose(model.lm_head(lm.head_input(last[0])), logits, atol=1e-5)
    finally:
        handle.remove()
    prof = toy_profile(lm)
    settings = TransferSettings.preset("paper", top_k="10%", max_new_tokens=2)
    assert len(Steerer(lm, prof).transfer(FORMAL[:2], "formal", "informal", settings)) == 2


def test_another_familys_profile_is_told_apart_by_name_not_by_a_missing_module(tmp_path: Path) -> None:
    from steer.generation.attach import wrap_for_hooks

    gpt2 = wrap_model(tiny("gpt2"), make_tokenizer(), "tiny-gpt2")
    prof = toy_profile(gpt2)
    prof.save(tmp_path / "gpt2.safetensors")
    llama = tiny("llama")
    with pytest.raises(SteerError) as err:
        with apply(llama, tmp_path / "gpt2.safetensors", "formal", "informal"):
            pass
    assert "the profile was made for tiny-gpt2 (gpt2" in str(err.value) and "llama" in str(err.value)
    with pytest.raises(SteerError, match="does not exist"):  # a path the user names is still checked
        wrap_for_hooks(llama, "transformer.h.{layer}.mlp.act")
