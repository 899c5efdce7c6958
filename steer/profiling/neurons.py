"""Selection of style-specific neurons from a profile's firing rates (paper, diff, LAPE).

Selection always compares *rates* (count / tokens), never raw counts of corpora of unequal size.
The counts themselves and the profile artefact live in `steer.profiling.profile`.

Selection methods (`METHODS`):
- `paper`: the paper's description — top-k neurons per style by activation rate, then drop the
  neurons that are in both top-k sets (style-specific = in one set only).
- `diff`: the released sNeuron-TST code — top-k per style by rate *difference*
  (rate_style − rate_other). A neuron cannot have a positive difference both ways, so the
  paper's overlap-removal step is a no-op in that variant.
- `lape`: activation-probability entropy (Tang et al., 2024, Language-Specific Neurons): the
  top-k lowest-entropy neurons among those that fire often, assigned to the styles whose rate
  reaches a high quantile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from steer.errors import SteerError
from steer.settings import METHODS, Method  # noqa: F401  (re-exported: the selection methods)


@dataclass(frozen=True)
class NeuronSet:
    """A set of neurons for one style as a bool mask [layers, neurons]."""

    style: str
    mask: Tensor

    def __len__(self) -> int:
        return int(self.mask.sum())

    def per_layer(self) -> list[int]:
        """How many neurons of the set each layer holds."""
        return self.mask.sum(1).tolist()


@dataclass(frozen=True)
class NeuronSelection:
    """The result of a selection: neurons specific to the source and to the target style."""

    source: NeuronSet
    target: NeuronSet
    shared: NeuronSet  # in both top-k sets (removed from source and target)
    method: str
    top_k: int


def parse_top_k(value: str | int | float, total: int, name: str = "top_k") -> int:
    """A neuron count from `500`, `1%` or a fraction like `0.01`, checked against `total` (`name`: the
    setting an error names)."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            k = math.ceil(share * total) if share > 0 else 0
            bad = not 0 < share < 1  # as for a fraction: every neuron would leave none that tells the styles apart
        elif text.isdigit() or (text.startswith("-") and text[1:].isdigit()):
            k = int(text)
            bad = k < 1 or k > total
        else:
            share = float(text)
            if not 0 < share < 1:
                raise ValueError
            k, bad = math.ceil(share * total), False
    except ValueError:
        bad, k = True, 0
    # every neuron (a count of all of them, or a share that rounds up to all) leaves none that tells the
    # styles apart: the edit would be empty and the steering a silent no-op
    if bad or k >= total:
        raise SteerError(
            f"`{name}` {text!r} is not valid; give a count from 1 to {total - 1}, a percentage below 100% like '1%' "
            "or a fraction in (0, 1)"
        )
    return k


def top_k_mask(score: Tensor, k: int) -> Tensor:
    """Bool mask of the k largest scores (ties broken by index, so the result is deterministic)."""
    flat = score.reshape(-1)
    order = torch.argsort(flat, descending=True, stable=True)[:k]
    mask = torch.zeros_like(flat, dtype=torch.bool)
    mask[order] = True
    return mask.reshape(score.shape)


def lape_scores(rates: Tensor) -> Tensor:
    """Entropy of each neuron's rates normalised across styles ([styles, L, N] → [L, N])."""
    total = rates.sum(0, keepdim=True)
    p = torch.where(total > 0, rates / total.clamp_min(1e-30), torch.zeros_like(rates))
    return -(torch.where(p > 0, p * p.clamp_min(1e-30).log(), torch.zeros_like(p))).sum(0)


def select_neurons(
    rates: dict[str, Tensor],
    source: str,
    target: str,
    top_k: int,
    method: str = "paper",
    *,
    lape_filter: float = 0.95,
) -> NeuronSelection:
    """Pick source-only and target-only neurons from per-style rates (see module docstring)."""
    if method not in METHODS:
        raise SteerError(f"unknown selection method {method!r}; choose one of {', '.join(METHODS)}")
    src, tgt = rates[source], rates[target]
    if method == "paper":
        top_src, top_tgt = top_k_mask(src, top_k), top_k_mask(tgt, top_k)
    elif method == "diff":
        top_src = top_k_mask(src - tgt, top_k) & (src > tgt)
        top_tgt = top_k_mask(tgt - src, top_k) & (tgt > src)
    else:
        stacked = torch.stack([rates[s] for s in rates])
        highest = stacked.max(0).values
        bar = torch.quantile(stacked.reshape(-1).float(), lape_filter).item()
        entropy = lape_scores(stacked).masked_fill(highest < bar, math.inf)
        chosen = top_k_mask(-entropy, top_k) & (highest >= bar)
        top_src, top_tgt = chosen & (src >= bar), chosen & (tgt >= bar)
    shared = top_src & top_tgt
    return NeuronSelection(
        NeuronSet(source, top_src & ~shared),
        NeuronSet(target, top_tgt & ~shared),
        NeuronSet("shared", shared),
        method,
        top_k,
    )
