"""Phase 3, evaluation: metrics over rewrites (BLEU/chrF, accuracy, similarity, fluency, J, the
faithfulness rates, usable%), graded with the scoring layer's evaluation models, never rerank's."""
