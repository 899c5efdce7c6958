"""Activation counts, style profiles and the selection of style-specific neurons.

A `StyleProfile` is one `.safetensors` file: per style, how many real tokens fired each neuron
(`fired`) and the summed activation (`sums`), plus JSON metadata. Selection always compares
*rates* (count / tokens), never raw counts of corpora of unequal size.

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

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from steer import __version__
from steer.config import SteerError
from steer.files import atomic_path, read_safetensors

FORMAT = "steer-profile"
FORMAT_VERSION = 1
Method = Literal["paper", "diff", "lape"]
METHODS: tuple[str, ...] = get_args(Method)


@dataclass(frozen=True)
class ActivationCounts:
    """How often each neuron fired on one style's real tokens; rates are what get compared."""

    style: str
    fired: Tensor  # int64 [layers, neurons]: real tokens on which act > 0
    sums: Tensor  # float64 [layers, neurons]: summed activation over real tokens
    num_tokens: int
    num_texts: int

    @property
    def rate(self) -> Tensor:
        """Share of real tokens on which each neuron fired (float64)."""
        return self.fired.double() / max(self.num_tokens, 1)

    @property
    def mean(self) -> Tensor:
        """Mean activation per real token (float64)."""
        return self.sums / max(self.num_tokens, 1)

    def __add__(self, other: ActivationCounts) -> ActivationCounts:
        """Merge counts of two shards of the same style."""
        if other.style != self.style or other.fired.shape != self.fired.shape:
            raise SteerError(f"cannot merge counts of {self.style!r} and {other.style!r}")
        return ActivationCounts(
            self.style,
            self.fired + other.fired,
            self.sums + other.sums,
            self.num_tokens + other.num_tokens,
            self.num_texts + other.num_texts,
        )


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


