"""Lighter linear layers for CPU decoding: the same model with fp16 or int8 linear weights.

A decoding step is bound by the bytes of weights it reads, and these read two or four times fewer.

Two formats:
- `fp16-linear`: weights stored in float16, products computed in float32 by fbgemm's packed
  fp16 kernels (`quantized::linear_dynamic_fp16`); within float16 rounding of float32. Like
  float32's own kernels, fbgemm picks its kernel by the batch's row count, so a row's last bits
  can depend on how many rows share its call (on an AMD EPYC with AVX2: one row alone differs
  from the same row among others) — the scores records carry are read one text at a time for
  that reason (`steer.model.invariant`).
- `int8-linear`: weights in int8 per output channel, each row's activations quantised to int8
  with their own scale, products summed in int32 (`torch._int_mm`). Integer sums are exact in any
  order, so unlike torch's dynamic quantisation (one activation scale for the whole batch) the
  layer gives a row the same output in any batch. But its rounding to int8 amplifies the last-bit
  differences that the model's other batched kernels make (attention over a shared prefix or
  another padding), so whole rewrites can change with the batch or the shared prefix (those of
  float32 and `fp16-linear` did not). Records carry the format, and it is not a default.

Only `nn.Linear` modules are replaced (attention and MLP projections, the LM head); embeddings,
norms and the MLP's activation modules — the sites steer hooks — stay as they are, so steering,
profiling and the probe work unchanged. The replacement happens on a model steer loaded itself,
before anyone else holds it. `steer export` (which edits `down_proj`'s float weights) refuses
them; layer contrast runs its early exit through the lighter LM head.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from steer.model.names import LIGHT_FORMATS


class Fp16Linear(nn.Module):
    """`nn.Linear` with float16 weights packed for fbgemm; float32 in and out."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        bias = None if linear.bias is None else linear.bias.detach().float()
        self._packed = torch.ops.quantized.linear_prepack_fp16(linear.weight.detach().float(), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self._packed)

    def float_weight(self) -> torch.Tensor:
        """The weight as float32 (the float16 values the products use)."""
        return torch.ops.quantized.linear_unpack_fp16(self._packed)[0].float()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights=float16"


class Int8Linear(nn.Module):
    """`nn.Linear` with int8 weights (one scale per output channel) and int8 activations (one scale
    per row), summed exactly in int32: y = (q(x) · q(W)ᵀ) · s_x · s_W + b."""

    qweight_t: torch.Tensor  # buffers, registered in __init__
    weight_scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        self.register_buffer("qweight_t", torch.round(weight / scale[:, None]).to(torch.int8).t().contiguous())
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).float()
        scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        quantised = torch.round(rows / scale).to(torch.int8)
        out = torch._int_mm(quantised, self.qweight_t).float() * scale * self.weight_scale
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def float_weight(self) -> torch.Tensor:
        """The weight as float32 (the int8 values times their scales)."""
        return self.qweight_t.t().float() * self.weight_scale[:, None]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights=int8, activations=int8"


def lighten(model: Any, fmt: str) -> int:
    """Replace every `nn.Linear` of `model` (a float32 CPU model steer just loaded) by its `fmt`
    counterpart; returns how many were replaced. Tied weights (Qwen's LM head and embedding) are
    copied into the head's own format: the embedding stays float32."""
    if fmt not in LIGHT_FORMATS:
        raise ValueError(f"unknown linear format {fmt!r}; choose one of {', '.join(LIGHT_FORMATS)}")
    cls = Fp16Linear if fmt == "fp16-linear" else Int8Linear
    # names, not modules: each float layer is freed as soon as its replacement is in (peak memory)
    names = [name for name, module in model.named_modules() if type(module) is nn.Linear]
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, cls(getattr(parent, child)))
    return len(names)


def is_light(module: Any) -> bool:
    """Whether `module` is one of this module's lighter linear layers (its weight is not a tensor)."""
    return isinstance(module, Fp16Linear | Int8Linear)
