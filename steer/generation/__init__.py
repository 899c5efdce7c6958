"""Phase 2, generation: prompts plus neuron edits, guidance or contrast, the decoding loop and its
guards, reply cleaning, few-shot examples, the one-call `rewrite`/`apply`, export, and rerank (which
selects among candidates with the scoring layer's selection models, never evaluation's)."""
