"""`steer.apply` on a user's own model: `generate()` under it equals `Steerer.transfer` token for
token, also batched through steer's own loop; exactly its own hooks are removed, also on an exception;
decoder-only recipes are refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import FORMAL, make_lm, toy_profile

from steer import SteerError, apply
from steer.generation.steerer import Steerer, TransferSettings
from steer.prompts import render_prompt


def _hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize(
    "recipe",
    [
        {"mode": "deactivate", "top_k": "10%"},
        {"mode": "amplify", "top_k": "10%", "amplify_factor": 3.0},
        {"mode": "shift", "top_k": "10%", "strength": 3.0, "positions": "generated"},
        {"mode": "shift", "top_k": "10%", "strength": 2.0, "positions": "all"},
    ],
)
def test_apply_then_generate_equals_steerer_transfer(lm_and_profile: tuple[Any, Any], recipe: dict[str, Any]) -> None:
    lm, profile = lm_and_profile
    tok = lm.tokenizer
    plain = dict(max_new_tokens=6, loop_guard=False, echo_guard=False, opening="", clean=False, batch_size=1)
    settings = TransferSettings.bare(**recipe, **plain)
    steerer = Steerer(lm, profile)
    expected = [r.raw_output for r in steerer.transfer(FORMAL[:3], "formal", "informal", settings)]
    template = steerer.prompts.get("formal->informal", steerer.prompts["default"])
    before = _hooks(lm.model)
    got, unedited = [], []
    with apply(lm.model, profile, "formal", "informal", **recipe) as edit:
        assert len(edit) > 0 and _hooks(lm.model) > before
        for text in FORMAL[:3]:
            ids = tok(render_prompt(tok, template, text, "formal", "informal"), return_tensors="pt")
            out = lm.model.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
            got.append(tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip())
    assert _hooks(lm.model) == before
    for text in FORMAL[:3]:
        ids = tok(render_prompt(tok, template, text, "formal", "informal"), return_tensors="pt")
        out = lm.model.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
        unedited.append(tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip())
    assert got == expected
    assert got != unedited  # the edit did something


def test_apply_removes_its_hooks_on_an_exception_and_refuses_decoder_recipes(
    lm_and_profile: tuple[Any, Any],
) -> None:
    lm, profile = lm_and_profile
    before = _hooks(lm.model)
    with pytest.raises(RuntimeError, match="inside"):
        with apply(lm.model, profile, "formal", "informal", top_k="10%"):
            raise RuntimeError("inside")
    assert _hooks(lm.model) == before
    for recipe, message in [
        ({"preset": "guided"}, "`guidance`"),
        ({"preset": "paper"}, "`contrast`"),
        ({"mode": "prompt"}, "no edit"),
        ({"mode": "deactivate", "top_k": "10%", "nope": 1}, "`nope` is not a transfer setting"),
        ({"mode": "shift", "multiplier": 2.0}, "`multiplier` is not a transfer setting; did you mean `strength`"),
    ]:
        with pytest.raises(SteerError, match=message):
            with apply(lm.model, profile, "formal", "informal", **recipe):
                pass
    with pytest.raises(SteerError, match="not in this profile"):
        with apply(lm.model, profile, "formal", "casual"):
            pass
    other = make_lm("llama", seed=1)  # another model's weights: the profile's fingerprint refuses it
    with pytest.raises(SteerError, match="fingerprint") as err:
        with apply(other.model, profile, "formal", "informal"):
            pass
    assert "but the model is your LlamaForCausalLM" in str(err.value)  # the user's model, not the profile's
    assert _hooks(lm.model) == before and _hooks(other.model) == 0


def test_apply_takes_a_loaded_model_as_it_takes_its_plain_model(lm_and_profile: tuple[Any, Any]) -> None:
    lm, profile = lm_and_profile
    ids = torch.tensor([[5, 9, 13, 7]])
    logits = []
    for given in (lm, lm.model):
        with apply(given, profile, "formal", "informal", mode="deactivate", top_k="10%") as edit, torch.no_grad():
            assert len(edit) > 0
            logits.append(lm.model(input_ids=ids).logits)
    assert torch.equal(logits[0], logits[1]) and _hooks(lm.model) == 0
    with torch.no_grad():
        assert not torch.equal(lm.model(input_ids=ids).logits, logits[0])


@pytest.mark.parametrize("positions", ["generated", "all"])
def test_apply_with_compact_greedy_equals_stock_generate_on_a_batch(
    lm_and_profile: tuple[Any, Any], positions: str
) -> None:
    """A user's own batched `generate()` under `apply`, through steer's loop (`custom_generate=
    compact_greedy`: rows that finish leave the batch) — token for token what stock `generate()` gives."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    from steer.generation.decoding import compact_greedy

    class StopAfter(StoppingCriteria):  # rows of the batch stop at different steps
        def __init__(self, start: int, lengths: list[int]) -> None:
            self.start, self.lengths = start, torch.tensor(lengths)

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), input_ids.shape[1] - self.start) >= self.lengths

    lm, profile = lm_and_profile
    tok = lm.tokenizer
    tok.padding_side = "left"
    batch = tok([f"Rewrite casually: {t}" for t in FORMAL[:3]], return_tensors="pt", padding=True)
    outs = {}
    for loop in ({}, {"custom_generate": compact_greedy}):
        stop = StoppingCriteriaList([StopAfter(batch["input_ids"].shape[1], [6, 2, 4])])
        with apply(
            lm.model, profile, "formal", "informal", mode="shift", top_k="10%", strength=3.0, positions=positions
        ):
            outs[bool(loop)] = lm.model.generate(
                **batch,
                max_new_tokens=6,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                stopping_criteria=stop,
                **loop,
            )
    assert torch.equal(outs[True], outs[False])
    assert (outs[True][1, batch["input_ids"].shape[1] + 2 :] == tok.pad_token_id).all()  # row 1 stopped early


