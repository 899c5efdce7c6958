"""`steer run` / `steer tune`: one TOML config → profile, transfer in several modes, evaluate, report.

A run directory holds `profile.safetensors`, `outputs/<from>-<to>.<mode>.jsonl` (the output store,
`steer.runs.store.RunStore`), `results.json`, `results.md` (the paper-style table), `samples.md` and
`chart.png`. The runner plans recipes, asks the store for what is already made, decodes the rest
and scores: an interrupted run resumes from the outputs it finished.
Under several processes (`--processes N`, `accelerate launch`) every decoding and scoring pass is
split with `distributed.map_sharded` and only the main process writes files.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from steer.distributed import is_main_process, map_sharded, on_main
from steer.evaluation.metrics import Scorers, evaluate
from steer.files import write_text
from steer.generation.steerer import Steerer, TransferResult, TransferSettings, echo_filter, finish_output
from steer.model.loading import LoadedModel
from steer.profiling.corpus import Corpus, corpus_hash
from steer.profiling.profile import StyleProfile
from steer.runs.config import Direction, Experiment, mode_settings
from steer.runs.records import (
    RunResults,
    TransferRecord,
    TuneResult,
)
from steer.runs.report import results_table, samples_markdown, write_chart
from steer.runs.rundir import RunDir
from steer.runs.store import RunStore, rerank_key
from steer.scoring.encoders import EVALUATION_ENCODER, SELECTION_ENCODER, shared_embedder
from steer.scoring.faithfulness import instruction_text
from steer.scoring.judges import build_judge

logger = logging.getLogger(__name__)


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
        # decoding passes on Ray workers: `steer.runs.raydata.decode_on_ray` options (workers, gpus_per_worker,
        # address); None decodes here (or on this machine's processes)
        self.ray = ray
        self.progress = progress and is_main_process()  # one progress display, the main process's
        self._scorers: Scorers | None = None
        self._profile_path: Path | None = None
        self._probe_path: Path = self.out / "probe.safetensors"  # or the one beside the configured profile
        self._selector: Scorers | None = None
        self.judge_accuracies: dict[str, float] = {}
        self._profile: StyleProfile | None = None
        self._examples: Any = None  # steer.generation.examples.ExampleSource, built on first use
        self._markers: Any = None  # steer.generation.markers.StyleMarkers, with it
        self.store = RunStore(self.dir, lm)

    def log(self, message: str) -> None:
        """Progress messages go to `logging` (INFO); the CLI shows them unless -q."""
        if self.progress:
            logger.info(message)

    def profile(self) -> StyleProfile:
        """The experiment's profile: reused when its model and corpora match, else computed."""
        if self._profile is not None:
            return self._profile
        from steer.profiling.profile import profile_styles

        limit = self.exp.profile_settings.limit  # `[profile] limit`: the first texts profile; all train the judges
        train = {s: t[:limit] for s, t in self.exp.train.items()}
        hashes = {s: corpus_hash(t) for s, t in train.items()}
        candidates = [Path(self.exp.profile_path)] if self.exp.profile_path else []
        candidates.append(self.out / "profile.safetensors")
        for path in candidates:
            if path.is_file():
                prof = StyleProfile.load(path)
                same = (
                    prof.fingerprint == self.lm.fingerprint
                    and {s: m.get("sha256") for s, m in prof.corpora.items()} == hashes
                )
                if same:
                    self.log(f"reusing profile {path}")
                    self._profile, self._profile_path = prof, path
                    return prof
        corpora = [Corpus(s, t, self.exp.train_sources[s], hashes[s]) for s, t in train.items()]
        prof = profile_styles(self.lm, corpora, self.exp.profile_settings, progress=self.progress)
        on_main(lambda: self.dir.write(self.out / "profile.safetensors", lambda p: prof.save(p, force=True)))
        self._profile, self._profile_path = prof, self.out / "profile.safetensors"
        return prof

    def profile_file(self) -> Path:
        """The file of the experiment's profile (`profile`: the configured one, or the run's own)."""
        self.profile()
        if self._profile_path is None:
            raise RuntimeError("profile() set no profile file")
        return self._profile_path

    def probe(self) -> Any:
        """The profile's style probe for rerank: the one beside a configured profile (`steer probe`'s
        `X.probe.safetensors`), else `probe.safetensors` in the run directory — each taken only when
        made from this profile with the default fit; else built again into the run directory."""
        from steer.config import probe_fit
        from steer.files import sha256_file
        from steer.profiling.probe import StyleProbe, build_probe, probe_path

        profile_file = self.profile_file()
        digest = sha256_file(profile_file)
        path = self.out / "probe.safetensors"
        beside = [probe_path(profile_file)] if profile_file != self.out / "profile.safetensors" else []
        for candidate in [*beside, path]:
            if candidate.is_file():
                probe = StyleProbe.load(candidate)
                if (probe.profile_sha256, probe.fingerprint, probe.fit) == (digest, self.lm.fingerprint, probe_fit()):
                    self.log(f"reusing style probe {candidate}")
                    self._probe_path = candidate
                    return probe
        self.log("building the style probe from the train corpora")
        probe = build_probe(self.lm, self.profile(), dict(self.exp.train), profile_sha256=digest)
        on_main(lambda: self.dir.write(path, lambda p: probe.save(p, force=True)))
        self._probe_path = path
        judges = ", ".join(f"{k} {v:.3f}" for k, v in probe.judges_heldout_accuracy.items())
        self.log(f"style probe: held-out accuracy {probe.heldout_accuracy:.3f} (text judges: {judges})")
        return probe

    def rerank(self, direction: Direction, label: str = "rerank") -> tuple[list[str], dict[str, Any]]:
        """Steer-and-rerank outputs for one direction and the chosen λ counts: the ladder's rungs
        (`rungs`) ranked by the profile's style probe, similarity and fluency (`steer.generation.rerank`)."""
        from steer.files import sha256_file
        from steer.generation.rerank import Reranker, RerankSettings, rank_block

        settings = RerankSettings(
            self.exp.rerank["ladder"],
            mode_settings("guided", self.exp.base),
            self.exp.rerank["length_weight"],
            self.exp.rerank["style_exponent"],
            self.exp.rerank.get("examples", RerankSettings.examples),
            self.exp.rerank.get("rung_weights"),
            self.exp.rerank.get("usable_first", RerankSettings.usable_first),
        )
        probe = self.probe()
        rungs, decoded = self.rungs(direction, settings.ladder, label, settings.examples)
        texts = direction.texts
        rank = functools.partial(rank_block, direction.target, settings, rungs, self.instruction(direction))
        blocks = [(texts[i], [d[i] for d in decoded]) for i in range(len(texts))]
        if self.ray is not None:  # on Ray workers that load the profile, model, probe and encoder once
            from steer.runs.rayscoring import rank_on_ray

            ranked = rank_on_ray(
                str(self._profile_path), str(self._probe_path), rank, blocks,
                device=str(self.lm.device), progress=self.progress, **self.ray,
            )  # fmt: skip
        else:
            reranker = Reranker(self.steerer(), probe, shared_embedder(SELECTION_ENCODER))
            ranked = map_sharded(lambda part: rank(reranker, part), blocks, size=lambda block: len(block[0]))
        key = rerank_key(direction, rungs, settings, sha256_file(self._probe_path))
        records = [self.store.record(key, r, direction, label, rerank=r.info["rerank"]) for r in ranked]
        self.store.write(direction, label, records)
        chosen: dict[str, int] = {}
        for r in records:
            name = (r.rerank or {})["rung"]
            chosen[name] = chosen.get(name, 0) + 1
        return [r.output for r in records], {
            "ladder": [str(r) for r in settings.ladder],
            "length_weight": settings.length_weight,
            "style_exponent": settings.style_exponent,
            "rung_weights": settings.rung_weights,
            "usable_first": settings.usable_first,
            "chosen_strengths": chosen,
            "probe_heldout_accuracy": probe.heldout_accuracy,
        }

    def rungs(
        self, direction: Direction, ladder: Sequence[Any], label: str = "rerank", examples: int = 0
    ) -> tuple[list[TransferSettings], list[list[TransferResult]]]:
        """The recipe and the outputs of every rung of a rerank ladder (`steer.generation.rerank.Rung`) on these texts.

        Each rung is an ordinary recipe — λ = 0 the `prompt` mode, else the `guided` preset at that
        strength, without guidance for an unguided rung — so rungs decoded earlier by other modes or
        by tuning are reused from `outputs/`; the missing ones are decoded together in one batch and
        saved as `<direction>.<label>-strength=<rung>.jsonl`."""
        from steer.generation.rerank import Rung

        guided = mode_settings("guided", self.exp.base)
        rungs = [Rung.parse(x) for x in ladder]
        # rung 0 is the prompt mode's own recipe (same cache key), not the prompt on the guided base
        prompt = mode_settings("prompt", self.exp.base)
        recipes = [r.recipe(guided, examples, prompt=prompt) for r in rungs]
        return recipes, self.candidates(direction, recipes, [f"{label}-strength={r}" for r in rungs])

    def candidates(
        self, direction: Direction, recipes: Sequence[TransferSettings], labels: Sequence[str]
    ) -> list[list[TransferResult]]:
        """The outputs of several recipes on these texts (result[k][i]: text i under recipe k).

        Recipes decoded earlier — by other modes, by tuning — are reused from `outputs/`; the
        missing ones are decoded together in one batch (`Steerer.transfer_candidates`) and saved
        as `<direction>.<label>.jsonl`."""
        decoded: list[list[TransferResult] | None] = []
        for recipe in recipes:
            records = self.store.find(direction, recipe)
            decoded.append(
                None
                if records is None
                else [
                    TransferResult(r.source_text, self._finish(r, recipe, direction), r.raw_output)
                    for r in records
                ]
            )  # fmt: skip
        missing = [k for k, d in enumerate(decoded) if d is None]
        if missing:
            names = ", ".join(labels[k] for k in missing)
            self.log(f"{direction.name}: {len(direction.texts)} texts × {len(missing)} candidates ({names})")
            decoded_now = self._decode(direction, [recipes[k] for k in missing], [labels[k] for k in missing])
            for j, k in enumerate(missing):
                decoded[k] = decoded_now[j]
        return [d for d in decoded if d is not None]

    def scorers(self, *, selecting: bool = False) -> Scorers:
        """The evaluation scorers: the judge (the more accurate on held-out train texts, or the
        config's `judge`), the unedited model for fluency, and the evaluation encoder (mpnet) for
        similarity.

        With `selecting=True` (tuning), the judge is a *different* one and similarity comes from
        the selection encoder (MiniLM, as in rerank) — what chooses among outputs must not be
        the classifier or encoder that reports on them.
        """
        if self._scorers is None:
            selection = shared_embedder(SELECTION_ENCODER)  # the minilm judge's features
            judge, accuracies = build_judge(dict(self.exp.train), self.exp.judge, embedder=selection)
            self.judge_accuracies = accuracies
            evaluation = shared_embedder(EVALUATION_ENCODER)
            self._scorers = Scorers(
                judge, self.lm, evaluation, engine=self._passes(EVALUATION_ENCODER), llm_judge=self._llm_judge()
            )
            self.log(
                f"judge: {judge.name} (held-out accuracy "
                + ", ".join(f"{k} {v:.3f}" for k, v in accuracies.items())
                + ")"
            )
        if not selecting:
            return self._scorers
        if self._selector is None:
            trained = getattr(self._scorers.classifier, "others", [])
            if trained:
                selector = trained[0]
            else:
                other = "tfidf" if self._scorers.classifier.name != "tfidf" else "minilm"
                selector, _ = build_judge(dict(self.exp.train), other, embedder=shared_embedder(SELECTION_ENCODER))
            self._selector = replace(
                self._scorers,
                classifier=selector,
                embedder=shared_embedder(SELECTION_ENCODER),
                allow_selection_encoder=True,
                engine=self._passes(SELECTION_ENCODER),
                llm_judge=None,  # the LLM judge grades; it never selects
            )
            evaluating = self._scorers.classifier.name
            self.log(f"tuning selects with the {selector.name} judge (evaluation reports with {evaluating})")
        return self._selector

    def _passes(self, encoder: str) -> Any:
        """With `ray` options, evaluation's per-text model passes run on Ray workers (`RayPasses`,
        similarity under `encoder`); else None: here."""
        if self.ray is None:
            return None
        from steer.runs.rayscoring import RayPasses

        self.profile()  # the profile file the workers load the model from
        options = (*sorted((self.ray or {}).items()), ("progress", self.progress))
        return RayPasses(str(self._profile_path), encoder, str(self.lm.device), options)

    def transfer(self, direction: Direction, settings: TransferSettings, label: str) -> list[str]:
        """Outputs for one direction and settings, from the store when already computed."""
        records = self.store.find(direction, settings, label)
        if records is not None:
            self.store.keep(direction, label, settings, records)
            # outputs follow the current cleaning and loop rules, re-derived from the raw replies
            return [self._finish(r, settings, direction) for r in records]
        self.log(f"{direction.name} {label}: {len(direction.texts)} texts")
        return [r.output for r in self._decode(direction, [settings], [label])[0]]

    def _decode(
        self, direction: Direction, recipes: Sequence[TransferSettings], labels: Sequence[str]
    ) -> list[list[TransferResult]]:
        """Every recipe's rewrites of the direction's texts (result[k][i]), saved as the labels' files;
        resumable per batch (`RunStore.decode`): an interrupted run decodes only what it had not."""

        def finish(record: TransferRecord, recipe: TransferSettings) -> TransferResult:
            return TransferResult(record.source_text, self._finish(record, recipe, direction), record.raw_output)

        decode = functools.partial(self._decode_texts, direction, list(recipes))
        return self.store.decode(direction, recipes, labels, decode, finish)

    def _decode_texts(
        self, direction: Direction, recipes: list[TransferSettings], todo: list[int], done: Any
    ) -> list[list[TransferResult]]:
        """The recipes' rewrites of the texts at `todo`, here or on Ray (`steer.runs.passes`)."""
        from steer.runs import passes

        if self.ray is None:
            return passes.decode_here(self.steerer(), direction, recipes, todo, done, self.progress)
        self.profile()  # the profile file the workers read (few-shot examples: its recorded corpora)
        where = {"device": str(self.lm.device), "progress": self.progress, **self.ray}
        return passes.decode_on_ray(str(self._profile_path), direction, recipes, todo, done, where)

    def steerer(self) -> Steerer:
        """A steerer on the run's model and profile whose few-shot examples (recipes with
        `examples` > 0) come from the run's training texts, embedded by the selection encoder, and
        whose keep-words leaves out and lowers the style markers of those texts."""
        from steer.generation.examples import ExampleSource
        from steer.generation.markers import StyleMarkers

        if self._examples is None:
            self._examples = ExampleSource(self.exp.train, shared_embedder(SELECTION_ENCODER))
            self._markers = StyleMarkers(self.exp.train)
        return Steerer(self.lm, self.profile(), examples=self._examples, markers=self._markers)

    def _llm_judge(self) -> Any:
        """The config's LLM judge (None without `llm_judge`), refused when its weights are the
        decoding model's unless `allow_same_model`."""
        if self.exp.llm_judge is None:
            return None
        from steer.model.embedded import cache_folder
        from steer.model.loading import load_model
        from steer.scoring.llm_judge import LLMJudge, check_not_decoder

        lm = self.lm if self.exp.llm_judge == self.exp.model else load_model(self.exp.llm_judge, progress=False)
        records = [{"model_id": self.lm.model_id, "fingerprint": self.lm.fingerprint}]
        check_not_decoder(lm.fingerprint, records, allow_same_model=self.exp.allow_same_model)
        self.log(f"LLM judge: {lm.model_id}" + (" (the decoding model itself)" if lm is self.lm else ""))
        return LLMJudge(lm, cache_dir=cache_folder("judge"))

    def _finish(self, record: TransferRecord, settings: TransferSettings, direction: Direction) -> str:
        """A cached raw reply's output under the current cleaning rules (echo lines refused)."""
        return finish_output(record.raw_output, settings, echo_filter(record.source_text, self.instruction(direction)))

    def score(self, direction: Direction, outputs: list[str], *, selecting: bool = False) -> dict[str, Any]:
        refs = [list(r) for r in direction.references] or None
        return evaluate(
            outputs,
            sources=list(direction.texts),
            references=refs,
            target=direction.target,
            metrics=self.exp.metrics,
            scorers=self.scorers(selecting=selecting),
            instruction=self.instruction(direction),
            source_style=direction.source,
        )

    def instruction(self, direction: Direction) -> str:
        """The rewrite instruction every recipe of this run prompts with (for `meta`'s echo rule)."""
        from steer.prompts import prompt_template

        template = prompt_template(direction.source, direction.target, self.exp.base)
        return instruction_text(template, direction.source, direction.target)

    def settings_for(self, mode: str, direction: Direction, tuned: TuneResult | None) -> TransferSettings:
        """The settings of a run mode for one direction (`tuned`: what `steer tune` chose)."""
        chosen = (
            tuned.settings_for(direction.name, self.out / "tuned.json")
            if tuned is not None and mode == "tuned"
            else None
        )
        return mode_settings(mode, self.exp.base, chosen)

    def run(self, tuned: TuneResult | None = None) -> RunResults:
        """Every direction × mode: transfer, evaluate, and write the report files."""
        self.profile()
        rows, samples = [], {}
        for direction in self.exp.directions:
            samples[direction.name] = {"source": list(direction.texts[:5])}
            for mode in self.exp.modes:
                extra: dict[str, Any] = {}
                if mode == "rerank":
                    settings = mode_settings("guided", self.exp.base)
                    outputs, extra["rerank"] = self.rerank(direction)
                    extra["recipe"] = f"rerank λ ∈ {{{', '.join(extra['rerank']['ladder'])}}}"
                else:
                    settings = self.settings_for(mode, direction, tuned)
                    outputs = self.transfer(direction, settings, mode)
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
        classifier = self.scorers().classifier
        results = RunResults(
            experiment=self.exp.name,
            model_id=self.lm.model_id,
            fingerprint=self.lm.fingerprint,
            rows=rows,
            judge=classifier.name,
            judge_heldout_accuracy=dict(self.judge_accuracies),
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
        """Try each candidate recipe per direction on the tuning texts; keep the best (`steer.runs.tuning`)."""
        from steer.runs.tuning import tune

        def score(direction: Direction, outputs: list[str]) -> dict[str, Any]:
            return self.score(direction, outputs, selecting=True)

        tuned = tune(self.exp, self.transfer, score, self.scorers(selecting=True).classifier.name)
        on_main(lambda: self.dir.write(self.out / "tuned.json", tuned.write))
        return tuned
