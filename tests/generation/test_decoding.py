"""Greedy decoding that drops finished rows: token for token what `generate()` decodes, on every
architecture, with rows that stop at different steps, a shared prefix cache and per-row edits; and the
batch plan's row layout against offsets computed by hand."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest
import torch
from conftest import ALL_KINDS, make_lm
from transformers import StoppingCriteria, StoppingCriteriaList

from steer.generation.decoding import BatchLayout, compact_greedy, greedy_decode
from steer.model.hooks import NeuronEdit, edit_neurons
from steer.model.padding import pad_rows
from steer.model.prefix import common_prefix_length, positions_of, prefix_cache, shared_prefix_cache

PROMPTS = [[5, 9, 13, 7, 22, 30, 4], [8, 30, 31, 12], [40, 41, 3, 3, 17, 9], [11, 12]]
EOS = 2


class StopAfter(StoppingCriteria):
    """Row r is done after `lengths[r]` new tokens (rows of one batch stop at different steps)."""

    def __init__(self, prompt_length: int, lengths: list[int]) -> None:
        self.prompt_length, self.lengths = prompt_length, torch.tensor(lengths)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), input_ids.shape[1] - self.prompt_length) >= self.lengths


def _batch(copies: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = pad_rows(PROMPTS, 0, "left")
    return ids.repeat(copies, 1), mask.repeat(copies, 1)


def _reference(
    lm: Any, ids: torch.Tensor, mask: torch.Tensor, lengths: list[int], generate: Any = None, **kwargs: Any
) -> torch.Tensor:
    """transformers' own greedy `generate()` with the same criteria (`generate`: its extra arguments)."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=7,
        do_sample=False,
        temperature=None,
        top_p=None,
        top_k=None,
        pad_token_id=0,
        eos_token_id=EOS,
        **kwargs,
    )
    stopping = StoppingCriteriaList([StopAfter(ids.shape[1], lengths)])
    return lm.model.generate(
        input_ids=ids, attention_mask=mask, generation_config=config, stopping_criteria=stopping, **(generate or {})
    )


def _decode(lm: Any, ids: torch.Tensor, mask: torch.Tensor, lengths: list[int], **kwargs: Any) -> torch.Tensor:
    """steer's loop with the same criteria as `_reference` (at most 7 new tokens, EOS = 2, pad 0)."""
    stopping = [StopAfter(ids.shape[1], lengths)]
    return greedy_decode(
        lm.model, ids, mask, max_new_tokens=7, pad_token_id=0, eos_token_id=EOS, stopping=stopping, **kwargs
    )


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_decoding_equals_generate_token_for_token(kind: str) -> None:
    lm = make_lm(kind)
    ids, mask = _batch()
    lengths = [7, 2, 5, 1]
    expected = _reference(lm, ids, mask, lengths)
    for compact in (True, False):
        assert torch.equal(_decode(lm, ids, mask, lengths, compact=compact), expected), (kind, compact)
    assert (expected[1, ids.shape[1] + 2 :] == 0).all()  # the reference pads rows that stopped


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_generate_with_custom_generate_runs_the_loop_and_equals_stock_generate(kind: str) -> None:
    """`model.generate(..., custom_generate=compact_greedy)`: transformers prepares the batch, the
    processors and criteria (min-new-tokens, EOS, the caller's), the loop drops finished rows —
    token for token what stock `generate()` decodes, rows dropped or kept."""
    lm = make_lm(kind)
    ids, mask = _batch()
    lengths = [7, 2, 5, 1]
    expected = _reference(lm, ids, mask, lengths, min_new_tokens=2)
    for compact in (True, False):
        held: list[list[int]] = []
        hooks = lambda rows, held=held: held.append(rows.tolist()) or nullcontext()  # noqa: E731
        loop = {"custom_generate": compact_greedy, "hooks": hooks, "compact": compact}
        assert torch.equal(_reference(lm, ids, mask, lengths, loop, min_new_tokens=2), expected), (kind, compact)
        # steer's loop ran (it entered the step hooks each pass), and dropped rows only when asked to
        assert held[0] == list(range(ids.shape[0])) and len(held) == max(lengths), (kind, compact)
        assert (held[-1] == [0]) == compact and sorted(held[-1]) == held[-1], (kind, compact)


