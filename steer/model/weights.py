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

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from steer.model.names import LIGHT_FORMATS


class Fp16Linear(nn.Module):
    """`nn.Linear` with float16 weights packed for fbgemm; float32 in and out."""

    def __init__(self, linear: Any) -> None:
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

    def __init__(self, linear: Any) -> None:
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


MAPPED_BYTES = 64 << 20  # a float32 embedding at least this large stays in the checkpoint, mapped read-only


class LightUnavailable(Exception):
    """The directory is not one `load_light` reads exactly as `from_pretrained` would (renamed or
    prefixed tensor names, other shapes, quantised or unknown dtypes, files no index names): the
    caller loads float32 and lightens instead."""


class _Tensors:
    """The tensors of a model directory's safetensors files, read one at a time with plain reads (a
    checkpoint mapped whole would count as resident while the model loads), except large embeddings,
    which are mapped read-only: only the rows a text uses are ever read into memory."""

    DTYPES = {
        "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64, "I64": torch.int64,
        "I32": torch.int32, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
    }  # fmt: skip

    def __init__(self, folder: Path) -> None:
        self.where: dict[str, tuple[Path, int, dict[str, Any]]] = {}
        index = folder / "model.safetensors.index.json"
        if index.is_file():  # the files the index names, as from_pretrained reads them
            files = sorted({folder / f for f in json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()})
        elif (folder / "model.safetensors").is_file():
            files = [folder / "model.safetensors"]
        else:
            raise LightUnavailable("no model.safetensors or index")
        for file in files:
            try:
                with file.open("rb") as f:
                    size = int.from_bytes(f.read(8), "little")
                    header = json.loads(f.read(size))
            except (OSError, ValueError) as exc:
                raise LightUnavailable(f"{file.name}: {exc}") from None
            for name, info in header.items():
                if name != "__metadata__":
                    if info.get("dtype") not in self.DTYPES:
                        raise LightUnavailable(f"{name}: dtype {info.get('dtype')}")
                    self.where[name] = (file, 8 + size, info)

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def get(self, name: str) -> torch.Tensor:
        file, base, info = self.where[name]
        start, end = info["data_offsets"]
        out = torch.empty(info["shape"], dtype=self.DTYPES[info["dtype"]])
        view = out.view(-1).view(torch.uint8) if out.numel() else out.view(torch.uint8)
        with file.open("rb") as f:
            f.seek(base + start)
            buffer: Any = view.numpy()
            if f.readinto(buffer) != end - start:
                raise OSError(f"{file.name}: {name} is cut short")
        return out

    def mapped(self, name: str) -> torch.Tensor:
        """A read-only view of the tensor in the mapped file (nothing writes an embedding's weight)."""
        import mmap
        import warnings

        file, base, info = self.where[name]
        dtype = self.DTYPES[info["dtype"]]
        with file.open("rb") as f:
            region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        count = 1
        for size in info["shape"]:
            count *= size
        with warnings.catch_warnings():  # the buffer is read-only, and so is the tensor's use
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(region, dtype=dtype, count=count, offset=base + info["data_offsets"][0])
        return flat.view(info["shape"])

    def large(self, name: str) -> bool:
        _, _, info = self.where[name]
        start, end = info["data_offsets"]
        return info["dtype"] == "F32" and end - start >= MAPPED_BYTES


