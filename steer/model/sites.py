"""Where a model keeps the pieces steer touches — each block's MLP activation (one value per neuron),
the projection that reads it, the blocks, the final norm and the LM head — found from the model's own
module tree, with a table of known families as the fast path.

Why: users bring their own model. A family's module names are guessed from the tree (a list of
`num_hidden_layers` blocks; in each, the MLP's activation module and the linear layer that reads
its output), the LM head is `get_output_embeddings()`, and a probe forward pass
(`steer.model.hooks.probe_activation_sites`) then checks that every activation fires once per pass.
Mixture-of-experts blocks are refused in one line: their neurons live inside routed experts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from steer.errors import SteerError

ACTIVATION_OVERRIDE_OPTION = "`activation_path` 'model.layers.{layer}.mlp.act_fn'"
MLP_NAMES = ("mlp", "feed_forward", "ffn", "mlp_block")  # a block's MLP; none: the block holds it (OPT)
ACTIVATION_NAMES = ("act_fn", "act", "activation_fn", "activation", "gelu_impl", "act_func", "activation_function")
DOWN_NAMES = ("down_proj", "c_proj", "dense_4h_to_h", "fc2", "fc_out", "w2", "wo", "o_proj")
NORM_NAMES = ("norm", "final_layernorm", "final_layer_norm", "ln_f", "final_norm", "norm_f")
EXPERT_NAMES = ("experts", "block_sparse_moe", "moe")


@dataclass(frozen=True)
class Architecture:
    """Where one model family keeps the pieces `steer` touches; `{layer}` is the block index.

    `activation` is the module whose output is the gated activation (one value per neuron);
    zeroing neuron j there equals zeroing input column j of `down_proj`. `down_proj_transposed`
    marks GPT-2's Conv1D, which stores that weight as [in, out].
    """

    model_type: str
    activation: str
    down_proj: str | None
    block: str | None
    final_norm: str | None
    lm_head: str | None = "lm_head"
    down_proj_transposed: bool = False
    project_out: str | None = None  # a projection between the final norm and the LM head (OPT-350m's)


def _llama_like(model_type: str) -> Architecture:
    return Architecture(
        model_type,
        activation="model.layers.{layer}.mlp.act_fn",
        down_proj="model.layers.{layer}.mlp.down_proj",
        block="model.layers.{layer}",
        final_norm="model.norm",
    )


ARCHITECTURES: dict[str, Architecture] = {
    **{
        t: _llama_like(t)
        for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2")
    },
    # Phi-3 fuses gate and up projections; the gate half is chunked off before `activation_fn`.
    "phi3": Architecture(
        "phi3",
        activation="model.layers.{layer}.mlp.activation_fn",
        down_proj="model.layers.{layer}.mlp.down_proj",
        block="model.layers.{layer}",
        final_norm="model.norm",
    ),
    "gpt2": Architecture(
        "gpt2",
        activation="transformer.h.{layer}.mlp.act",
        down_proj="transformer.h.{layer}.mlp.c_proj",
        block="transformer.h.{layer}",
        final_norm="transformer.ln_f",
        down_proj_transposed=True,
    ),
    "gpt_neox": Architecture(
        "gpt_neox",
        activation="gpt_neox.layers.{layer}.mlp.act",
        down_proj="gpt_neox.layers.{layer}.mlp.dense_4h_to_h",
        block="gpt_neox.layers.{layer}",
        final_norm="gpt_neox.final_layer_norm",
        lm_head="embed_out",
    ),
    # OPT applies the activation on the decoder layer itself, on [batch*seq, neurons].
    "opt": Architecture(
        "opt",
        activation="model.decoder.layers.{layer}.activation_fn",
        down_proj="model.decoder.layers.{layer}.fc2",
        block="model.decoder.layers.{layer}",
        final_norm="model.decoder.final_layer_norm",
    ),
}


def architecture_for(model_type: str, activation_path: str | None = None) -> Architecture:
    """The table's entry for `model_type` (with a user's `activation_path` override), without a
    model to look at; `find_architecture` looks at the model itself."""
    known = ARCHITECTURES.get(model_type)
    if activation_path is not None:
        _check_placeholder(activation_path)
        if known is not None:
            return replace(known, activation=activation_path)
        return Architecture(model_type, activation_path, down_proj=None, block=None, final_norm=None, lm_head=None)
    if known is None:
        raise SteerError(
            f"unknown architecture {model_type!r}; known: {', '.join(sorted(ARCHITECTURES))}; "
            f"for another model pass {ACTIVATION_OVERRIDE_OPTION} (the module whose output is the gated activation)"
        )
    return known


def _check_placeholder(activation_path: str) -> None:
    import string

    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(activation_path) if name is not None}
    except ValueError:
        fields = {"?"}
    if fields - {"layer"}:
        raise SteerError(
            f"`activation_path` {activation_path!r} may hold only the '{{layer}}' placeholder; "
            f"use e.g. {ACTIVATION_OVERRIDE_OPTION}"
        )
    if "{layer}" not in activation_path:
        raise SteerError(
            f"`activation_path` {activation_path!r} has no '{{layer}}' placeholder; "
            f"use e.g. {ACTIVATION_OVERRIDE_OPTION}"
        )


def find_architecture(model: Any, activation_path: str | None = None, hint: str | None = None) -> Architecture:
    """Where `model` keeps its pieces: the table's entry when its paths exist in the model, else
    found from the module tree; the LM head is always the model's own output embeddings, and
    `activation_path` (a user's override, with `{layer}`) replaces the activation found. `hint` (a
    profile's recorded activation path) replaces it only where the model has that module: another
    family's profile is then told apart by its fingerprint, in one line."""
    if activation_path is not None:
        _check_placeholder(activation_path)
    elif hint is not None and "{layer}" in hint and _has(model, hint.format(layer=0)):
        activation_path = hint
    model_type = str(getattr(model.config, "model_type", type(model).__name__))
    known = ARCHITECTURES.get(model_type)
    try:
        arch = known if known is not None and _exists(model, known) else _discover(model, model_type, activation_path)
    except SteerError:
        if activation_path is None:
            raise
        # the user named the activation; the rest is unknown (export, contrast and training refuse)
        arch = Architecture(model_type, activation_path, down_proj=None, block=None, final_norm=None, lm_head=None)
    arch = replace(arch, lm_head=_name_of(model, _output_embeddings(model)), project_out=_project_out(model, arch))
    return replace(arch, activation=activation_path) if activation_path is not None else arch


def _project_out(model: Any, arch: Architecture) -> str | None:
    """The decoder's `project_out` between its final norm and the LM head, where it has one."""
    parent = (arch.block or "").rpartition(".{layer}")[0].rpartition(".")[0]
    path = f"{parent}.project_out" if parent else "project_out"
    return path if arch.block is not None and _has(model, path) else None


def _exists(model: Any, arch: Architecture) -> bool:
    paths = [arch.activation, arch.down_proj, arch.block]
    return all(_has(model, p.format(layer=0)) for p in paths if p is not None) and (
        arch.final_norm is None or _has(model, arch.final_norm)
    )


def _has(model: Any, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


def _output_embeddings(model: Any) -> Any:
    try:
        return model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None


def _name_of(model: Any, module: Any) -> str | None:
    if module is None:
        return None
    return next((name for name, m in model.named_modules() if m is module and name), None)


def _layer_count(model: Any) -> int:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0) or 0)


