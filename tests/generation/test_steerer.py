"""Steered generation (`Steerer`): no-ops are exact, batching changes nothing, guidance equals a
two-pass reference, sampling depends on the text and seed, prefills are shared, hooks never leak,
stop-at-answer decodes less, and a primed reply starts with its opening."""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any

import pytest
import torch
from conftest import ALL_KINDS, FORMAL, INFORMAL, make_lm, toy_profile

from steer.errors import SteerError
from steer.generation.replies import answer_complete
from steer.generation.steerer import Steerer, TransferSettings, clean_output, echo_filter, finish_output, render_prompt
from steer.model.hooks import edit_neurons
from steer.profiling.corpus import Corpus
from steer.profiling.profile import profile_styles
from steer.prompts import prompt_template
from steer.scoring.faithfulness import instruction_text

transfer_module = importlib.import_module("steer.generation.steerer")
IDS = torch.tensor([[5, 9, 13, 7, 22, 30], [8, 8, 30, 31, 12, 40]])


def _profile(lm: Any) -> Any:
    return toy_profile(lm)


def _rewrites(steerer: Steerer, texts: list[str] = FORMAL, **settings: Any) -> list[str]:
    """Raw formal → informal rewrites of `texts` under `TransferSettings.bare(**settings)`."""
    return [r.raw_output for r in steerer.transfer(texts, "formal", "informal", TransferSettings.bare(**settings))]


def _hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_prompt_mode_equals_plain_generate(llama_lm: Any) -> None:
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))
    # no reply opening and no echo guard: the reference is transformers' own generate() on the prompt
    settings = TransferSettings.bare(
        mode="prompt", max_new_tokens=6, batch_size=2, loop_guard=False, echo_guard=False, opening=""
    )
    results = steerer.transfer(FORMAL[:3], "formal", "informal", settings)
    tok = lm.tokenizer
    template = steerer.prompts.get("formal->informal", steerer.prompts["default"])
    for text, result in zip(FORMAL[:3], results, strict=True):
        ids = tok(
            render_prompt(tok, template, text, "formal", "informal"), add_special_tokens=False, return_tensors="pt"
        )
        out = lm.model.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
        assert result.raw_output == tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def test_empty_selection_equals_prompt_mode(llama_lm: Any) -> None:
    """Two styles profiled on the same texts have the same top-k neurons, all shared, so the paper's
    selection is empty: no hook is added and the output is the plain prompt's."""
    lm = llama_lm
    same = [Corpus("formal", tuple(FORMAL), "f", "x"), Corpus("informal", tuple(FORMAL), "f", "x")]
    steerer = Steerer(lm, profile_styles(lm, same))
    base = steerer.transfer(FORMAL, "formal", "informal", TransferSettings.bare(mode="prompt", max_new_tokens=5))
    settings = TransferSettings.bare(mode="deactivate", top_k="10%", max_new_tokens=5)
    assert len(steerer.build_edit("formal", "informal", settings)) == 0
    steered = steerer.transfer(FORMAL, "formal", "informal", settings)
    assert [r.raw_output for r in steered] == [r.raw_output for r in base]
    assert _hook_count(lm.model) == 0


@pytest.mark.parametrize("contrast", [False, True])
def test_batching_does_not_change_outputs(llama_lm: Any, contrast: bool) -> None:
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))
    common = dict(
        mode="deactivate",
        top_k="10%",
        method="diff",
        max_new_tokens=6,
        contrast=contrast,
        contrast_layers="0-1",
        beta=0.5,
    )
    assert _rewrites(steerer, FORMAL + INFORMAL, batch_size=1, **common) == _rewrites(
        steerer, FORMAL + INFORMAL, batch_size=4, **common
    )
    assert _hook_count(lm.model) == 0


def test_contrast_with_beta_zero_and_alpha_tiny_equals_greedy(llama_lm: Any) -> None:
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))
    plain = _rewrites(steerer, mode="prompt", max_new_tokens=6)
    assert plain == _rewrites(steerer, mode="prompt", max_new_tokens=6, contrast=True, beta=0.0, alpha=1e-9)


def test_hooks_are_removed_when_generation_fails(llama_lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))

    def boom(*args: Any, **kwargs: Any) -> None:
        assert _hook_count(lm.model) > 0
        raise RuntimeError("boom")

    monkeypatch.setattr(transfer_module, "greedy_decode", boom)
    settings = TransferSettings.bare(mode="deactivate", top_k="10%", method="diff", contrast=True)
    with pytest.raises(RuntimeError, match="boom"):
        steerer.transfer(FORMAL, "formal", "informal", settings)
    assert _hook_count(lm.model) == 0


