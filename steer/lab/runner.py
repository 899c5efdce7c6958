"""`steer run` / `steer tune`: one TOML config → profile, transfer in several modes, evaluate, report.

A run directory holds `profile.safetensors`, `outputs/<from>-<to>.<mode>.jsonl` (the output store,
`steer.lab.store.RunStore`), `results.json`, `results.md` (the paper-style table), `samples.md` and
`chart.png`. The runner only composes the parts, each with one job: the run's profile and probe
(`steer.lab.artefacts`), the recipe of each direction × mode (`steer.lab.recipes`), the rewrites
through the store (`steer.lab.rewrites`), the scorers built up front (`steer.lab.scorers`) and
tuning over plain functions (`steer.lab.tuning`).
Under several processes (`--processes N`, `accelerate launch`) every decoding and scoring pass is
split with `distributed.map_sharded` and only the main process writes files.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from steer.distributed import is_main_process, on_main
from steer.evaluation.metrics import evaluate
from steer.files import write_text
from steer.lab.artefacts import RunArtefacts
from steer.lab.experiment import Direction, Experiment
from steer.lab.recipes import settings_for
from steer.lab.rewrites import RunRewrites
from steer.lab.rundir import RunDir
from steer.lab.scorers import RunScorers, build_scorers
from steer.lab.store import RunStore
from steer.lab.tables import results_table, samples_markdown, write_chart
from steer.model.loading import LoadedModel
from steer.rewriting.records import RunResults, TuneResult

logger = logging.getLogger(__name__)


def measured_sha256(profile_path: str | None) -> dict[str, str | None]:
    """The sha256s of the instruction and trained files beside the profile (None for a file not
    there): push and refusal rewrites decoded with another measurement, and trained rewrites with
    another training, are not reused."""
    from steer.files import sha256_file
    from steer.profiling.instruction import instruction_path
    from steer.profiling.trained import trained_path

    if profile_path is None:
        return {"instruct": None, "trained": None}
    found = {"instruct": instruction_path(profile_path), "trained": trained_path(profile_path)}
    return {kind: sha256_file(path) if path.is_file() else None for kind, path in found.items()}


class Runner:
    """Carries one experiment through profile → transfer → evaluate, reusing finished work."""

    def __init__(
        self,
        exp: Experiment,
        out_dir: str | Path | RunDir,
        lm: LoadedModel,
        *,
        progress: bool = True,
        ray: dict[str, Any] | None = None,
    ) -> None:
        # the run directory, claimed (`RunDir.claim`: a new or empty folder, or a run's own) before the model
        # loaded when the CLI passes it; every file the run writes there is recorded in its steer-run.json
        self.dir = out_dir if isinstance(out_dir, RunDir) else RunDir.claim(out_dir)
        self.exp, self.out, self.lm = exp, self.dir.path, lm
        # decoding and scoring passes on Ray workers: `steer.rewriting.on_ray.decode_items_on_ray` options (workers,
        # gpus_per_worker, address); None: here (or on this machine's processes)
        self.ray = ray
        self.progress = progress and is_main_process()  # one progress display, the main process's
        self.store = RunStore(self.dir, lm, measured_sha256(exp.profile_path))
        self.artefacts = RunArtefacts(exp, self.dir, lm, self.log, progress=self.progress)
        self.rewrites = RunRewrites(exp, lm, self.store, self.artefacts, self.log, progress=self.progress, ray=ray)

    def log(self, message: str) -> None:
        """Progress messages go to `logging` (INFO); the CLI shows them unless -q."""
        if self.progress:
            logger.info(message)

    @functools.cached_property
    def scorers(self) -> RunScorers:
        """Evaluation's and tuning's scorers, built once (after the profile: Ray workers load its model)."""
        return build_scorers(self.exp, self.lm, self._engine, self.log)

    def _engine(self, encoder: str) -> Any:
        """With `ray` options, evaluation's per-text model passes run on Ray workers (`RayPasses`,
        similarity under `encoder`); else None: here."""
        if self.ray is None:
            return None
        from steer.lab.ray_passes import RayPasses

        options = (*sorted(self.ray.items()), ("progress", self.progress))
        return RayPasses(str(self.artefacts.profile_file()), encoder, str(self.lm.device), options)

    def score(self, direction: Direction, outputs: list[str], *, selecting: bool = False) -> dict[str, Any]:
        """The config's metrics of `outputs` (`selecting`: with tuning's selection scorers)."""
        refs = [list(r) for r in direction.references] or None
        return evaluate(
            outputs,
            sources=list(direction.texts),
            references=refs,
            target=direction.target,
            metrics=self.exp.metrics,
            scorers=self.scorers.selection if selecting else self.scorers.evaluation,
            instruction=self.rewrites.instruction(direction),
            source_style=direction.source,
        )

    def run(self, tuned: TuneResult | None = None) -> RunResults:
        """Every direction × mode: transfer, evaluate, and write the report files."""
        self.artefacts.profile()
        rows, samples = [], {}
        for direction in self.exp.directions:
            samples[direction.name] = {"source": list(direction.texts[:5])}
            for mode in self.exp.modes:
                extra: dict[str, Any] = {}
                settings = settings_for(self.exp, mode, direction, tuned, self.out / "tuned.json")
                if mode == "rerank":
                    outputs, extra["rerank"] = self.rewrites.rerank(direction)
                    extra["recipe"] = f"rerank λ ∈ {{{', '.join(extra['rerank']['ladder'])}}}"
                else:
                    outputs = self.rewrites.transfer(direction, settings, mode)
                metrics = self.score(direction, outputs)
                rows.append(
                    {
                        "direction": direction.name,
                        "source": direction.source,
                        "target": direction.target,
                        "mode": mode,
                        "settings": settings.to_dict(),
                        "metrics": metrics,
                        **extra,
                    }
                )
                samples[direction.name][mode] = outputs[:5]
        classifier = self.scorers.evaluation.classifier
        results = RunResults(
            experiment=self.exp.name,
            model_id=self.lm.model_id,
            fingerprint=self.lm.fingerprint,
            rows=rows,
            judge=classifier.name,
            judge_heldout_accuracy=dict(self.scorers.judge_accuracies),
            classifier_heldout_accuracy=classifier.heldout_accuracy if classifier else None,
            tuned={name: asdict(c) for name, c in tuned.chosen.items()} if tuned is not None else {},
        )

        def write_report() -> None:
            files = {
                "results.json": results.write,
                "results.md": lambda p: write_text(p, results_table(results.to_dict())),
                "samples.md": lambda p: write_text(p, samples_markdown(samples)),
                "chart.png": lambda p: write_chart(p, rows),
            }
            for name in files:  # every file checked before any is written: the report is whole or not written
                self.dir.check(self.out / name)
            for name, writer in files.items():
                self.dir.write(self.out / name, writer)

        on_main(write_report)
        return results

    def tune(self) -> TuneResult:
        """Try each candidate recipe per direction on the tuning texts; keep the best (`steer.lab.tuning`)."""
        from steer.lab.tuning import tune

        selection = self.scorers.selection.classifier
        evaluating = self.scorers.evaluation.classifier.name
        self.log(f"tuning selects with the {selection.name} judge (evaluation reports with {evaluating})")
        score = functools.partial(self.score, selecting=True)
        tuned = tune(self.exp, self.rewrites.transfer, score, selection.name)
        on_main(lambda: self.dir.write(self.out / "tuned.json", tuned.write))
        return tuned
