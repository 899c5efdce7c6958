"""One rewrite service: a profile, a direction and a recipe (plain, steered or reranked) → rewrites
with their provenance records — the same for `steer transfer`, its processes, Ray workers and
Python callers, so each of them writes the same records.

`RewriteJob` says what to do (it is picklable: a Ray worker gets it and builds its own service);
`RewriteService` holds the loaded model, steerer and, for rerank, the probe — loaded once — and
turns texts into `TransferResult`s (`results`; several recipes at once: `candidates`) and those
into `TransferRecord`s (`record`). `job.key()` identifies the recipe, inputs aside, for resuming a
run. It is the one place a `Steerer` that rewrites is built, with one policy for what few-shot and
keep-words recipes read; `steer run` decodes and ranks through it too (`steer.lab.rewrites`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import sha256_file
from steer.generation.rerank import Reranker, rerank_summary
from steer.generation.steerer import Steerer, TransferResult, prompt_template
from steer.labels import describe
from steer.ladder import RerankSettings
from steer.model.loading import LoadedModel, load_model, resolve_dtype
from steer.model.names import LIGHT_FORMATS
from steer.profiling.profile import StyleProfile
from steer.rewriting.opened import OpenedProfile
from steer.rewriting.recipe import Recipe, RerankOptions, recipe_for
from steer.rewriting.records import TransferRecord
from steer.scoring.encoders import SELECTION_ENCODER, shared_embedder
from steer.settings import TransferSettings
from steer.version import __version__

logger = logging.getLogger(__name__)


def load_profile_and_model(
    profile_path: str | Path,
    model_spec: str | None = None,
    *,
    dtype: str = "auto",
    device: str = "cpu",
    device_map: str | None = None,
    progress: bool = False,
) -> tuple[StyleProfile, LoadedModel]:
    """A profile and the model it was made on (or `model_spec`, another copy of it: the
    fingerprint is checked), for the commands that need both and no rewrite service."""
    opened = OpenedProfile.open(profile_path)
    lm = opened.load_model(model_spec, dtype=dtype, device=device, device_map=device_map, progress=progress)
    return opened.profile, lm


# The format of `RewriteJob.key`: raised when a change makes an interrupted run's finished rewrites
# stale, so `--resume` refuses them (the partial file's header names another key) instead of mixing.
RESUME_FORMAT = 2

# Texts per style, as a job carries them: ((style, (text, …)), …)
Corpora = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class RewriteJob:
    """What a rewrite run does: profile, direction, recipe (and the rerank ladder when reranking),
    prompts, and where the model runs."""

    profile_path: str | None  # None: a profile held in memory (`RewriteService(job, opened=…)`)
    source: str
    target: str
    settings: TransferSettings
    rerank: RerankSettings | None = None
    keep_candidates: bool = False
    prompts_file: str | None = None
    model_spec: str | None = None
    dtype: str = "auto"
    device: str = "cpu"
    device_map: str | None = None
    # the texts few-shot examples and keep-words' style markers come from (a run's training texts);
    # None: the corpora the profile records, read when a recipe needs them
    corpora: Corpora | None = None
    # the style probe rerank ranks with (a run's own); None: the one beside the profile
    probe_path: str | None = None
    # what the opened profile already knows (`RewriteJob.of`): its file's sha256 and its model, so the
    # job's key and weights never reopen or rehash it; None: read from `profile_path` when asked
    profile_sha256: str | None = None
    profile_model: str | None = None

    @classmethod
    def of(
        cls, opened: OpenedProfile, source: str, target: str, settings: TransferSettings, **fields: Any
    ) -> RewriteJob:
        """The job of an opened profile, carrying its sha256 and model id."""
        path = str(opened.path) if opened.path is not None else None
        return cls(
            path, source, target, settings, **fields,
            profile_sha256=opened.sha256, profile_model=opened.profile.model_id,
        )  # fmt: skip

    def __post_init__(self) -> None:
        # records name the profile as an absolute path, so `steer eval` finds it from any folder
        # (and workers started elsewhere read the same file); set once, where the job is made
        for name in ("profile_path", "probe_path"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, os.path.abspath(getattr(self, name)))

    @property
    def recipe(self) -> str:
        """The record's human label: `describe(settings)`, or the rerank ladder around it."""
        if self.rerank is None:
            return describe(self.settings)
        return f"rerank λ ∈ {{{self.rerank.label}}} of {describe(self.settings)}"

    def key(self) -> list[Any]:
        """Everything that decides the records, inputs aside (the batch size changes no output,
        so a resume may use another)."""
        decided = {k: v for k, v in self.settings.to_dict().items() if k != "batch_size"}
        rerank = [self.rerank.label, *self.rerank.choice_key()] if self.rerank is not None else None
        digest = self.profile_sha256
        if digest is None and self.profile_path is not None:
            digest = sha256_file(self.profile_path)
        key = [RESUME_FORMAT, self.recipe, decided, rerank, self.keep_candidates, self.source, self.target, digest]
        fmt = self.weights()
        key = key + [fmt] if fmt in LIGHT_FORMATS else key  # lighter weights decode other outputs
        if self.corpora is not None:  # examples and markers from other texts than the profile's
            from steer.profiling.corpus import corpus_hash

            key.append({style: corpus_hash(texts) for style, texts in self.corpora})
        if self.probe_path is not None:
            key.append(sha256_file(self.probe_path))
        recipes = self.rerank.candidates() if self.rerank is not None else [self.settings]
        if self.profile_path is not None and any(r.push > 0 or r.refusal > 0 for r in recipes):
            from steer.profiling.instruction import instruction_path

            measured = instruction_path(self.profile_path)  # a new measurement decodes other rewrites
            key.append(sha256_file(measured) if measured.is_file() else None)
        if self.profile_path is not None and any(r.mode == "trained" for r in recipes):
            from steer.profiling.trained import trained_path

            learned = trained_path(self.profile_path)  # a new training decodes other rewrites
            key.append(sha256_file(learned) if learned.is_file() else None)
        return key

    def weights(self) -> str:
        """The `--dtype` the model will really load with (`auto` resolved: `resolve_dtype`)."""
        spec = self.model_spec
        if spec is None and self.dtype == "auto":
            spec = self.profile_model
        if spec is None and self.dtype == "auto" and self.profile_path is not None:
            spec = StyleProfile.load(self.profile_path).model_id
        return resolve_dtype(spec, self.dtype, self.device, self.device_map)