def test_bad_transfer_inputs(llama_lm: Any) -> None:
    lm = llama_lm
    prof = _profile(lm)
    steerer = Steerer(lm, prof)
    with pytest.raises(SteerError, match="its styles: formal, informal"):
        steerer.transfer(["x"], "formal", "casual")
    with pytest.raises(SteerError, match="no texts"):
        steerer.transfer([], "formal", "informal")
    with pytest.raises(SteerError, match="`top_k`"):
        too_many = str(lm.num_layers * lm.num_neurons + 1)
        steerer.transfer(["x"], "formal", "informal", TransferSettings.bare(top_k=too_many))
    with pytest.raises(SteerError, match="`top_k`"):
        steerer.transfer(["x"], "formal", "informal", TransferSettings.bare(top_k="-5"))
    with pytest.raises(SteerError, match="`contrast_layers`"):
        steerer.transfer(["x"], "formal", "informal", TransferSettings.bare(contrast=True, contrast_layers="2"))
    with pytest.raises(SteerError, match="`alpha`"):
        TransferSettings.bare(alpha=0)
    with pytest.raises(SteerError, match="`mode`"):
        TransferSettings.bare(mode="magic")
    with pytest.raises(SteerError, match="fingerprint"):
        Steerer(make_lm("llama", seed=5), prof)


def test_long_inputs_are_truncated_and_flagged(llama_lm: Any) -> None:
    steerer = Steerer(llama_lm, _profile(llama_lm))
    long = " ".join(["dude"] * 40)
    results = steerer.transfer(
        [long, "hey"], "informal", "formal", TransferSettings.bare(max_input_tokens=8, max_new_tokens=3)
    )
    assert [r.truncated for r in results] == [True, False]


def test_shift_mode_adds_the_mean_difference(llama_lm: Any) -> None:
    lm = llama_lm
    prof = _profile(lm)
    settings = TransferSettings.bare(mode="shift", top_k="3", strength=2.0)
    edit = Steerer(lm, prof).build_edit("formal", "informal", settings)
    delta = (prof.counts["informal"].mean - prof.counts["formal"].mean).float()
    assert len(edit) == 3
    assert torch.equal(edit.mask, delta.abs() >= delta.abs().flatten().sort(descending=True).values[2])
    assert torch.equal(edit.shift[edit.mask], 2.0 * delta[edit.mask])
    assert torch.equal(edit.scale, torch.ones_like(edit.scale))
    layer = edit.layers[0]
    site = lm.activation_sites()[layer]
    seen: list[torch.Tensor] = []
    with torch.no_grad():
        handle = site.register_forward_hook(lambda m, a, out: seen.append(out.detach()))
        lm.model(input_ids=IDS)
        handle.remove()
        with edit_neurons(lm.activation_sites(), edit):
            # Registered after the edit, this hook sees the edited activation.
            handle = site.register_forward_hook(lambda m, a, out: seen.append(out.detach()))
            lm.model(input_ids=IDS)
            handle.remove()
    plain, edited = seen
    expected = torch.where(edit.mask[layer], plain + edit.shift[layer], plain)
    assert torch.equal(edited, expected)


def _guided_reference(lm: Any, steerer: Steerer, text: str, settings: TransferSettings) -> str:
    """Greedy decoding by hand: one unedited and one edited forward pass per step, no cache."""
    from steer.generation.contrast import guidance_scores

    tok = lm.tokenizer
    template = steerer.prompts.get("formal->informal", steerer.prompts["default"])
    ids = tok(render_prompt(tok, template, text, "formal", "informal"), add_special_tokens=False)["input_ids"]
    edit = steerer.build_edit("formal", "informal", settings)
    new: list[int] = []
    with torch.no_grad():
        for _ in range(settings.max_new_tokens):
            batch = torch.tensor([ids + new])
            base = lm.model(input_ids=batch).logits[:, -1]
            with edit_neurons(lm.activation_sites(), edit):
                steered = lm.model(input_ids=batch).logits[:, -1]
            token = int(guidance_scores(base, steered, alpha=settings.alpha, gamma=settings.guidance).argmax(-1))
            new.append(token)
            if token == tok.eos_token_id:
                break
    return tok.decode(new, skip_special_tokens=True)


def test_guidance_equals_a_two_pass_reference_and_ignores_batching(llama_lm: Any) -> None:
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))
    common = dict(
        mode="shift", top_k="10%", strength=3.0, guidance=2.0, alpha=0.01, max_new_tokens=6, loop_guard=False,
        echo_guard=False, opening="",
    )  # fmt: skip
    one = _rewrites(steerer, batch_size=1, **common)
    assert one == _rewrites(steerer, batch_size=3, **common)
    settings = TransferSettings.bare(**common)  # type: ignore[arg-type]
    assert one == [_guided_reference(lm, steerer, t, settings) for t in FORMAL]
    plain = _rewrites(steerer, mode="prompt", max_new_tokens=6, echo_guard=False, opening="")
    assert one != plain  # the guidance did steer
    assert _hook_count(lm.model) == 0


