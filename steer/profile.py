"""Phase 1: run style corpora through the model and count neuron activations.

Texts are tokenised once, sorted by length and batched so padding stays small; padding is
masked out of every count, and position ids follow the mask so left and right padding give
the same counts. Only the base model runs (the LM head is not needed to read MLP activations).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from steer.config import ProfileSettings, SteerError
from steer.corpus import Corpus
from steer.distributed import distributed_state, shard_indices
from steer.hooks import record_activations
from steer.models import LoadedModel
from steer.neurons import ActivationCounts, StyleProfile
from steer.padding import pad_rows

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batch:
    """One padded batch: token ids, attention mask and matching position ids."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor


def tokenize(tokenizer: object, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], int]:
    """Token ids per text, cut to `max_length`; also how many texts were cut."""
    encoded = tokenizer(list(texts), add_special_tokens=True)["input_ids"]  # type: ignore[operator]
    truncated = sum(len(ids) > max_length for ids in encoded)
    return [ids[:max_length] for ids in encoded], truncated


def make_batches(
    sequences: Sequence[Sequence[int]], batch_size: int, pad_id: int, padding_side: str = "right"
) -> list[Batch]:
    """Length-sorted (longest first) padded batches; empty sequences are dropped."""
    order = sorted((i for i, s in enumerate(sequences) if len(s) > 0), key=lambda i: -len(sequences[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        ids, mask = pad_rows([sequences[i] for i in order[start : start + batch_size]], pad_id, padding_side)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        batches.append(Batch(ids, mask, positions))
    return batches


def count_activations(
    lm: LoadedModel,
    style: str,
    texts: Sequence[str],
    settings: ProfileSettings = ProfileSettings(),
    *,
    progress: bool = False,
) -> tuple[ActivationCounts, int]:
    """Count firing neurons of one style's texts; returns the counts and how many texts were cut."""
    from tqdm.auto import tqdm

    sequences, truncated = tokenize(lm.tokenizer, texts, settings.max_length)
    batches = make_batches(sequences, settings.batch_size, lm.tokenizer.pad_token_id, settings.padding_side)
    total = sum(len(s) for s in sequences)
    if total == 0 and texts:
        raise SteerError(f"style {style!r} has zero tokens after tokenisation; check the corpus")
    root = lm.model.base_model
    device = lm.device
    bar = tqdm(
        total=total, unit="tok", unit_scale=True, desc=f"profiling {style}", disable=not progress, file=sys.stderr
    )
    with record_activations(root, lm.activation_sites()) as recorder, torch.inference_mode(), bar:
        for batch in batches:
            root(
                input_ids=batch.input_ids.to(device),
                attention_mask=batch.attention_mask.to(device),
                position_ids=batch.position_ids.to(device),
                use_cache=False,
            )
            bar.update(int(batch.attention_mask.sum()))
    if batches:
        fired, sums = recorder.result()
    else:  # an empty shard of a multi-process run contributes nothing
        fired = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.int64)
        sums = torch.zeros(lm.num_layers, lm.num_neurons, dtype=torch.float64)
    return ActivationCounts(style, fired, sums, recorder.num_tokens, len(texts)), truncated


def shard(texts: Sequence[str], index: int, count: int) -> list[str]:
    """This process's share of the texts: every `count`-th text of the length-sorted corpus.

    Interleaving after sorting gives every process the same mix of long and short texts.
    """
    return [texts[i] for i in shard_indices([len(t) for t in texts], index, count)]


def _sum_across_processes(counts: ActivationCounts, truncated: int, state: Any) -> tuple[ActivationCounts, int]:
    """Sum shard counts with accelerate's collective ops; every process gets the totals."""
    from accelerate.utils import reduce

    device = state.device
    scalars = torch.tensor([counts.num_tokens, counts.num_texts, truncated], dtype=torch.int64, device=device)
    fired = reduce(counts.fired.to(device), reduction="sum").cpu()
    sums = reduce(counts.sums.to(device), reduction="sum").cpu()
    tokens, texts, cut = reduce(scalars, reduction="sum").tolist()
    return ActivationCounts(counts.style, fired, sums, int(tokens), int(texts)), int(cut)


def profile_styles(
    lm: LoadedModel,
    corpora: Sequence[Corpus],
    settings: ProfileSettings = ProfileSettings(),
    *,
    progress: bool = False,
) -> StyleProfile:
    """Profile every style corpus on one model into a `StyleProfile`.

    Under `accelerate launch` with several processes each process counts its shard of every
    corpus and the counts are summed, so the profile equals a single-process run's.
    """
    state = distributed_state()
    counts: dict[str, ActivationCounts] = {}
    corpora_meta = {}
    for corpus in corpora:
        texts = corpus.texts if state is None else shard(corpus.texts, state.process_index, state.num_processes)
        show = progress and (state is None or state.is_main_process)
        counts[corpus.name], truncated = count_activations(lm, corpus.name, texts, settings, progress=show)
        if state is not None:
            counts[corpus.name], truncated = _sum_across_processes(counts[corpus.name], truncated, state)
        if truncated and (state is None or state.is_main_process):  # a warning, shown also without progress bars
            logger.warning(
                "%d of %d %s texts were longer than %d tokens and were truncated (max_length)",
                truncated,
                len(corpus.texts),
                corpus.name,
                settings.max_length,
            )
        corpora_meta[corpus.name] = {
            "source": corpus.source,
            "sha256": corpus.sha256,
            "texts": len(corpus.texts),
            "truncated": truncated,
            "duplicates_removed": corpus.duplicates_removed,
        }
    return StyleProfile(
        model_id=lm.model_id,
        model_type=lm.model_type,
        fingerprint=lm.fingerprint,
        num_layers=lm.num_layers,
        num_neurons=lm.num_neurons,
        counts=counts,
        corpora=corpora_meta,
        settings={**settings.to_dict(), "activation": lm.arch.activation},
    )
