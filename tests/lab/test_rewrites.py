"""A run's rewrites (`steer.lab.rewrites`) go through the rewrite service."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import _config

from steer.lab.experiment import load_experiment


def test_a_run_decodes_through_the_rewrite_service_with_all_its_training_texts(
    tmp_path: Path, saved_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`steer run` builds no rewriter of its own: its recipes decode through `RewriteService`, whose job
    names the run's training texts (all of them, beyond `[profile] limit`) for few-shot examples and
    keep-words — the same rewrites a service made by hand for that job gives (Ray workers get the job)."""
    from dataclasses import replace

    from steer.lab.runner import Runner
    from steer.model.loading import load_model
    from steer.rewriting.service import RewriteJob, RewriteService

    exp = load_experiment(_config(tmp_path, saved_model, "[profile]\nlimit = 3"))
    lm = load_model(str(saved_model), progress=False)
    runner = Runner(exp, tmp_path / "out", lm, progress=False)
    direction = exp.directions[0]
    recipe = replace(exp.base, mode="prompt", examples=2, keep_words=2.0)
    calls: list[int] = []
    original = RewriteService.candidates
    monkeypatch.setattr(RewriteService, "candidates", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    outputs = runner.rewrites.transfer(direction, recipe, "shots")
    assert calls == [1]
    corpora = runner.rewrites.service(direction).job.corpora
    assert corpora is not None and dict(corpora) == {s: tuple(t) for s, t in exp.train.items()}
    assert all(len(t) > 3 for _, t in corpora)  # beyond what was profiled
    job = RewriteJob(str(runner.artefacts.profile_file()), direction.source, direction.target, recipe, corpora=corpora)
    by_hand = RewriteService(job, loaded=(runner.artefacts.profile(), lm)).results(list(direction.texts))
    assert outputs == [r.output for r in by_hand]
    assert job.key()[-1] != replace(job, corpora=(("formal", ("x",)), ("informal", ("y",)))).key()[-1]