def test_guidance_with_alpha_one_keeps_the_prompt_output(llama_lm: Any) -> None:
    """α = 1 leaves only the base model's top token plausible, so guidance cannot change it."""
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))
    guided = _rewrites(steerer, mode="shift", top_k="10%", strength=3.0, guidance=4.0, alpha=1.0, max_new_tokens=6)
    assert guided == _rewrites(steerer, mode="prompt", max_new_tokens=6)


def test_no_repeat_ngram_replies_never_repeat_a_trigram(llama_lm: Any) -> None:
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))
    common = dict(max_new_tokens=24, min_new_tokens=24, clean=False)
    plain = steerer.transfer(FORMAL + INFORMAL, "formal", "informal", TransferSettings.bare(mode="prompt", **common))
    guarded = steerer.transfer(
        FORMAL + INFORMAL,
        "formal",
        "informal",
        TransferSettings.preset("guided", top_k="10%", strength=3.0, no_repeat_ngram=3, **common),
    )

    def repeats(ids: list[int]) -> bool:
        grams = [tuple(ids[i : i + 3]) for i in range(len(ids) - 2)]
        return len(grams) != len(set(grams))

    assert any(repeats(r.info["token_ids"]) for r in plain)  # tiny random models loop
    assert all(r.info["new_tokens"] == 24 and not repeats(r.info["token_ids"]) for r in guarded)


def test_sampling_depends_on_the_text_and_seed_not_the_batch(llama_lm: Any) -> None:
    lm = llama_lm
    steerer = Steerer(lm, _profile(lm))
    common = dict(mode="prompt", max_new_tokens=6, temperature=1.5, top_p=0.95, loop_guard=False, clean=False)
    before = torch.get_rng_state()
    together = _rewrites(steerer, FORMAL[:4], batch_size=4, seed=3, **common)
    alone = [_rewrites(steerer, [t], batch_size=1, seed=3, **common)[0] for t in FORMAL[:4]]
    reversed_order = _rewrites(steerer, FORMAL[:4][::-1], batch_size=3, seed=3, **common)[::-1]
    assert together == alone == reversed_order
    assert torch.equal(torch.get_rng_state(), before)  # the caller's random state is untouched
    greedy = _rewrites(steerer, FORMAL[:4], batch_size=4, **{**common, "temperature": 0.0})
    other_seed = _rewrites(steerer, FORMAL[:4], batch_size=4, seed=4, **common)
    assert together != greedy and together != other_seed


