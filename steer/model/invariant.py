"""Batch-invariant passes: a score that a record carries is computed for its text alone, on one thread,
so it never depends on which texts shared its batch, how many workers ran, or how many cores ran them.

float32 matrix products round differently with the batch's shape and the thread count (the kernels
block and split their reductions by both): about 1e-7 relative on a probe score, 1e-6 on the 135M's
logits. Records keep every score to the full float, and a run on Ray, on several processes and here
must write the same bytes, so the passes whose numbers go into records read one text per forward
pass with torch's intra-op threads set to one, and restore the thread count afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op thread count set to one inside the block, and put back as it was after it
    (also on an exception)."""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