@pytest.mark.parametrize("kind", ["llama", "gemma2", "gpt2"])
def test_min_new_tokens_and_no_padding_equal_generate(kind: str) -> None:
    lm = make_lm(kind)
    ids = torch.tensor([[5, 9, 13, 7], [8, 30, 31, 12]])  # no padding: generate drops the mask
    mask = torch.ones_like(ids)
    expected = _reference(lm, ids, mask, [4, 6], min_new_tokens=3)
    assert torch.equal(_decode(lm, ids, mask, [4, 6], min_new_tokens=3), expected)


# OPT runs its MLP on flattened [tokens, neurons] activations: per-row edits need [batch, seq, neurons].
@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "opt"])
def test_dropping_rows_keeps_each_rows_edit_and_the_shared_prefix(kind: str) -> None:
    """Two copies of each prompt, the second edited at generated positions; rows stop at different
    steps. Dropping finished rows (each pass's edit hooks built for the rows it holds) and a shared
    prefix cache decode exactly what the full batch decodes with each row prefilling its own prompt."""
    lm = make_lm(kind)
    ids, mask = _batch(copies=2)
    rows = torch.arange(ids.shape[0]) >= len(PROMPTS)
    chosen = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.bool)
    chosen[:, ::3] = True
    edit = NeuronEdit.empty(lm.num_layers, lm.num_neurons).with_shift(chosen, torch.full(chosen.shape, 2.0))
    lengths = [6, 1, 3, 7, 2, 7, 4, 1]

    def decode(compact: bool, shared: bool) -> torch.Tensor:
        cache = shared_prefix_cache(lm.model, *_batch(), copies=2) if shared else None
        hooks = lambda held: edit_neurons(lm.activation_sites(), edit, "generated", rows[held])  # noqa: E731
        return _decode(lm, ids, mask, lengths, cache=cache, hooks=hooks, compact=compact)

    # the reference: the edit registered once for the whole batch, which keeps every row to the end
    with edit_neurons(lm.activation_sites(), edit, "generated", rows):
        full = _decode(lm, ids, mask, lengths, compact=False)
    assert torch.equal(decode(compact=False, shared=False), full)
    with torch.inference_mode():
        unedited = greedy_decode(lm.model, *_batch(), max_new_tokens=7, pad_token_id=0, eos_token_id=EOS)
    assert not torch.equal(full[len(PROMPTS) :, :], unedited)  # the edit changes the edited copies
    assert torch.equal(decode(compact=True, shared=False), full)
    assert torch.equal(decode(compact=True, shared=True), full)


# the prompts of one direction: the same template and instruction, then each text's own tokens
SHARED = [5, 9, 13, 7, 22, 30, 4, 8, 6]
OWN = [[31, 12, 40], [41, 3], [17, 9, 11, 12, 18], [44, 45, 46, 50]]
# A split prefill is not bitwise the one-call prefill (the GEMM and attention shapes differ, and so does
# their rounding): today's own two paths (one call vs prompt-but-last then last) already differ by ~1e-6
# on these models. The shared prefix stays within the same size; greedy tokens are identical.
LOGIT_TOLERANCE = 1e-5


def _first_step_logits(lm: Any, ids: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
    from steer.model.prefix import cache_keyword

    with torch.inference_mode():
        out = lm.model(
            input_ids=ids[:, -1:],
            attention_mask=mask,
            position_ids=positions_of(mask)[:, -1:],
            **{cache_keyword(): cache},
        )
    return out.logits[:, -1]


def test_common_prefix_leaves_each_prompt_two_tokens_of_its_own() -> None:
    prompts = [SHARED + own for own in OWN]
    assert common_prefix_length(prompts) == len(SHARED)
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 4, 5]]) == 2  # the shortest keeps 2 of its own
    assert common_prefix_length([[1, 2], [1, 2]]) == 0
    assert common_prefix_length([[7, 2, 3, 4], [1, 2, 3, 4]]) == 0
    assert common_prefix_length([]) == 0