def test_profile_of_a_held_model_equals_steer_profiles_counts(tmp_path: Any) -> None:
    """`steer.profile(model, tokenizer, texts)` counts what `profile_styles` counts on the same texts,
    calibrates, saves and loads, and is refused in one line for one style or an empty one."""
    from conftest import INFORMAL, make_tokenizer, toy_profile

    import steer

    lm = make_lm("llama")
    made = steer.profile(lm.model, make_tokenizer(), {"formal": FORMAL, "informal": INFORMAL}, progress=False)
    reference = toy_profile(lm)
    for style in ("formal", "informal"):
        assert torch.equal(made.counts[style].fired, reference.counts[style].fired)
        assert torch.equal(made.counts[style].sums, reference.counts[style].sums)
    assert set(made.calibration) == {"formal>informal", "informal>formal"}
    made.save(tmp_path / "held.safetensors")
    with apply(lm.model, tmp_path / "held.safetensors", "formal", "informal", top_k="10%") as edit:
        assert len(edit) > 0
    for texts, message in (({"formal": FORMAL}, "profile two or more"), ({"formal": FORMAL, "x": [" "]}, "no texts")):
        with pytest.raises(SteerError, match=message):
            steer.profile(lm, None, texts)


def test_held_profile_keeps_the_loaded_models_tokenizer_and_refuses_odd_style_names() -> None:
    from conftest import INFORMAL

    import steer

    lm = make_lm("llama")
    texts = {"formal": FORMAL, "informal": INFORMAL}
    other = steer.profile(lm, None, texts, activation_path="model.layers.{layer}.mlp.up_proj", calibrate=False)
    assert other.settings["activation"] == "model.layers.{layer}.mlp.up_proj"
    with pytest.raises(SteerError, match="style name 'a>b'"):
        steer.profile(lm, None, {"formal": FORMAL, "a>b": INFORMAL}, calibrate=False)


def test_apply_on_a_lightened_model_is_one_line_not_a_traceback(lm_and_profile: tuple[Any, Any]) -> None:
    import copy

    from steer.model.weights import lighten

    lm, profile = lm_and_profile
    model = copy.deepcopy(lm.model)
    lighten(model, "int8-linear")
    with pytest.raises(SteerError, match="fingerprint"):
        with apply(model, profile, "formal", "informal"):
            pass


def test_held_profile_inputs_of_the_wrong_shape_are_one_line() -> None:
    import steer

    lm = make_lm("llama")
    for texts, message in (
        ({"formal": "one string", "informal": ["x"]}, "holds a str, not a list of texts"),
        ({1: ["a"], 2: ["b"]}, "style name 1 is not a string"),
        ({"formal": ["a", 3], "informal": ["b"]}, "holds 3, which is not a text"),
        ([("formal", ["a"])], "maps each style name to a list of texts"),
    ):
        with pytest.raises(SteerError, match=message):
            steer.profile(lm, None, texts, calibrate=False)  # type: ignore[arg-type]
    with pytest.raises(SteerError, match="`tokenizer` is None"):
        steer.profile(lm.model, None, {"formal": ["a"], "informal": ["b"]}, calibrate=False)
    with pytest.raises(SteerError, match="not a model"):
        with apply("a path", toy_profile(lm), "formal", "informal"):  # type: ignore[arg-type]
            pass


def test_apply_on_a_loaded_model_uses_the_profiles_recorded_activation(tmp_path: Any) -> None:
    from conftest import INFORMAL

    import steer

    lm = make_lm("llama")
    up = "model.layers.{layer}.mlp.up_proj"
    prof = steer.profile(lm.model, lm.tokenizer, {"formal": FORMAL, "informal": INFORMAL}, activation_path=up,
                         calibrate=False)  # fmt: skip
    hooked = []
    for given in (lm, lm.model):
        with apply(given, prof, "formal", "informal", mode="deactivate", top_k="10%"):
            hooked.append(sum(len(m._forward_hooks) for m in lm.model.model.layers[0].mlp.up_proj.modules()))
    assert hooked[0] == hooked[1] >= 0 and _hooks(lm.model) == 0
    with apply(lm, prof, "formal", "informal", mode="deactivate", top_k="10%") as edit:
        on_up = [lm.model.get_submodule(up.format(layer=i))._forward_hooks for i in edit.layers]
        assert all(len(h) == 1 for h in on_up)


def test_a_profile_of_a_held_model_names_the_model_to_pass(tmp_path: Any) -> None:
    """`steer.profile` on a model not loaded from a path records its class: using the profile from
    the CLI then says to pass --model, in one line."""
    from conftest import INFORMAL

    import steer
    from steer.rewriting.opened import OpenedProfile

    lm = make_lm("llama")
    prof = steer.profile(lm.model, lm.tokenizer, {"formal": FORMAL, "informal": INFORMAL}, calibrate=False)
    assert prof.model_id == "your LlamaForCausalLM"
    prof.save(tmp_path / "held.safetensors")
    with pytest.raises(SteerError, match="pass --model"):
        OpenedProfile.open(tmp_path / "held.safetensors").load_model()
