"""Result tables (`steer.lab.tables`)."""

from __future__ import annotations


def test_rerank_choices_list_rungs_by_strength_then_guidance_shots_and_keep_words() -> None:
    from steer.lab.tables import _rung_order

    counts = [("3k4", 1), ("f3", 1), ("3", 1), ("u3", 1), ("0", 1), ("1", 1)]
    assert [name for name, _ in sorted(counts, key=_rung_order)] == ["0", "1", "u3", "3", "3k4", "f3"]