def _is_activation(name: str, module: Any) -> bool:
    """An activation module: named like one, or a class of torch's or transformers' activations."""
    kind = type(module)
    where = kind.__module__
    return name in ACTIVATION_NAMES or where.startswith(("torch.nn.modules.activation", "transformers.activations"))


def _discover(model: Any, model_type: str, activation_path: str | None) -> Architecture:
    import torch.nn as nn

    count = _layer_count(model)
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == count and n]
    if not count or not lists:
        raise SteerError(
            f"found no list of {count} blocks in this {model_type!r} model; pass {ACTIVATION_OVERRIDE_OPTION} "
            "(the module whose output is the MLP activation)"
        )
    blocks_name, blocks = min(lists, key=lambda item: item[0].count("."))  # the outermost: the decoder's blocks
    first = blocks[0]
    expert = next((n for n, _ in first.named_modules() if n.split(".")[-1] in EXPERT_NAMES), None)
    if expert is not None and activation_path is None:
        raise SteerError(
            f"{model_type!r} is a mixture-of-experts model (its blocks route tokens to experts, {expert!r}); "
            "steer's neurons are one MLP per block, so profiling it is not supported yet"
        )
    mlp_name = next((n for n in MLP_NAMES if isinstance(getattr(first, n, None), nn.Module)), None)
    mlp = getattr(first, mlp_name) if mlp_name else first
    prefix = f"{blocks_name}.{{layer}}" + (f".{mlp_name}" if mlp_name else "")
    children = dict(mlp.named_children())
    acts = [n for n in children if _is_activation(n, children[n])]
    acts.sort(key=lambda n: ACTIVATION_NAMES.index(n) if n in ACTIVATION_NAMES else len(ACTIVATION_NAMES))
    if not acts and activation_path is None:
        raise SteerError(
            f"found no MLP activation module in this {model_type!r} model's blocks (its MLP may call the activation "
            f"as a function); pass {ACTIVATION_OVERRIDE_OPTION} naming a module whose output is the MLP activation"
        )
    linear = [n for n, m in children.items() if hasattr(m, "weight") and getattr(m.weight, "dim", lambda: 0)() == 2]
    down = next((n for n in DOWN_NAMES if n in linear), None)
    parent_name = blocks_name.rpartition(".")[0]
    parent = model.get_submodule(parent_name) if parent_name else model
    norms = dict(parent.named_children())
    norm = next((n for n in NORM_NAMES if n in norms), None) or next(
        (n for n, m in norms.items() if "norm" in type(m).__name__.lower()), None
    )  # none at all: a post-norm model (OPT-350m), whose head reads the last block's output
    join = lambda n: f"{parent_name}.{n}" if parent_name else n  # noqa: E731
    return Architecture(
        model_type,
        activation=f"{prefix}.{acts[0]}" if acts else str(activation_path),
        down_proj=f"{prefix}.{down}" if down else None,
        block=f"{blocks_name}.{{layer}}",
        final_norm=join(norm) if norm else None,
        down_proj_transposed=down is not None and type(children[down]).__name__ == "Conv1D",
    )
