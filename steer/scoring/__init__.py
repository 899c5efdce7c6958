"""Scoring text, shared by the probe, rerank and evaluation: sentence encoders, per-text NLL and
fluency, style judges, and the faithfulness rules (meta, near-loop, junk, content kept/invented).

Each piece is written once here; who may use which is the rule "what selects never grades":
rerank and tuning select with `SELECTION_ENCODER` (MiniLM) and the style probe, evaluation reports
with `EVALUATION_ENCODER` (all-mpnet-base-v2) and its own judge.
"""
