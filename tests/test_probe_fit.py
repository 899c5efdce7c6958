"""The probe's fit settings (`steer.probe_fit`)."""

from __future__ import annotations

import pytest
import torch
from conftest import FORMAL, INFORMAL, make_lm

from steer.errors import SteerError
from steer.probe_fit import PROBE_LIMIT
from steer.profiling.corpus import Corpus
from steer.profiling.probe import build_probe, read_features
from steer.profiling.profile import profile_styles


def test_probe_c_is_the_logistic_regressions_inverse_l2_strength() -> None:
    """The probe's weights equal scikit-learn's fit with C = c on the same standardised features,
    and a smaller c pulls them towards 0 (the stronger prior cross-validation chose)."""
    from sklearn.linear_model import LogisticRegression

    lm = make_lm("llama")
    styles = {"formal": FORMAL * 4, "informal": INFORMAL * 4}
    profile = profile_styles(lm, [Corpus(s, tuple(t), s, s) for s, t in styles.items()])
    norms = []
    for c in (1.0, 0.01):
        probe = build_probe(lm, profile, styles, top=8, c=c, heldout=0.0, compare_judges=False)
        texts = [t for s in probe.styles for t in styles[s]]
        x = read_features(lm, texts, probe.layers, probe.neurons).activations
        labels = [s for s in probe.styles for _ in styles[s]]
        reference = LogisticRegression(max_iter=3000, C=c).fit(
            ((x - x.mean(0)) / x.std(0).clamp_min(1e-6)).numpy(), labels
        )
        torch.testing.assert_close(probe.coef, torch.tensor(reference.coef_, dtype=torch.float32), rtol=1e-3, atol=1e-4)
        assert probe.fit == {"top": 8, "limit": PROBE_LIMIT, "c": c}
        norms.append(float(probe.coef.norm()))
    assert norms[1] < norms[0]
    for kwargs, message in (
        ({"c": float("nan")}, "`c` must be a finite number > 0, got nan"),
        ({"c": 0.0}, "`c` must be a finite number > 0"),
        ({"c": float("inf")}, "`c` must be a finite number > 0"),
        ({"top": 0}, "`top` must be at least 1"),
        ({"limit": 1}, "`limit` must be at least 2"),
    ):
        with pytest.raises(SteerError, match=message):
            build_probe(lm, profile, styles, compare_judges=False, **kwargs)
