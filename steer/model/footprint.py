"""What decoding a batch holds in memory, estimated from the model's config, and what the machine has free.

Why: a server must refuse work it cannot hold before it starts it (a batch that runs the machine out
of memory takes every other request down with it). The estimate is the key/value cache of every row
at the batch's longest length plus the logits of a step (the scores, their processed copy and the
softmax); the weights are loaded already and are not counted.
"""

from __future__ import annotations

from typing import Any

ROWS_PER_TEXT = 3  # the prompt's row, and a contrast or guidance row, and an instruction-contrast row at most
LOGIT_COPIES = 4  # a step's scores, their processed copy, the softmax and a sampling buffer


def kv_bytes_per_token(config: Any, element_bytes: int = 4) -> int:
    """Bytes the key/value cache holds per row and token, from a transformers config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = int(getattr(text, "num_hidden_layers", 0) or getattr(text, "n_layer", 0) or 0)
    hidden = int(getattr(text, "hidden_size", 0) or getattr(text, "n_embd", 0) or 0)
    heads = int(getattr(text, "num_attention_heads", 0) or getattr(text, "n_head", 0) or 1)
    kv_heads = int(getattr(text, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(text, "head_dim", 0) or hidden // heads)
    return 2 * layers * kv_heads * head_dim * element_bytes


def batch_bytes(config: Any, rows: int, tokens: int, element_bytes: int = 4) -> int:
    """An estimate of the memory decoding `rows` rows of `tokens` tokens (prompt and reply) takes."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(getattr(text, "vocab_size", 0) or 0)
    return rows * (tokens * kv_bytes_per_token(config, element_bytes) + LOGIT_COPIES * vocab * 4)


def available_bytes(device: Any = None) -> int | None:
    """Memory free now on `device` (the GPU's free memory, or the machine's MemAvailable); None if unknown."""
    if device is not None and getattr(device, "type", str(device)) == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)  # the caching allocator's reserved, unused memory is free too
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
