"""The batch plan's row layout: candidate k's rows, its edited copy, its guidance pair and the
per-row spreading of per-text values, against offsets computed by hand."""

from __future__ import annotations

import torch

from steer.generation.plan import BatchLayout


def test_rows_of_guided_and_plain_candidates_follow_each_other() -> None:
    layout = BatchLayout(3, (True, False, True))  # 3 texts: guided (2 copies), plain (1), guided (2)
    assert layout.offsets == (0, 6, 9) and layout.total == 15 and layout.copies == 5
    assert [layout.edited_start(k) for k in range(3)] == [3, 6, 12]  # a guided edit hits its second copy
    assert torch.equal(layout.edit_rows(1), torch.arange(15).ge(6) & torch.arange(15).lt(9))
    assert layout.guidance_pair(2, 0.1, 1.0) == (9, 12, 3, 0.1, 1.0)
    assert layout.per_row(["a", "b", "c"]) == ["a", "b", "c"] * 5
    assert [layout.row(k, 2) for k in range(3)] == [2, 8, 11]


def test_a_batch_of_one_plain_candidate_needs_no_row_mask() -> None:
    layout = BatchLayout(4, (False,))
    assert layout.total == 4 and layout.copies == 1 and layout.edit_rows(0) is None
    guided = BatchLayout(4, (True,))
    assert guided.edit_rows(0) is not None and guided.edit_rows(0).tolist() == [False] * 4 + [True] * 4