def filtered_steps(info: dict[str, Any]) -> dict[str, int] | None:
    """How often a plausibility filter weakened the recipe in one rewrite (None when none ran)."""
    counts = {name: int(info[f"{name}_filtered"]) for name in ("guidance", "contrast") if f"{name}_filtered" in info}
    return {**counts, "of": int(info.get("new_tokens", 0))} if counts else None


class RewriteService:
    """A loaded `RewriteJob`: texts in, rewrites and records out."""

    def __init__(
        self,
        job: RewriteJob,
        *,
        opened: OpenedProfile | None = None,
        lm: LoadedModel | None = None,
        loaded: tuple[StyleProfile, LoadedModel] | None = None,
        progress: bool = False,
    ) -> None:
        """`opened`: the job's profile, already opened (else opened here from `job.profile_path`);
        `lm`: its model, already loaded (checked by fingerprint; else loaded here); `loaded`: a
        (profile, model) pair held in memory, as a run holds them."""
        self.job, self.progress = job, progress
        self._texts: dict[str, tuple[str, ...]] | None = None
        if loaded is not None:
            prof, lm = loaded
            if opened is None:
                opened = OpenedProfile(job.profile_path, prof, job.profile_sha256)
        if opened is None and job.profile_path is None:
            raise SteerError("a RewriteJob without a profile path needs `opened` (the profile) or `loaded`")
        self.opened = opened if opened is not None else OpenedProfile.open(str(job.profile_path))
        prof = self.opened.profile
        if lm is None:
            lm = self.opened.load_model(
                job.model_spec, dtype=job.dtype, device=job.device, device_map=job.device_map, progress=progress
            )
        elif loaded is None:
            prof.check_model(lm.model_type, lm.num_layers, lm.num_neurons, lm.fingerprint, lm.model_id)
        self.lm = lm
        recipes = job.rerank.candidates() if job.rerank is not None else [job.settings]
        # a job that names its corpora may decode any recipe (a run's modes and tuning choose them later);
        # else only what its own recipes need is read
        given = job.corpora is not None
        examples = markers = None
        if given or any(r.examples for r in recipes):  # few-shot rungs show texts of the target style
            from steer.generation.examples import ExampleSource

            examples = ExampleSource(self._corpora(), shared_embedder(SELECTION_ENCODER))
        if given or any(r.keep_words > 0 for r in recipes):  # keep-words leaves out and lowers their markers
            from steer.generation.markers import StyleMarkers

            try:
                markers = StyleMarkers(self._corpora())
            except SteerError as err:  # the recipe still runs; it only keeps the source's markers too
                logger.warning("keep-words will favour every source content word, style markers too: %s", err)
        self.steerer = Steerer(
            self.lm,
            prof,
            prompts_file=job.prompts_file,
            examples=examples,
            markers=markers,
            instructions=lambda: self.opened.instructions_for(self.lm),
            trained=lambda: self.opened.trained_for(self.lm),
        )
        self.reranker = None
        if job.rerank is not None:
            from steer.profiling.probe import StyleProbe

            probe = StyleProbe.load(job.probe_path) if job.probe_path is not None else self.opened.probe_for(self.lm)
            # the selection encoder on the CPU wherever the model runs, so rankings are the same everywhere
            self.reranker = Reranker(self.steerer, probe, shared_embedder(SELECTION_ENCODER))
        self.digest = self.opened.sha256
        self.template = prompt_template(job.source, job.target, job.settings, self.steerer.prompts)

    def _corpora(self) -> dict[str, tuple[str, ...]]:
        """The texts per style the profile records (read once; `SteerError` where they are missing)."""
        if self._texts is None and self.job.corpora is not None:
            self._texts = dict(self.job.corpora)
        if self._texts is None:
            from steer.profiling.profile import style_corpora

            if self.opened.path is None:
                raise SteerError("few-shot and keep-words recipes read the corpora of a profile given as a path")
            self._texts = style_corpora((), self.opened.path, self.opened.profile)
        return self._texts

    def results(
        self, texts: Sequence[str], on_batch: Callable[[list[int], list[TransferResult]], None] | None = None
    ) -> list[TransferResult]:
        """Rewrites of `texts` in order (none may be blank); `on_batch(indices, results)` after each batch."""
        if not texts:
            return []
        if any(not t for t in texts):
            raise SteerError("a text to rewrite is empty; blank lines are kept apart by `records`")
        job = self.job
        if self.reranker is not None and job.rerank is not None:
            return self.reranker.transfer(
                texts, job.source, job.target, job.rerank, progress=self.progress, on_batch=on_batch
            )
        return self.steerer.transfer(
            texts, job.source, job.target, job.settings, progress=self.progress, on_batch=on_batch
        )

    def candidates(
        self,
        texts: Sequence[str],
        recipes: Sequence[TransferSettings],
        on_batch: Callable[[list[int], list[list[TransferResult]]], None] | None = None,
    ) -> list[list[TransferResult]]:
        """Several recipes' rewrites of `texts` decoded together (result[k][i]: text i under recipe k;
        `Steerer.transfer_candidates`): a run's modes and ladder rungs share each batch's work."""
        job = self.job
        return self.steerer.transfer_candidates(
            texts, job.source, job.target, list(recipes), progress=self.progress, on_batch=on_batch
        )

    def record(self, result: TransferResult) -> TransferRecord:
        """The provenance record of one rewrite (what `steer transfer -o x.jsonl` writes)."""
        job, reranking = self.job, self.job.rerank is not None
        return TransferRecord.of(
            result,
            job.source,
            job.target,
            "rerank" if reranking else job.settings.mode,
            self.lm,
            truncated=result.truncated,
            recipe=job.recipe,
            settings=job.settings.to_dict(),
            rerank=rerank_summary(result.info, job.keep_candidates) if reranking else None,
            ladder=job.rerank.label if job.rerank is not None else None,
            length_weight=job.rerank.length_weight if job.rerank is not None else None,
            style_exponent=job.rerank.style_exponent if job.rerank is not None else None,
            rung_weights=job.rerank.rung_weights if job.rerank is not None else None,
            usable_first=job.rerank.usable_first if job.rerank is not None else None,
            filtered_steps=filtered_steps(result.info),
            profile=str(job.profile_path) if job.profile_path is not None else None,
            profile_sha256=self.digest,
            prompt_template=self.template,
            seed=job.settings.seed,
            steer_version=__version__,
        )

    def blank_record(self) -> TransferRecord:
        """The record of a blank input line (kept, so outputs stay aligned with the input)."""
        return self.record(TransferResult("", "", "", False, {"blank_input": True}))


