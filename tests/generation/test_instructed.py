"""The instruction push and the refusal projection: measured as their reference computation, a no-op
at strength 0, the push equal to its formula (gated and scheduled), the projection leaving the
activations orthogonal to the refusal direction, guidance counting the steps it weakened."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import steer.generation.decoding as decoding
from steer.errors import SteerError
from steer.generation.decoding import BatchLayout, step_edits
from steer.generation.instructed import build_push
from steer.generation.processors import GuidanceLogitsProcessor
from steer.generation.steerer import Steerer
from steer.model.hooks import NeuronEdit, NeuronPush, project_out, push_neurons
from steer.profiling.instruction import InstructionShifts, measure_refusal, measure_shift
from steer.settings import TransferSettings
from tests.conftest import FORMAL, make_lm, toy_profile

STEPS = {"loop_guard": False, "echo_guard": False, "clean": False, "max_new_tokens": 6, "min_new_tokens": 6}


def _tokens(results: list[Any]) -> list[list[int]]:
    return [r.info["token_ids"] for r in results]


def _capture(lm: Any, ids: list[int]) -> list[torch.Tensor]:
    """Every site's activations [seq, neurons] for one unpadded sequence, by hand."""
    out: list[torch.Tensor] = []
    handles = [
        s.register_forward_hook(lambda _m, _a, o: out.append(o[0].detach().float())) for s in lm.activation_sites()
    ]
    try:
        with torch.no_grad():
            lm.model(torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    return out


@pytest.fixture(scope="module")
def measured() -> tuple[Steerer, InstructionShifts]:
    lm = make_lm("llama")
    steerer = Steerer(lm, toy_profile(lm))
    settings = TransferSettings.preset("prompt", batch_size=3)
    instructed = steerer.encode_prompts(FORMAL[:5], "formal", "informal", settings)[0]
    neutral = steerer.encode_prompts(FORMAL[:5], "formal", "informal", settings, neutral="paraphrase")[0]
    replies = [lm.tokenizer(t, add_special_tokens=False)["input_ids"][:4] for t in FORMAL[:5]]
    shift, under = measure_shift(lm, instructed, neutral, replies, batch_size=3)
    refusal = measure_refusal(lm, instructed[:3], neutral[:3], batch_size=2)
    found = InstructionShifts(lm.fingerprint, None).with_shift("formal", "informal", shift, under, {})
    steerer.instructions = lambda: found.with_refusal(refusal, {})
    return steerer, found.with_refusal(refusal, {})


def test_the_shift_is_the_mean_difference_at_the_reply_positions_computed_by_hand(measured: Any) -> None:
    steerer, found = measured
    lm, settings = steerer.lm, TransferSettings.preset("prompt")
    sums = {"i": torch.zeros(lm.num_layers, lm.num_neurons), "n": torch.zeros(lm.num_layers, lm.num_neurons)}
    count = 0
    for text in FORMAL[:5]:
        reply = lm.tokenizer(text, add_special_tokens=False)["input_ids"][:4]
        for name, neutral in (("i", None), ("n", "paraphrase")):
            prompt = steerer.encode_prompts([text], "formal", "informal", settings, neutral=neutral)[0][0]
            acts = _capture(lm, prompt + reply)
            sums[name] += torch.stack([a[len(prompt) - 1 :].sum(0) for a in acts])
        count += len(reply) + 1
    shift, under = found.shift("formal", "informal")
    torch.testing.assert_close(under, sums["n"] / count, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(shift, (sums["i"] - sums["n"]) / count, rtol=1e-4, atol=1e-5)


def test_push_and_refusal_at_zero_decode_the_plain_prompt_token_for_token(measured: Any) -> None:
    steerer, _ = measured
    plain = TransferSettings.preset("prompt", **STEPS)
    off = TransferSettings.preset("prompt", push=0.0, refusal=0.0, **STEPS)
    assert _tokens(steerer.transfer(FORMAL[:4], "formal", "informal", off)) == _tokens(
        steerer.transfer(FORMAL[:4], "formal", "informal", plain)
    )


def test_a_strong_push_changes_the_reply(measured: Any) -> None:
    steerer, _ = measured
    plain = TransferSettings.preset("prompt", **STEPS)
    pushed = TransferSettings.preset("prompt", push=50.0, push_top_k="50%", push_gate=False, **STEPS)
    assert _tokens(steerer.transfer(FORMAL[:4], "formal", "informal", pushed)) != _tokens(
        steerer.transfer(FORMAL[:4], "formal", "informal", plain)
    )


def test_the_gated_push_adds_the_share_of_the_shift_the_token_lacks() -> None:
    site = torch.nn.Identity()
    shift = torch.tensor([[2.0, -1.0, 0.0, 4.0]])
    neutral = torch.zeros(1, 4)
    mask = torch.tensor([[True, True, False, True]])
    push = NeuronPush(mask, 3.0 * shift, toward=neutral + shift, span=torch.where(mask, shift, torch.ones_like(shift)))
    x = torch.tensor([[[1.0, -2.0, 5.0, 0.0], [0.5, 0.0, 1.0, 4.0]]])  # [batch 1, 2 positions, 4 neurons]
    with push_neurons([site], push):
        out = site(x)
    assert torch.equal(out[0, 0], x[0, 0])  # only the last position predicts the next token
    gate = ((neutral + shift - x[0, 1]) / torch.where(mask, shift, torch.ones_like(shift))).clamp(0, 1)
    expected = torch.where(mask[0], x[0, 1] + 3.0 * shift[0] * gate[0], x[0, 1])
    torch.testing.assert_close(out[0, 1], expected)
    assert out[0, 1, 3] == x[0, 1, 3]  # already at the instruction's value: no push
    assert torch.equal(site(x), x)  # the hook is gone


def test_the_schedule_pushes_only_the_first_tokens_and_decays(measured: Any, monkeypatch: Any) -> None:
    steerer, _ = measured
    settings = TransferSettings.preset("prompt", push=2.0, push_schedule="first:2,decay:0.5")
    push = build_push(steerer.instructions, "formal", "informal", settings)
    assert push is not None
    empty = NeuronEdit.empty(steerer.lm.num_layers, steerer.lm.num_neurons)
    plan: Any = type("Plan", (), {"candidates": [settings], "edits": [empty], "pushes": [push], "refusals": [None]})()
    factors: list[float] = []
    original = decoding.push_neurons

    def spy(sites: Any, p: Any, factor: float = 1.0, rows: Any = None) -> Any:
        factors.append(factor)
        return original(sites, p, factor, rows)

    monkeypatch.setattr(decoding, "push_neurons", spy)
    hooks = step_edits(steerer.lm.activation_sites(), plan, BatchLayout(1, (False,)))
    for _ in range(4):  # four forward passes: the push reaches the first two, the second at half strength
        with hooks(torch.arange(1)):
            pass
    assert factors == [1.0, 0.5]


def test_the_push_is_invariant_to_batch_and_padding(measured: Any) -> None:
    steerer, _ = measured
    texts = [FORMAL[0], FORMAL[3] + " " + FORMAL[4], FORMAL[2]]
    settings = TransferSettings.preset("prompt", push=8.0, push_top_k="20%", **STEPS)
    together = _tokens(steerer.transfer(texts, "formal", "informal", settings))
    alone = [_tokens(steerer.transfer([t], "formal", "informal", settings))[0] for t in texts]
    assert together == alone


def test_the_projection_leaves_activations_orthogonal_to_the_direction() -> None:
    torch.manual_seed(0)
    sites = [torch.nn.Identity(), torch.nn.Identity()]
    direction = torch.stack([torch.randn(8), torch.zeros(8)])  # layer 1 has none: untouched
    x = torch.randn(3, 5, 8)
    with project_out(sites, direction, 1.0):
        out0, out1 = sites[0](x), sites[1](x)
    unit = direction[0] / direction[0].norm()
    assert (out0 @ unit).abs().max() < 1e-5
    assert torch.equal(out1, x)
    torch.testing.assert_close(out0, x - (x @ unit)[..., None] * unit)
    with project_out(sites, direction, 0.5):
        half = sites[0](x)
    torch.testing.assert_close(half @ unit, 0.5 * (x @ unit), rtol=1e-4, atol=1e-5)


def test_the_refusal_projection_changes_the_reply(measured: Any) -> None:
    steerer, _ = measured
    plain = _tokens(steerer.transfer(FORMAL[:3], "formal", "informal", TransferSettings.preset("prompt", **STEPS)))
    removed = TransferSettings.preset("prompt", refusal=1.0, **STEPS)
    assert _tokens(steerer.transfer(FORMAL[:3], "formal", "informal", removed)) != plain


def test_a_recipe_without_measurements_names_the_command(measured: Any) -> None:
    steerer, found = measured
    bare = Steerer(steerer.lm, steerer.profile)
    with pytest.raises(SteerError, match="steer instruct"):
        bare.transfer(FORMAL[:1], "formal", "informal", TransferSettings.preset("prompt", push=1.0))
    with pytest.raises(SteerError, match="steer instruct .* --from informal --to formal"):
        found.shift("informal", "formal", path="p.safetensors")


def test_the_measurements_round_trip_through_safetensors(measured: Any, tmp_path: Any) -> None:
    _, found = measured
    path = found.save(tmp_path / "x.instruct.safetensors")
    again = InstructionShifts.load(path)
    for a, b in zip(found.shift("formal", "informal"), again.shift("formal", "informal"), strict=True):
        assert torch.equal(a, b)
    assert again.refusal is not None and found.refusal is not None and torch.equal(again.refusal, found.refusal)
    with pytest.raises(SteerError, match="do not match"):
        InstructionShifts.load(path, (1, 1))


def test_guidance_counts_the_steps_its_plausible_set_weakened_the_edit() -> None:
    base = torch.tensor([[3.0, 2.9, -9.0]])
    edited = torch.tensor([[0.0, 0.0, 9.0]])  # the edit alone prefers a token the base finds implausible
    guidance = GuidanceLogitsProcessor([(0, 1, 1, 0.5, 1.0)])
    out = guidance(torch.zeros(2, 1), torch.cat([base, edited]))
    assert guidance.filtered is not None and guidance.filtered.tolist() == [1, 0]
    assert int(out[0].argmax()) in (0, 1)


def test_the_push_is_built_from_the_measured_shift(measured: Any) -> None:
    steerer, found = measured
    shift, neutral = found.shift("formal", "informal")
    push = build_push(
        steerer.instructions, "formal", "informal", TransferSettings.preset("prompt", push=2.5, push_top_k=7)
    )
    assert push is not None and push.toward is not None and push.span is not None
    assert int(push.mask.sum()) == 7
    chosen = shift.abs().flatten().topk(7).indices
    assert set(push.mask.flatten().nonzero().flatten().tolist()) == set(chosen.tolist())
    assert torch.equal(push.push[push.mask], 2.5 * shift[push.mask])
    assert torch.equal(push.toward[push.mask], (neutral + shift)[push.mask])  # the instruction's own mean
    assert torch.equal(push.span[push.mask], shift[push.mask])
    ungated = build_push(
        steerer.instructions, "formal", "informal", TransferSettings.preset("prompt", push=1.0, push_gate=False)
    )
    assert ungated is not None and ungated.toward is None


def test_candidates_sharing_a_batch_decode_as_each_alone(measured: Any) -> None:
    """Plain, pushed, guided-pushed and refusal rows in one batch, rows finishing at their own
    lengths: each candidate's tokens equal its own decode, with or without a shared prefill."""
    steerer, _ = measured
    common = {"loop_guard": False, "echo_guard": False, "max_new_tokens": 7}
    candidates = [
        TransferSettings.preset("prompt", **common),
        TransferSettings.preset("prompt", push=6.0, push_top_k="10%", push_schedule="first:3,decay:0.7", **common),
        TransferSettings.preset("prompt", push=20.0, push_top_k="10%", guidance=1.0, **common),
        TransferSettings.preset("prompt", refusal=1.0, guidance=1.0, **common),
    ]
    texts = FORMAL[:3]
    together = steerer.transfer_candidates(texts, "formal", "informal", candidates)
    lengths = {len(r.info["token_ids"]) for results in together for r in results}
    assert len(lengths) > 1  # rows did finish at different steps
    unshared = Steerer(steerer.lm, steerer.profile, share_prefill=False, instructions=steerer.instructions)
    for k, c in enumerate(candidates):
        alone = _tokens(steerer.transfer(texts, "formal", "informal", c))
        assert _tokens(together[k]) == alone
        assert _tokens(unshared.transfer(texts, "formal", "informal", c)) == alone
    guided = together[2]
    assert all(0 <= r.info["guidance_filtered"] <= r.info["new_tokens"] for r in guided)
    assert "guidance_filtered" not in together[1][0].info


def test_combinations_that_cannot_share_rows_are_refused() -> None:
    with pytest.raises(SteerError, match="cannot be combined"):
        TransferSettings.preset("prompt", push=1.0, guidance=1.0, instruction_contrast=1.0)
    with pytest.raises(SteerError, match="temperature"):
        TransferSettings.preset("prompt", refusal=1.0, guidance=1.0, temperature=0.7)
    with pytest.raises(SteerError, match="`push_top_k` 'most' is not valid"):
        TransferSettings.preset("prompt", push=1.0, push_top_k="most")
    assert TransferSettings.preset("prompt", guidance=1.0).guides is False  # nothing to guide
    assert TransferSettings.preset("prompt", guidance=1.0, push=1.0).guides is True