# OPT runs its MLP on flattened [tokens, neurons] activations: it has no "generated" positions to share a prefill for.
@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "opt"])
def test_shared_prefill_equals_separate_prefills(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups sharing one unedited prefill (edits at generated positions) decode the same
    tokens as each row prefilling its own prompt; prompts of unequal length test the left padding."""
    lm = make_lm(kind)
    steerer = Steerer(lm, _profile(lm))
    guided = TransferSettings.preset("guided", top_k="10%", method="diff", max_new_tokens=6, batch_size=3)
    ladder = [TransferSettings.resolve("prompt", base=guided), guided]
    ladder.append(TransferSettings.resolve(base=guided, strength=4.0))
    texts = FORMAL + INFORMAL
    calls = []
    original = transfer_module.shared_prefix_cache
    monkeypatch.setattr(transfer_module, "shared_prefix_cache", lambda *a: calls.append(a[3]) or original(*a))
    shared = steerer.transfer_candidates(texts, "formal", "informal", ladder)
    assert calls and set(calls) == {5}  # 1 prompt row + 2 guided pairs per text
    before = len(calls)
    steerer = Steerer(steerer.lm, steerer.profile, share_prefill=False)
    separate = steerer.transfer_candidates(texts, "formal", "informal", ladder)
    assert len(calls) == before  # no shared prefix when sharing is off
    tokens = [[r.info["token_ids"] for r in rows] for rows in shared]
    assert tokens == [[r.info["token_ids"] for r in rows] for rows in separate]
    assert any(t for rows in tokens for t in rows)


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "opt"])
def test_the_prompt_prefix_every_text_shares_is_prefilled_once_per_call(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What every prompt of a call starts with (template and instruction) is prefilled once for the
    whole call, not per row or batch, and the rewrites are token-identical to each row prefilling its
    whole prompt, for a plain prompt and a guided ladder over several batches."""
    lm = make_lm(kind)
    steerer = Steerer(lm, _profile(lm))
    unshared = Steerer(lm, steerer.profile, share_prompt_prefix=False)
    guided = TransferSettings.preset("guided", top_k="10%", method="diff", max_new_tokens=6, batch_size=3)
    texts = FORMAL + INFORMAL
    calls: list[int] = []
    original = transfer_module.prefix_cache
    monkeypatch.setattr(transfer_module, "prefix_cache", lambda m, ids: calls.append(len(ids)) or original(m, ids))
    for ladder in (
        [TransferSettings.resolve("prompt", base=guided)],
        [TransferSettings.resolve("prompt", base=guided), guided],
    ):
        calls.clear()
        shared = steerer.transfer_candidates(texts, "formal", "informal", ladder)
        assert len(calls) == 1 and calls[0] > 10  # once for 4 batches; the template and instruction
        separate = unshared.transfer_candidates(texts, "formal", "informal", ladder)
        assert len(calls) == 1
        tokens = [[r.info["token_ids"] for r in rows] for rows in shared]
        assert tokens == [[r.info["token_ids"] for r in rows] for rows in separate]
        assert any(t for rows in tokens for t in rows)


def _newline_lm(seed: int = 0) -> Any:
    """The tiny llama with a newline token that it emits now and then."""
    lm = make_lm("llama", seed)
    tok = lm.tokenizer
    tok.add_tokens(["\n"])
    newline = tok.convert_tokens_to_ids("\n")
    assert newline < lm.model.config.vocab_size
    with torch.no_grad():  # make "\n" nearly as likely as the model's favourite token (id 74)
        head = lm.model.get_output_embeddings().weight
        head[newline] = head[74] * 0.97
    return lm


def test_stop_at_answer_keeps_the_cleaned_outputs_and_decodes_less() -> None:
    lm = _newline_lm()
    steerer = Steerer(lm, toy_profile(lm))
    texts = FORMAL + INFORMAL
    stops: dict[str, int] = {}
    for preset in ("prompt", "guided", "paper"):
        common: dict[str, Any] = dict(max_new_tokens=24, min_new_tokens=24, top_k="10%")  # no early EOS
        if preset == "prompt":
            common.pop("top_k")
        settings = TransferSettings.preset(preset, **common)
        stopped = steerer.transfer(texts, "formal", "informal", settings)
        full = steerer.transfer(texts, "formal", "informal", replace(settings, clean=False))
        template = prompt_template("formal", "informal", settings, steerer.prompts)
        instruction = instruction_text(template, "formal", "informal")
        assert [r.output for r in stopped] == [
            finish_output(r.raw_output, settings, echo_filter(r.text, instruction)) for r in full
        ], preset
        unguarded = replace(settings, loop_guard=False)
        assert [r.output for r in steerer.transfer(texts, "formal", "informal", unguarded)] == [
            clean_output(r.raw_output, echo_filter(r.text, instruction))
            for r in steerer.transfer(texts, "formal", "informal", replace(unguarded, clean=False))
        ], preset
        stops[preset] = sum(answer_complete(r.raw_output) for r in full)
        assert sum(r.info["new_tokens"] for r in stopped) <= sum(r.info["new_tokens"] for r in full), preset
    assert stops["prompt"] >= 3 and sum(stops.values()) > stops["prompt"], stops  # replies did have several lines
    guided = TransferSettings.preset("guided", top_k="10%", max_new_tokens=24, min_new_tokens=24)
    batched = steerer.transfer(texts, "formal", "informal", replace(guided, batch_size=3))
    single = steerer.transfer(texts, "formal", "informal", replace(guided, batch_size=1))
    assert [r.output for r in batched] == [r.output for r in single]


def test_a_primed_reply_starts_with_the_opening(llama_lm: Any) -> None:
    """The opening ends the rendered prompt; the raw reply is opening + generated text, and the
    output is that reply cleaned (the opening itself never reaches the output)."""
    from steer.generation.steerer import Steerer, TransferSettings, echo_filter, finish_output
    from steer.prompts import prompt_template, render_prompt

    tok = llama_lm.tokenizer
    steerer = Steerer(llama_lm)
    plain = TransferSettings.preset("prompt", opening="", max_new_tokens=6)
    primed = TransferSettings.preset("prompt", opening="«", max_new_tokens=6)
    texts = ["please reply soon", "thank you kindly for the help"]
    prompts, _ = steerer.encode_prompts(texts, "formal", "informal", primed)
    rendered = render_prompt(tok, "{text}", "x", "formal", "informal", "«")
    assert rendered.endswith("«")
    unprimed, _ = steerer.encode_prompts(texts, "formal", "informal", plain)
    assert all(len(p) > len(u) for p, u in zip(prompts, unprimed, strict=True))
    for result in steerer.transfer(texts, "formal", "informal", primed):
        generated = tok.decode(result.info["token_ids"], skip_special_tokens=True)
        assert result.raw_output == "«" + generated
        reject = echo_filter(
            result.text, instruction_text(prompt_template("formal", "informal", primed), "formal", "informal")
        )
        assert result.output == finish_output(result.raw_output, primed, reject)
        assert not result.output.startswith("«")