def open_rewriter(
    profile: OpenedProfile | StyleProfile | str | Path,
    source: str,
    target: str,
    *,
    lm: LoadedModel | None = None,
    preset: str | None = None,
    prompts_file: str | Path | None = None,
    keep_candidates: bool = False,
    progress: bool = False,
    rerank: RerankOptions | None = None,
    **fields: Any,
) -> RewriteService:
    """A loaded rewrite service for `source` → `target`, its recipe chosen as `steer transfer`
    chooses it (`steer.rewriting.recipe.recipe_for`: with `preset` None, the read default, else
    rerank when the profile has a probe); `fields` are `TransferSettings` fields and `rerank` the
    ladder and scoring under rerank (`RerankOptions(ladder="0,u0.5,3")`). `lm`: a model
    already loaded (the profile's, checked by fingerprint); else the profile's model is loaded."""
    opened = OpenedProfile.of(profile)
    recipe = recipe_for(opened, source, target, preset=preset, keep_candidates=keep_candidates, rerank=rerank, **fields)
    if recipe.note is not None:
        logger.info("%s", recipe.note)
    opened.profile.check_style(source)
    opened.profile.check_style(target)
    if lm is None:
        lm = opened.load_model(progress=progress) if opened.path is not None else load_model(opened.profile.model_id)
    return service_for(opened, lm, source, target, recipe, keep_candidates, prompts_file, progress=progress)


