"""Style judges (`steer.scoring.judges`)."""

from __future__ import annotations

import pytest

from steer.errors import SteerError
from steer.scoring.judges import StyleClassifier


def test_classifier_separates_a_trivial_corpus() -> None:
    a = [f"the cat number {i} purrs softly" for i in range(60)]
    b = [f"dude {i} lol gimme that asap" for i in range(60)]
    clf = StyleClassifier({"cats": a, "slang": b})
    assert clf.heldout_accuracy == 1.0 and clf.heldout_size == 12
    assert clf.accuracy(["a cat purrs", "lol dude"], "cats") == 0.5
    with pytest.raises(SteerError, match="not 'dogs'"):
        clf.accuracy(["x"], "dogs")
