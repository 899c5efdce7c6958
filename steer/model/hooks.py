"""The only place `steer` registers PyTorch hooks.

Every hook lives inside a context manager that registers its handles on an `ExitStack` and
removes exactly those handles on exit, also when the body raises. Hooks never edit a tensor in
place: an edit returns a new tensor, and an empty edit leaves the model's output untouched.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from steer.errors import SteerError
from steer.settings import POSITIONS, Position  # noqa: F401  (re-exported: hooks name where edits apply)


def _output_tensor(output: Any) -> Tensor:
    return output[0] if isinstance(output, tuple) else output


@contextmanager
def _hooks(register: Sequence[tuple[nn.Module, str, Any, dict[str, Any]]]) -> Iterator[None]:
    """Register (module, kind, fn, kwargs) hooks and remove exactly these handles on exit."""
    with ExitStack() as stack:
        for module, kind, fn, kwargs in register:
            method = module.register_forward_hook if kind == "forward" else module.register_forward_pre_hook
            stack.callback(method(fn, **kwargs).remove)
        yield


def probe_activation_sites(model: nn.Module, sites: Sequence[nn.Module]) -> tuple[int, bool]:
    """Run one tiny forward pass and check each activation site fires once with one width.

    A fused kernel that bypasses the hooked module would make every later count silently zero,
    so it is refused here. Returns the number of neurons per layer, and whether the activations
    come with the batch and positions flattened into one dimension (OPT's [batch * seq, neurons]).
    """
    calls = [0] * len(sites)
    widths: set[int] = set()
    dims: set[int] = set()

    def make(i: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            calls[i] += 1
            widths.add(_output_tensor(output).shape[-1])
            dims.add(_output_tensor(output).dim())

        return hook

    device = next(model.parameters()).device
    ids = torch.zeros((1, 2), dtype=torch.long, device=device)
    with _hooks([(site, "forward", make(i), {}) for i, site in enumerate(sites)]), torch.inference_mode():
        model(input_ids=ids, use_cache=False)
    bad = [i for i, n in enumerate(calls) if n != 1]
    if bad:
        raise SteerError(
            f"the MLP activation module of layer {bad[0]} ran {calls[bad[0]]} times in one forward pass, not once "
            "(a fused kernel may bypass it, or one module is shared); point `activation_path` at a module "
            "whose output is the gated activation"
        )
    if len(widths) != 1:
        raise SteerError(f"MLP activation widths differ across layers ({sorted(widths)}); steer needs one width")
    return widths.pop(), dims == {2}


@dataclass
class ActivationRecorder:
    """Running per-layer counts filled by `record_activations`.

    `fired[l, j]` counts real tokens on which neuron j of layer l was > 0, `sums[l, j]` adds up
    its activation over real tokens, and `num_tokens` counts the real (non-padding) tokens seen.
    """

    num_layers: int
    fired: list[Tensor | None] = field(default_factory=list)
    sums: list[Tensor | None] = field(default_factory=list)
    num_tokens: int = 0

    def __post_init__(self) -> None:
        self.fired = [None] * self.num_layers
        self.sums = [None] * self.num_layers

    def result(self) -> tuple[Tensor, Tensor]:
        """Stack the per-layer tensors on the CPU: (fired int64, sums float64), [layers, neurons]."""
        if any(t is None for t in self.fired):
            raise SteerError("no tokens were recorded; is the corpus empty?")
        fired = torch.stack([t.cpu() for t in self.fired])  # type: ignore[union-attr]
        sums = torch.stack([t.cpu() for t in self.sums])  # type: ignore[union-attr]
        return fired, sums


@contextmanager
def record_activations(root: nn.Module, sites: Sequence[nn.Module]) -> Iterator[ActivationRecorder]:
    """Count, per neuron, the real tokens on which each site's output is > 0.

    The attention mask is read from the keyword arguments of `root` (a forward pre-hook), so
    padding is never counted; without a mask every position is real.
    """
    recorder = ActivationRecorder(len(sites))
    state: dict[str, Tensor | None] = {"mask": None}

    def capture_mask(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        mask = kwargs.get("attention_mask")
        ids = kwargs.get("input_ids", args[0] if args else None)
        if mask is None and ids is not None:
            mask = torch.ones(ids.shape[:2], dtype=torch.bool, device=ids.device)
        state["mask"] = None if mask is None else mask.bool()
        if mask is not None:
            recorder.num_tokens += int(state["mask"].sum())  # type: ignore[union-attr]

    def make(i: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            act = _output_tensor(output).detach()
            flat = act.reshape(-1, act.shape[-1])
            mask = state["mask"]
            if mask is not None:
                steps = act.shape[1] if act.dim() == 3 else flat.shape[0] // max(mask.shape[0], 1)
                mask = mask[:, -steps:].reshape(-1).to(flat.device)
                if mask.shape[0] != flat.shape[0]:
                    raise SteerError("attention mask and activations disagree in shape; cannot skip padding")
                if not bool(mask.all()):
                    flat = flat[mask]
            fired = (flat > 0).sum(0)
            total = flat.sum(0, dtype=torch.float64)
            if recorder.fired[i] is None:
                recorder.fired[i], recorder.sums[i] = fired, total
            else:
                recorder.fired[i] = recorder.fired[i] + fired  # type: ignore[operator]
                recorder.sums[i] = recorder.sums[i] + total  # type: ignore[operator]

        return hook

    hooks = [(root, "pre", capture_mask, {"with_kwargs": True})]
    hooks += [(site, "forward", make(i), {}) for i, site in enumerate(sites)]
    with _hooks(hooks):
        yield recorder


@contextmanager
def capture_hidden(blocks: Sequence[nn.Module], layers: Sequence[int]) -> Iterator[dict[int, Tensor]]:
    """Keep the last position's residual stream after each chosen block, refreshed every step."""
    store: dict[int, Tensor] = {}

    def make(layer: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            store[layer] = _output_tensor(output)[:, -1, :].detach()

        return hook

    with _hooks([(blocks[layer], "forward", make(layer), {}) for layer in layers]):
        yield store


@dataclass(frozen=True)
class NeuronEdit:
    """A per-neuron edit of the gated activation: `x → x * scale + shift` where `mask` is set.

    Neurons outside `mask` pass through untouched (bit for bit). Zeroing is `scale=0, shift=0`;
    amplifying is `scale>1`. All tensors are [layers, neurons].
    """

    mask: Tensor
    scale: Tensor
    shift: Tensor

    @classmethod
    def empty(cls, num_layers: int, num_neurons: int) -> NeuronEdit:
        """An edit that changes nothing."""
        mask = torch.zeros(num_layers, num_neurons, dtype=torch.bool)
        return cls(mask, torch.ones(num_layers, num_neurons), torch.zeros(num_layers, num_neurons))

    def with_scale(self, neurons: Tensor, factor: float) -> NeuronEdit:
        """This edit plus `x → x * factor` on the neurons in the bool mask `neurons`."""
        return NeuronEdit(
            self.mask | neurons,
            torch.where(neurons, torch.full_like(self.scale, factor), self.scale),
            torch.where(neurons, torch.zeros_like(self.shift), self.shift),
        )

    def with_shift(self, neurons: Tensor, values: Tensor) -> NeuronEdit:
        """This edit plus `x → x + values` on the neurons in the bool mask `neurons`."""
        return NeuronEdit(
            self.mask | neurons,
            self.scale,
            torch.where(neurons, values.to(self.shift.dtype), self.shift),
        )

    def only_layers(self, layers: Sequence[int]) -> NeuronEdit:
        """This edit with every layer outside `layers` left untouched."""
        keep = torch.zeros(self.mask.shape[0], 1, dtype=torch.bool)
        keep[list(layers)] = True
        return NeuronEdit(self.mask & keep, self.scale, self.shift)

    @property
    def layers(self) -> list[int]:
        """Layers with at least one edited neuron."""
        return self.mask.any(1).nonzero().flatten().tolist()

    def __len__(self) -> int:
        return int(self.mask.sum())


@contextmanager
def edit_neurons(
    sites: Sequence[nn.Module],
    edit: NeuronEdit,
    positions: str = "all",
    rows: Tensor | None = None,
    blocks: Sequence[nn.Module] | None = None,
) -> Iterator[None]:
    """Apply `edit` to the sites' outputs, returning new tensors (never editing in place).

    `positions="all"` edits every position, prompt included (the paper). `"generated"` edits
    only the positions that predict new tokens: the last prompt position in the prefill call
    and every position of the decoding calls. `rows` (bool [batch]) limits the edit to those
    batch rows, so one batch can hold edited and unedited copies of a prompt (guidance); a decoder
    that drops finished rows registers the edit for each forward pass with the rows that pass holds
    (`BatchLayout.edit_rows(k, held)`, `decoding.greedy_decode(hooks=...)`). Layers without edited
    neurons get no hook. `blocks` (each layer's block) is needed where the activations come with
    batch and positions flattened (OPT): the block's input gives their shape back.
    """
    if positions not in POSITIONS:
        raise SteerError(f"`positions` {positions!r} is not valid; choose one of {', '.join(POSITIONS)}")
    row_cache: dict[Any, Tensor] = {}

    def row_mask(like: Tensor) -> Tensor:
        if rows is None:
            raise AssertionError("row_mask called without rows")
        if rows.shape[0] != like.shape[0]:
            raise SteerError(f"edit rows cover {rows.shape[0]} batch rows but the batch has {like.shape[0]}")
        if like.device not in row_cache:
            row_cache[like.device] = rows.to(like.device).reshape(-1, *([1] * (like.dim() - 1)))
        return row_cache[like.device]

    cache: dict[tuple[int, Any, Any], tuple[Tensor, Tensor, Tensor]] = {}

    def tensors(layer: int, like: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        key = (layer, like.device, like.dtype)
        if key not in cache:  # one copy per device and dtype, so device_map="auto" works
            cache[key] = (
                edit.mask[layer].to(like.device),
                edit.scale[layer].to(like.device, like.dtype),
                edit.shift[layer].to(like.device, like.dtype),
            )
        return cache[key]

    shapes: dict[int, tuple[int, int]] = {}  # layer → (batch, seq) of its block's latest input

    def shape_of(layer: int) -> Any:
        def pre_hook(_module: nn.Module, args: Any, kwargs: Any) -> None:
            hidden = args[0] if args else kwargs["hidden_states"]
            shapes[layer] = (hidden.shape[0], hidden.shape[1])

        return pre_hook

    def make(layer: int) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> Any:
            flat = _output_tensor(output)
            if flat.dim() == 2 and layer in shapes and shapes[layer][0] * shapes[layer][1] == flat.shape[0]:
                edited = flat_hook(module, args, flat.reshape(*shapes[layer], flat.shape[-1])).reshape(flat.shape)
                return (edited, *output[1:]) if isinstance(output, tuple) else edited
            return flat_hook(module, args, output)

        def flat_hook(_module: nn.Module, _args: Any, output: Any) -> Any:
            act = _output_tensor(output)
            mask, scale, shift = tensors(layer, act)
            edited = torch.where(mask, act * scale + shift, act)
            if positions == "generated" and act.dim() == 3 and act.shape[1] > 1:
                keep = torch.zeros(act.shape[1], 1, dtype=torch.bool, device=act.device)
                keep[-1] = True
                edited = torch.where(keep, edited, act)
            elif positions == "generated" and act.dim() != 3:
                raise SteerError("`positions` generated needs [batch, seq, neurons] activations; use `positions` all")
            if rows is not None:
                edited = torch.where(row_mask(act), edited, act)
            return (edited, *output[1:]) if isinstance(output, tuple) else edited

        return hook

    register: list[tuple[nn.Module, str, Any, dict[str, Any]]] = [
        (sites[layer], "forward", make(layer), {}) for layer in edit.layers
    ]
    if blocks is not None:
        register += [(blocks[layer], "pre", shape_of(layer), {"with_kwargs": True}) for layer in edit.layers]
    with _hooks(register):
        yield


@contextmanager
def capture_neurons(sites: Sequence[nn.Module], neurons: dict[int, Tensor]) -> Iterator[dict[int, Tensor]]:
    """Keep a detached copy of chosen neurons' activations from the latest forward pass.

    `neurons` maps layer → neuron indices; the yielded dict maps layer → [batch, seq, k]
    (float32), overwritten by each forward pass. The model's outputs are untouched.
    """
    captured: dict[int, Tensor] = {}

    def make(layer: int, index: Tensor) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            act = _output_tensor(output).detach()
            captured[layer] = act.index_select(-1, index.to(act.device)).float()

        return hook

    with _hooks([(sites[layer], "forward", make(layer, index), {}) for layer, index in neurons.items()]):
        yield captured


@contextmanager
def sum_selected(sites: Sequence[nn.Module], selected: Tensor) -> Iterator[list[Tensor | None]]:
    """Add up each site's activations over the positions `selected` (bool [batch, seq]) of one
    forward pass: the yielded list holds, per layer, a float64 [neurons] sum once the pass ran."""
    sums: list[Tensor | None] = [None] * len(sites)

    def make(i: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            act = _output_tensor(output).detach()
            if act.dim() != 3 or act.shape[:2] != selected.shape:
                raise SteerError("the activations are not [batch, seq, neurons] like the selected positions")
            sums[i] = act[selected.to(act.device)].sum(0, dtype=torch.float64).cpu()

        return hook

    with _hooks([(site, "forward", make(i), {}) for i, site in enumerate(sites)]):
        yield sums


@dataclass(frozen=True)
class NeuronPush:
    """A push added at the positions that predict new tokens: `x → x + factor·push·gate(x)` where
    `mask` is set, with `gate(x) = clamp((toward − x) / span, 0, 1)` when `toward` is given — the
    share of the neuron's way to `toward` (its value under the instruction) the token still lacks —
    and 1 otherwise. Tensors are [layers, neurons]; `span` is nonzero wherever `mask` is set."""

    mask: Tensor
    push: Tensor
    toward: Tensor | None = None
    span: Tensor | None = None

    @property
    def layers(self) -> list[int]:
        return self.mask.any(1).nonzero().flatten().tolist()

    def __len__(self) -> int:
        return int(self.mask.sum())


def _last_position(act: Tensor, edited: Tensor) -> Tensor:
    """`edited` at the last position of a multi-token pass (the one that predicts the next token), `act` elsewhere."""
    if act.dim() != 3:
        raise SteerError("pushes at generated positions need [batch, seq, neurons] activations")
    if act.shape[1] == 1:
        return edited
    keep = torch.zeros(act.shape[1], 1, dtype=torch.bool, device=act.device)
    keep[-1] = True
    return torch.where(keep, edited, act)


@contextmanager
def push_neurons(
    sites: Sequence[nn.Module], push: NeuronPush, factor: float = 1.0, rows: Tensor | None = None
) -> Iterator[None]:
    """Apply `push` (times `factor`) at the last position of each forward pass, on the batch rows
    `rows` (bool [batch]; None: every row); returns new tensors, never edits in place."""

    def make(layer: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> Any:
            act = _output_tensor(output)
            mask = push.mask[layer].to(act.device)
            add = push.push[layer].to(act.device, torch.float32) * factor  # in float32, cast once
            if push.toward is not None and push.span is not None:
                toward = push.toward[layer].to(act.device, torch.float32)
                span = push.span[layer].to(act.device, torch.float32)
                add = add * ((toward - act.float()) / span).clamp(0, 1)
            edited = _last_position(act, torch.where(mask, (act.float() + add).to(act.dtype), act))
            if rows is not None:
                edited = torch.where(rows.to(act.device).reshape(-1, 1, 1), edited, act)
            return (edited, *output[1:]) if isinstance(output, tuple) else edited

        return hook

    with _hooks([(sites[layer], "forward", make(layer), {}) for layer in push.layers]):
        yield


@contextmanager
def project_out(
    sites: Sequence[nn.Module], directions: Tensor, share: float = 1.0, rows: Tensor | None = None
) -> Iterator[None]:
    """Remove `share` of each layer's activation along its unit direction (`directions`: [layers,
    neurons], rows of zeros skip a layer) at every position: `x → x − share·(x·d)d`, so at share 1
    the activations are orthogonal to d. `rows` as in `push_neurons`."""
    norms = directions.float().norm(dim=1, keepdim=True)
    units = torch.where(norms > 0, directions.float() / norms.clamp_min(1e-12), torch.zeros_like(directions.float()))

    def make(layer: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> Any:
            act = _output_tensor(output)
            unit = units[layer].to(act.device, torch.float32)
            along = (act.float() @ unit).unsqueeze(-1)
            edited = (act.float() - share * along * unit).to(act.dtype)
            if rows is not None:
                edited = torch.where(rows.to(act.device).reshape(-1, *([1] * (act.dim() - 1))), edited, act)
            return (edited, *output[1:]) if isinstance(output, tuple) else edited

        return hook

    layers = (norms.flatten() > 0).nonzero().flatten().tolist()
    with _hooks([(sites[layer], "forward", make(layer), {}) for layer in layers]):
        yield


@contextmanager
def capture_block_inputs(
    blocks: Sequence[nn.Module], first: int
) -> Iterator[list[tuple[tuple[Any, ...], dict[str, Any]]]]:
    """Each block's inputs from `first` up, as called in the pass inside the block (detached): the
    hidden state entering block `first`, and every block's other inputs (its own hidden state is
    recomputed from the one below, so it is not kept: `None` in its place)."""
    store: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def keep(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        detach = lambda v: v.detach() if isinstance(v, Tensor) else v  # noqa: E731
        if any(type(v).__name__.endswith("Cache") for v in kwargs.values() if v is not None):
            raise SteerError(
                "a decoder block was called with a KV cache; capturing its inputs needs a pass without one"
            )
        args = tuple(detach(a) if i == 0 and not store else None if i == 0 else detach(a) for i, a in enumerate(args))
        if "hidden_states" in kwargs and store:
            kwargs = {**kwargs, "hidden_states": None}
        store.append((args, {k: detach(v) for k, v in kwargs.items()}))

    with _hooks([(block, "pre", keep, {"with_kwargs": True}) for block in blocks[first:]]):
        yield store
