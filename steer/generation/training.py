"""Training a neuron edit: a scale and a shift per chosen neuron, learned with the model frozen by
the likelihood of each pair's rewrite under its prompt plus the edit.

The edit is `x → x · (1 + a) + b` on the chosen neurons' gated activations, at every position,
with a = b = 0 at the start — so the untrained edit is the plain prompt, and only a and b of the
chosen neurons ever receive a gradient. The blocks below the lowest edited one carry no edit and
never change, so the hidden state entering it is kept from each batch's first pass, with every
edited block's other inputs (masks, rotary angles); later passes run only the edited blocks, the
final norm and the LM head at the rewrite's positions. The held-out pairs' loss is measured
before training and after each epoch; the edit of the best epoch is returned.

The `preference` objective adds a SimPO-like term (Meng et al. 2024): each pair's rewrite should be
more likely per token than its rejected reply (by default a copy of the source, which is never a
usable rewrite) by a margin — so the edit learns what changes, not only how to copy what stays.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from steer.errors import SteerError
from steer.model.hooks import NeuronEdit, capture_block_inputs, edit_neurons
from steer.model.loading import LoadedModel
from steer.model.padding import pad_rows

PARAMS = ("scale+shift", "scale", "shift")  # what is learned per neuron; a scale alone can be baked into weights
OBJECTIVES = ("likelihood", "preference")
PREFERENCE_BETA, PREFERENCE_MARGIN = 2.0, 1.0  # SimPO's scale of the per-token log-likelihood gap, and its margin


@dataclass(frozen=True)
class Example:
    """One training pair as tokens: the prompt (chat template applied), the reply to learn (the
    rewrite's tokens and the end-of-reply token) and, for the preference objective, a rejected reply."""

    prompt: list[int]
    reply: list[int]
    rejected: list[int] | None = None


@dataclass
class Batch:
    """Right-padded sequences — each pair's prompt + reply, then (when the pairs have them) prompt +
    rejected reply — and for each reply token the (row, position) whose hidden state predicts it."""

    ids: Tensor
    mask: Tensor
    rows: Tensor
    positions: Tensor
    targets: Tensor
    pairs: int = 0  # rows 0..pairs-1 hold the replies, rows pairs.. the rejected ones (if any)
    cached: tuple[Tensor, list[tuple[tuple[Any, ...], dict[str, Any]]]] | None = None

    @classmethod
    def of(cls, examples: Sequence[Example], pad_id: int, device: Any = "cpu") -> Batch:
        replies = [e.reply for e in examples]
        if all(e.rejected is not None for e in examples):
            replies += [e.rejected for e in examples]  # type: ignore[misc]
        prompts = [e.prompt for e in examples] * (len(replies) // len(examples))
        ids, mask = pad_rows([p + r for p, r in zip(prompts, replies, strict=True)], pad_id, "right")
        rows, positions, targets = [], [], []
        for r, (prompt, reply) in enumerate(zip(prompts, replies, strict=True)):
            for k, token in enumerate(reply):
                rows.append(r)
                positions.append(len(prompt) - 1 + k)
                targets.append(token)
        on = lambda t: torch.as_tensor(t).to(device)  # noqa: E731
        return cls(on(ids), on(mask), on(rows), on(positions), on(targets), len(examples))


@dataclass
class EditParameters:
    """The learned a (scale − 1) and b (shift) of the neurons in `mask`; [layers, neurons] each."""

    mask: Tensor
    params: str = "scale+shift"
    a: Tensor = field(init=False)
    b: Tensor = field(init=False)

    def __post_init__(self) -> None:
        if self.params not in PARAMS:
            raise SteerError(f"--params {self.params!r} is not valid; choose one of {', '.join(PARAMS)}")
        self.a = torch.zeros(self.mask.shape, requires_grad="scale" in self.params)
        self.b = torch.zeros(self.mask.shape, requires_grad="shift" in self.params)

    def parameters(self) -> list[Tensor]:
        return [t for t in (self.a, self.b) if t.requires_grad]

    def edit(self) -> NeuronEdit:
        """The edit these values make (differentiable in a and b; zero outside the mask)."""
        on = self.mask.to(self.a.dtype)
        return NeuronEdit(self.mask, 1 + self.a * on, self.b * on)

    def detached(self) -> NeuronEdit:
        edit = self.edit()
        return NeuronEdit(edit.mask.clone(), edit.scale.detach().clone(), edit.shift.detach().clone())


@contextmanager
def frozen(model: nn.Module) -> Iterator[None]:
    """The model's parameters without gradients inside the block, restored as they were after it."""
    was = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in was:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in was:
            p.requires_grad_(flag)


def _final_hidden(lm: LoadedModel, batch: Batch, first: int, keep: bool) -> tuple[Tensor, bool]:
    """The last block's output at every position ((hidden, normed)): from the cached inputs when the
    batch holds them, else by a full pass (keeping the inputs when `keep`)."""
    blocks = lm.blocks()
    if batch.cached is None:
        if not keep:
            out = lm.model.base_model(input_ids=batch.ids, attention_mask=batch.mask, use_cache=False)
            return out.last_hidden_state, True
        with capture_block_inputs(blocks, first) as store:
            out = lm.model.base_model(input_ids=batch.ids, attention_mask=batch.mask, use_cache=False)
        args0, kwargs0 = store[0]
        hidden = args0[0] if args0 else kwargs0["hidden_states"]
        batch.cached = (hidden, store)
        return out.last_hidden_state, True
    hidden, store = batch.cached
    for block, (args, kwargs) in zip(blocks[first:], store, strict=True):
        if args:
            out = block(hidden, *args[1:], **kwargs)
        else:
            out = block(*args, **{**kwargs, "hidden_states": hidden})
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden, False


def batch_loss(
    lm: LoadedModel, batch: Batch, edit: NeuronEdit, first: int, *, cache: bool = True, preference: bool = False
) -> Tensor:
    """Mean negative log-likelihood of the batch's reply tokens under the prompt plus `edit`, plus
    with `preference` the SimPO term on each reply against its rejected one (edits below block
    `first` are not allowed: its input is what the cache keeps)."""
    if edit.layers and min(edit.layers) < first:
        raise SteerError(f"the edit reaches block {min(edit.layers)}, below the cached block {first}")
    with edit_neurons(lm.activation_sites(), edit, "all"):
        hidden, normed = _final_hidden(lm, batch, first, keep=cache)
    picked = hidden[batch.rows, batch.positions]
    if not normed:
        picked = lm.head_input(picked)
    logits = lm.model.get_output_embeddings()(picked).float()
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    token_logp = -nn.functional.cross_entropy(logits, batch.targets, reduction="none")
    rows = batch.rows
    chosen = rows < batch.pairs
    loss = -token_logp[chosen].mean()
    if not preference:
        return loss
    if not bool((~chosen).any()):
        raise SteerError("the preference objective needs a rejected reply per pair")
    sequences = int(rows.max()) + 1
    per_row = torch.zeros(sequences, dtype=token_logp.dtype, device=rows.device).index_add(0, rows, token_logp)
    mean = per_row / torch.bincount(rows, minlength=sequences).to(token_logp.dtype)
    gap = mean[: batch.pairs] - mean[batch.pairs :]
    return loss - nn.functional.logsigmoid(PREFERENCE_BETA * gap - PREFERENCE_MARGIN).mean()


def batches(examples: Sequence[Example], size: int, pad_id: int, device: Any = "cpu") -> list[Batch]:
    """Pairs in batches of `size` on `device`, sorted by length so rows of one batch pad little."""
    ordered = sorted(examples, key=lambda e: len(e.prompt) + len(e.reply))
    return [Batch.of(ordered[i : i + size], pad_id, device) for i in range(0, len(ordered), size)]


def held_loss(lm: LoadedModel, held: Sequence[Batch], edit: NeuronEdit, first: int, preference: bool = False) -> float:
    """The objective over the held-out batches, weighted by their reply tokens."""
    total = count = 0.0
    with torch.no_grad():
        for batch in held:
            n = int((batch.rows < batch.pairs).sum())
            total += float(batch_loss(lm, batch, edit, first, preference=preference)) * n
            count += n
    return total / max(count, 1)


@dataclass
class TrainState:
    """Where a training stands after some epochs: the values, the optimiser's moments, the curve and
    the best epoch's edit — what a checkpoint keeps so an interrupted training resumes."""

    params: EditParameters
    optimizer: torch.optim.Optimizer
    epochs_done: int = 0
    curve: dict[str, list[float]] = field(default_factory=lambda: {"held": [], "train": []})
    best: tuple[float, int, NeuronEdit] | None = None


def train_edit(
    lm: LoadedModel,
    mask: Tensor,
    train: Sequence[Example],
    held: Sequence[Example],
    *,
    params: str = "scale+shift",
    objective: str = "likelihood",
    epochs: int = 2,
    lr: float = 5e-3,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = False,
    resume: Callable[[TrainState], None] | None = None,
    checkpoint: Callable[[TrainState], None] | None = None,
) -> TrainState:
    """Learn the edit on the neurons of `mask` from `train`, measuring `held` before and after each
    epoch. `resume` may restore a checkpoint into the fresh state; `checkpoint` is called after each
    epoch. The state's `best` is (held loss, epoch, edit); epoch 0 is the untrained edit. With
    `objective="preference"` every pair needs its `rejected` reply."""
    from tqdm.auto import tqdm

    if objective not in OBJECTIVES:
        raise SteerError(f"--objective {objective!r} is not valid; choose one of {', '.join(OBJECTIVES)}")
    preference = objective == "preference"
    if getattr(lm, "weights", None) is not None:  # fbgemm's fp16 and the int8 products pass no gradient back
        raise SteerError(f"training needs float weights, not {lm.weights}; load the model with --dtype float32")
    if not bool(mask.any()):
        raise SteerError("no neurons to train: the selection is empty (raise --top-k or widen --layers)")
    if not train or not held:
        raise SteerError("training needs pairs to learn from and held-out pairs to measure on")
    first = int(mask.any(1).nonzero().min())
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    train_batches, held_batches = (batches(e, batch_size, pad, lm.device) for e in (train, held))
    p = EditParameters(mask, params)
    state = TrainState(p, torch.optim.Adam(p.parameters(), lr=lr))
    if resume is not None:
        resume(state)
        if state.epochs_done > epochs:
            raise SteerError(f"the checkpoint holds {state.epochs_done} epochs, more than --epochs {epochs}; raise it")
    order = random.Random(seed)
    with frozen(lm.model):
        if state.best is None:
            untrained = p.detached()
            state.curve["held"].append(held_loss(lm, held_batches, untrained, first, preference))
            state.best = (state.curve["held"][0], 0, untrained)
        for epoch in range(epochs):
            shuffled = list(range(len(train_batches)))
            order.shuffle(shuffled)  # the same order per epoch whether resumed or not
            if epoch < state.epochs_done:
                continue
            bar = tqdm(
                shuffled, desc=f"epoch {epoch + 1}/{epochs}", unit="batch", disable=not progress, file=sys.stderr
            )
            total = 0.0
            for i in bar:
                loss = batch_loss(lm, train_batches[i], p.edit(), first, preference=preference)
                state.optimizer.zero_grad()
                loss.backward()
                state.optimizer.step()
                value = float(loss.detach())
                total += value
                bar.set_postfix(loss=f"{value:.3f}")
            state.curve["train"].append(total / len(train_batches))
            edit = p.detached()
            state.curve["held"].append(held_loss(lm, held_batches, edit, first, preference))
            if not math.isfinite(state.curve["held"][-1]):
                raise SteerError(
                    f"training diverged in epoch {epoch + 1} (held-out loss is not finite); lower --lr and pass "
                    "--force (the checkpoint holds this training's earlier epochs)"
                )
            if state.curve["held"][-1] < state.best[0]:
                state.best = (state.curve["held"][-1], epoch + 1, edit)
            state.epochs_done = epoch + 1
            if checkpoint is not None:
                checkpoint(state)
    return state