def parse_top_k(value: str | int | float, total: int) -> int:
    """A neuron count from `500`, `1%` or a fraction like `0.01`, checked against `total`."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            k = math.ceil(share * total) if share > 0 else 0
            bad = not 0 < share <= 1
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
    if bad:
        raise SteerError(
            f"--top-k {text!r} is not valid; give a count from 1 to {total}, a percentage like '1%' "
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


@dataclass(frozen=True)
class StyleProfile:
    """Activation counts of several styles on one model: the artefact of `steer profile`."""

    model_id: str
    model_type: str
    fingerprint: str
    num_layers: int
    num_neurons: int
    counts: dict[str, ActivationCounts]
    corpora: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    steer_version: str = __version__

    @property
    def styles(self) -> list[str]:
        return list(self.counts)

    @property
    def total_neurons(self) -> int:
        return self.num_layers * self.num_neurons

    def check_style(self, style: str) -> None:
        """Raise a one-line error naming the profile's styles if `style` is not one of them."""
        if style not in self.counts:
            raise SteerError(f"style {style!r} is not in this profile; its styles: {', '.join(self.styles)}")

    def neurons(
        self, source: str, target: str, *, top_k: str | int | float = "1%", method: str = "paper"
    ) -> NeuronSelection:
        """Neurons specific to `source` and to `target` (see the module docstring for methods)."""
        self.check_style(source)
        self.check_style(target)
        if source == target:
            raise SteerError(f"source and target are both {source!r}; pick two different styles")
        k = parse_top_k(top_k, self.total_neurons)
        rates = {s: c.rate for s, c in self.counts.items()}
        return select_neurons(rates, source, target, k, method)

    def metadata(self) -> dict[str, Any]:
        """The JSON metadata stored beside the tensors."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "steer_version": self.steer_version,
            "model_id": self.model_id,
            "model_type": self.model_type,
            "fingerprint": self.fingerprint,
            "num_layers": self.num_layers,
            "num_neurons": self.num_neurons,
            "styles": self.styles,
            "num_tokens": {s: c.num_tokens for s, c in self.counts.items()},
            "num_texts": {s: c.num_texts for s, c in self.counts.items()},
            "corpora": self.corpora,
            "settings": self.settings,
        }

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        """Write tensors + metadata atomically (temp file in the same folder, then rename)."""
        from safetensors.torch import save_file

        path = Path(path)
        if path.exists() and not force:
            raise SteerError(f"{path} exists; pass --force to overwrite it")
        tensors: dict[str, Tensor] = {}
        for style, c in self.counts.items():
            tensors[f"fired.{style}"] = c.fired.to(torch.int64).contiguous()
            tensors[f"sums.{style}"] = c.sums.to(torch.float64).contiguous()
        with atomic_path(path) as tmp:
            save_file(tensors, tmp, metadata={"steer": json.dumps(self.metadata())})
        return path

    @classmethod
    def load(cls, path: str | Path) -> StyleProfile:
        """Read and validate a profile; never unpickles anything."""
        path = Path(path)
        if path.is_dir():
            raise SteerError(f"profile {path} is a directory; pass the .safetensors file 'steer profile' wrote")
        if not path.is_file():
            raise SteerError(f"profile {path} does not exist; create it with 'steer profile'")
        raw, tensors = read_safetensors(path, "profile")
        return cls._from_parts(path, raw, tensors)

    @classmethod
    def _from_parts(cls, path: Path, raw: str | None, tensors: dict[str, Tensor]) -> StyleProfile:
        foreign = f"{path} is not a steer profile (no steer metadata); create one with 'steer profile'"
        if raw is None:
            raise SteerError(foreign)
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError:
            raise SteerError(f"{path} has corrupt steer metadata") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise SteerError(foreign)
        version = meta.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise SteerError(
                f"{path} has profile format {version}, newer than this steer ({__version__}) reads "
                f"(format {FORMAT_VERSION}); upgrade steer"
            )
        try:
            layers, neurons = int(meta["num_layers"]), int(meta["num_neurons"])
            counts = {}
            for style in meta["styles"]:
                fired, sums = tensors[f"fired.{style}"], tensors[f"sums.{style}"]
                if fired.shape != (layers, neurons) or sums.shape != (layers, neurons):
                    raise SteerError(f"{path}: tensors of style {style!r} are not {layers}×{neurons}")
                if fired.dtype != torch.int64 or sums.dtype != torch.float64:
                    raise SteerError(f"{path}: tensors of style {style!r} have the wrong dtype")
                num_tokens, num_texts = int(meta["num_tokens"][style]), int(meta["num_texts"][style])
                if num_tokens < 0 or num_texts < 0 or bool((fired < 0).any()) or bool((fired > num_tokens).any()):
                    raise SteerError(
                        f"{path}: counts of style {style!r} are impossible (negative, or more firings than its "
                        f"{num_tokens} tokens); the profile is corrupt, recreate it with 'steer profile'"
                    )
                if not bool(torch.isfinite(sums).all()):
                    raise SteerError(f"{path}: activation sums of style {style!r} are not finite; recreate the profile")
                counts[style] = ActivationCounts(style, fired, sums, num_tokens, num_texts)
            return cls(
                model_id=str(meta["model_id"]),
                model_type=str(meta["model_type"]),
                fingerprint=str(meta["fingerprint"]),
                num_layers=layers,
                num_neurons=neurons,
                counts=counts,
                corpora=dict(meta.get("corpora", {})),
                settings=dict(meta.get("settings", {})),
                steer_version=str(meta.get("steer_version", "?")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SteerError(f"{path}: steer metadata is incomplete or corrupt (missing {exc})") from None

    def check_model(self, model_type: str, num_layers: int, num_neurons: int, fingerprint: str, model_id: str) -> None:
        """Refuse a model other than the one profiled, naming both."""
        if (model_type, num_layers, num_neurons, fingerprint) != (
            self.model_type,
            self.num_layers,
            self.num_neurons,
            self.fingerprint,
        ):
            raise SteerError(
                f"the profile was made for {self.model_id} ({self.model_type} {self.num_layers}×{self.num_neurons}, "
                f"fingerprint {self.fingerprint}), but the model is {model_id} ({model_type} "
                f"{num_layers}×{num_neurons}, fingerprint {fingerprint}); profile this model first or pass the "
                "matching --model"
            )
