"""The model layer: loading a causal LM (embedded GGUF, Hub id, local directory), where its MLP
neurons live per architecture, the hooks that read and edit them, and the one padding helper."""