def service_for(
    opened: OpenedProfile,
    lm: LoadedModel,
    source: str,
    target: str,
    recipe: Recipe,
    keep_candidates: bool = False,
    prompts_file: str | Path | None = None,
    *,
    progress: bool = False,
) -> RewriteService:
    """The service of a chosen recipe on a profile already opened and its model already loaded
    (`steer serve` keeps one per direction and recipe, all on one model)."""
    job = RewriteJob.of(
        opened, source, target, recipe.settings, rerank=recipe.rerank, keep_candidates=keep_candidates,
        prompts_file=str(prompts_file) if prompts_file is not None else None,
    )  # fmt: skip
    return RewriteService(job, opened=opened, lm=lm, progress=progress)


def rewrite(
    texts: Sequence[str],
    profile: OpenedProfile | StyleProfile | str | Path,
    source: str,
    target: str,
    *,
    lm: LoadedModel | None = None,
    preset: str | None = None,
    **fields: Any,
) -> list[str]:
    """One call from Python: the rewrites of `texts`, the same as `steer transfer` gives for the
    same profile, direction and options (`open_rewriter`; blank texts stay blank).

        steer.rewrite(["Please find attached the report."], "formality.safetensors", "formal", "informal")
    """
    service = open_rewriter(profile, source, target, lm=lm, preset=preset, **fields)
    done = iter(service.results([t for t in texts if t]))
    return [next(done).output if t else "" for t in texts]
