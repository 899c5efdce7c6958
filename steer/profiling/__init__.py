"""Phase 1, profiling: style corpora, activation counts per style (the profile), the selection of
style-specific neurons, the style probe read from those neurons, and sharing profiles on the Hub."""