def load_light(folder: str | Path, fmt: str, fingerprint_of: Callable[..., str]) -> tuple[Any, str]:
    """The model of a directory with every `nn.Linear` in `fmt` from the start and the rest float32,
    read tensor by tensor: what loading float32 and then `lighten` gives, bit for bit, without ever
    holding the float32 linear weights (the 1.5B: about 3 GB of float16 weights, not 6 GB of float32
    and the mapped checkpoint beside them); a large float32 embedding is the checkpoint's own bytes,
    mapped read-only. Also the model's `fingerprint`, taken from the checkpoint's float32 tensors
    as `fingerprint` takes it from a float32 model."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    if fmt not in LIGHT_FORMATS:
        raise ValueError(f"unknown linear format {fmt!r}; choose one of {', '.join(LIGHT_FORMATS)}")
    folder = Path(folder)
    config = AutoConfig.from_pretrained(folder)
    if getattr(config, "quantization_config", None):
        raise LightUnavailable("a quantised checkpoint")
    tensors = _Tensors(folder)
    with _no_init():  # parameters allocated but never written: untouched pages are not resident
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.tie_weights()  # skipped with the initialisation: a head that shares the embedding's weight
    names = [name for name, _ in model.named_parameters()]
    tied = _tied_sources(model)
    _check_names(model, tensors, tied)

    def stored(name: str, mapped: bool = False) -> torch.Tensor:
        source = name if name in tensors else tied.get(name, name)
        if source not in tensors:
            raise OSError(f"{folder}: the checkpoint has no tensor {name!r}")
        if mapped and tensors.large(source):
            return tensors.mapped(source)
        found = tensors.get(source)
        return found.float() if found.is_floating_point() else found

    cls = Fp16Linear if fmt == "fp16-linear" else Int8Linear
    linears = [(n, m.in_features * m.out_features) for n, m in model.named_modules() if type(m) is nn.Linear]
    # the largest first (the LM head): its float32 copy is read while little else is held (the peak)
    for name, _ in sorted(linears, key=lambda item: -item[1]):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        linear = getattr(parent, child)
        prefix = f"{name}."
        weight = stored(prefix + "weight")
        bias = stored(prefix + "bias") if linear.bias is not None else None
        setattr(parent, child, cls(_Plain(linear.in_features, linear.out_features, weight, bias)))
    for name, param in list(model.named_parameters()):
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        value = stored(name, mapped=isinstance(module, nn.Embedding)).to(param.dtype)
        setattr(module, attr, nn.Parameter(value, requires_grad=param.requires_grad))
    for name, buffer in model.named_buffers():  # persistent buffers saved with the weights
        if name in tensors:
            module_name, _, attr = name.rpartition(".")
            model.get_submodule(module_name).register_buffer(attr, stored(name).to(buffer.dtype))
    try:
        model.generation_config = GenerationConfig.from_pretrained(folder)
    except OSError:
        pass  # no generation_config.json: the config's defaults, as from_pretrained leaves them
    print_ = fingerprint_of(config, names, lambda name: stored(name, mapped=True))
    return model.eval(), print_


def _check_names(model: Any, tensors: _Tensors, tied: dict[str, str]) -> None:
    """Every parameter is in the checkpoint under its own name (or its tied twin's) with its shape,
    and every checkpoint tensor is a parameter or buffer of the model; else `LightUnavailable`."""
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters(remove_duplicate=False)}
    for name, shape in shapes.items():
        source = name if name in tensors else tied.get(name, name)
        if source not in tensors or tuple(tensors.where[source][2]["shape"]) != shape:
            raise LightUnavailable(f"{name}: not in the checkpoint with shape {list(shape)}")
    known = set(shapes) | {name for name, _ in model.named_buffers()}
    extra = sorted(set(tensors.where) - known)
    if extra:
        raise LightUnavailable(f"{extra[0]}: not a parameter of the model (renamed on load?)")


class _Plain:
    """What `Fp16Linear` / `Int8Linear` read from a linear layer, without building one."""

    def __init__(self, in_features: int, out_features: int, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.in_features, self.out_features, self.weight, self.bias = in_features, out_features, weight, bias


def _tied_sources(model: Any) -> dict[str, str]:
    """Parameter name → the name it is tied to (a head that shares the input embedding's weight)."""
    by_id: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        first = by_id.setdefault(id(param), name)
        if first != name:
            tied[name], tied[first] = first, name
    return tied


def _no_init() -> Any:
    """transformers' context that skips weight initialisation (restored on exit)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # pragma: no cover - transformers before 5 kept it here
        from transformers.modeling_utils import no_init_weights  # type: ignore[attr-defined,no-redef]
    return no_init_weights()