# OPT runs its MLP on flattened [tokens, neurons] activations: per-row edits need [batch, seq, neurons].
@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k != "opt"])
def test_a_prompt_prefix_shared_by_every_row_decodes_what_each_row_prefilling_its_own_decodes(kind: str) -> None:
    """The tokens every prompt starts with, prefilled once for one row and expanded to the batch
    (rows laid out as prefix, padding, own tokens), give the first step's logits of today's left-padded
    prefill within `LOGIT_TOLERANCE` and the same greedy tokens, edited copies included; the prefix
    cache is left as it was, for the next batch."""
    lm = make_lm(kind)
    prompts = [SHARED + own for own in OWN]
    left, left_mask = pad_rows(prompts, 0, "left")
    own, own_mask = pad_rows(OWN, 0, "left")
    head = torch.tensor(SHARED).expand(len(OWN), len(SHARED))
    split, split_mask = torch.cat([head, own], 1), torch.cat([torch.ones_like(head), own_mask], 1)
    with torch.inference_mode():
        prefix = prefix_cache(lm.model, SHARED)
    kept = [layer.keys.clone() for layer in prefix.layers]
    today = _first_step_logits(lm, left, left_mask, shared_prefix_cache(lm.model, left, left_mask, 1))
    with torch.inference_mode():
        cache = shared_prefix_cache(lm.model, split, split_mask, 1, prefix)
    assert cache.get_seq_length() == split.shape[1] - 1
    shared = _first_step_logits(lm, split, split_mask, cache)
    assert (shared - today).abs().max() <= LOGIT_TOLERANCE
    assert all(torch.equal(a, layer.keys) for a, layer in zip(kept, prefix.layers, strict=True))

    rows = torch.arange(2 * len(OWN)) >= len(OWN)  # the second copy of each prompt is edited
    chosen = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.bool)
    chosen[:, ::3] = True
    edit = NeuronEdit.empty(lm.num_layers, lm.num_neurons).with_shift(chosen, torch.full(chosen.shape, 2.0))
    hooks = lambda held: edit_neurons(lm.activation_sites(), edit, "generated", rows[held])  # noqa: E731
    lengths = [6, 1, 3, 7, 2, 7, 4, 1]
    with torch.inference_mode():
        before = shared_prefix_cache(lm.model, left, left_mask, 2)
        after = shared_prefix_cache(lm.model, split, split_mask, 2, prefix)
    expected = _decode(lm, left.repeat(2, 1), left_mask.repeat(2, 1), lengths, cache=before, hooks=hooks)
    got = _decode(lm, split.repeat(2, 1), split_mask.repeat(2, 1), lengths, cache=after, hooks=hooks)
    width = left.shape[1]
    assert torch.equal(got[:, width:], expected[:, width:])
    assert not torch.equal(got[len(OWN) :, width:], got[: len(OWN), width:])  # the edit changes the edited copies


def test_rows_of_guided_and_plain_candidates_follow_each_other() -> None:
    layout = BatchLayout(3, (True, False, True))  # 3 texts: guided (2 copies), plain (1), guided (2)
    assert layout.offsets == (0, 6, 9) and layout.total == 15 and layout.copies == 5
    assert [layout.edited_start(k) for k in range(3)] == [3, 6, 12]  # a guided edit hits its second copy
    assert torch.equal(layout.edit_rows(1), torch.arange(15).ge(6) & torch.arange(15).lt(9))
    assert layout.guidance_pair(2, 0.1, 1.0) == (9, 12, 3, 0.1, 1.0)
    assert layout.per_row(["a", "b", "c"]) == ["a", "b", "c"] * 5
    assert [layout.row(k, 2) for k in range(3)] == [2, 8, 11]


def test_a_batch_of_one_plain_candidate_needs_no_row_mask() -> None:
    layout = BatchLayout(4, (False,))
    assert layout.total == 4 and layout.copies == 1 and layout.edit_rows(0) is None
    guided = BatchLayout(4, (True,))
    assert guided.edit_rows(0) is not None and guided.edit_rows(0).tolist() == [False] * 4 + [True] * 4
