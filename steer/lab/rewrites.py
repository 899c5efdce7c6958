"""A run's rewrites: each recipe's outputs for a direction, from the run store when already made,
else decoded (here, on this machine's processes or on Ray workers) and stored — and rerank's, its
ladder's rungs decoded in one batch and ranked by the profile's style probe. Decoding and ranking go
through the one rewrite service (`steer.rewriting.service`), its job naming the run's training texts.

An interrupted run resumes from the outputs it finished (`steer.lab.store.RunStore.decode`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from steer.distributed import map_sharded
from steer.errors import SteerError
from steer.files import sha256_file
from steer.generation.steerer import TransferResult, TransferSettings, echo_filter, finish_output
from steer.lab.artefacts import RunArtefacts
from steer.lab.experiment import Direction, Experiment
from steer.lab.recipes import rerank_settings, rung_recipes
from steer.lab.store import RunStore, rerank_key
from steer.model.loading import LoadedModel
from steer.rewriting.records import TransferRecord
from steer.rewriting.service import Corpora, RewriteJob, RewriteService
from steer.scoring.faithfulness import instruction_text


class RunRewrites:
    """Outputs of recipes on a run's directions, reusing what the store holds."""

    def __init__(
        self,
        exp: Experiment,
        lm: LoadedModel,
        store: RunStore,
        artefacts: RunArtefacts,
        log: Callable[[str], None],
        *,
        progress: bool = False,
        ray: dict[str, Any] | None = None,
    ) -> None:
        # `ray`: `steer.rewriting.on_ray.decode_items_on_ray` options (workers, gpus_per_worker, address); None decodes
        # here (or on this machine's processes)
        self.exp, self.lm, self.store, self.artefacts, self.log = exp, lm, store, artefacts, log
        self.progress, self.ray = progress, ray
        self._services: dict[str, RewriteService] = {}

    def corpora(self) -> Corpora:
        """The run's training texts per style: what few-shot examples show and keep-words' markers
        are found in (all of them, beyond the ones `[profile] limit` profiles)."""
        return tuple((style, tuple(texts)) for style, texts in self.exp.train.items())

    def job(self, direction: Direction) -> RewriteJob:
        """What the direction's rewrite service does: any recipe of the run (`RewriteJob.corpora`: the
        run's training texts) and, when the run has a rerank mode, ranking with the run's style probe."""
        rerank = rerank_settings(self.exp) if "rerank" in self.exp.modes else None
        if rerank is not None:
            self.artefacts.probe()  # found or built: its file is `probe_file`
        return RewriteJob(
            str(self.artefacts.profile_file()), direction.source, direction.target, rerank_settings(self.exp).base,
            rerank, device=str(self.lm.device), corpora=self.corpora(),
            probe_path=str(self.artefacts.probe_file) if rerank is not None else None,
        )  # fmt: skip

    def service(self, direction: Direction) -> RewriteService:
        """The direction's rewrite service (`job`) on the run's loaded model and profile, built once."""
        if direction.name not in self._services:
            loaded = (self.artefacts.profile(), self.lm)
            self._services[direction.name] = RewriteService(self.job(direction), loaded=loaded, progress=self.progress)
        return self._services[direction.name]

    def instruction(self, direction: Direction) -> str:
        """The rewrite instruction every recipe of this run prompts with (for `meta`'s echo rule)."""
        from steer.prompts import prompt_template

        template = prompt_template(direction.source, direction.target, self.exp.base)
        return instruction_text(template, direction.source, direction.target)

    def transfer(self, direction: Direction, settings: TransferSettings, label: str) -> list[str]:
        """Outputs for one direction and settings, from the store when already computed."""
        records = self.store.find(direction, settings, label)
        if records is not None:
            self.store.keep(direction, label, settings, records)
            # outputs follow the current cleaning and loop rules, re-derived from the raw replies
            return [self._finish(r, settings, direction) for r in records]
        self.log(f"{direction.name} {label}: {len(direction.texts)} texts")
        return [r.output for r in self._decode(direction, [settings], [label])[0]]

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

    def rerank(self, direction: Direction, label: str = "rerank") -> tuple[list[str], dict[str, Any]]:
        """Steer-and-rerank outputs for one direction and the chosen λ counts: the ladder's rungs
        (`steer.lab.recipes.rung_recipes`; reused from the store like any recipe) ranked by the
        profile's style probe, similarity and fluency (`steer.generation.rerank`)."""
        from steer.generation.rerank import rank_block

        settings = rerank_settings(self.exp)
        probe = self.artefacts.probe()
        rungs = rung_recipes(self.exp, settings)
        decoded = self.candidates(direction, rungs, [f"{label}-strength={r}" for r in settings.ladder])
        texts = direction.texts
        rank = functools.partial(rank_block, direction.target, settings, rungs, self.instruction(direction))
        blocks = [(texts[i], [d[i] for d in decoded]) for i in range(len(texts))]
        if self.ray is not None:  # on Ray workers that load the profile, model, probe and encoder once
            from steer.lab.ray_passes import rank_on_ray

            ranked = rank_on_ray(self.job(direction), rank, blocks, progress=self.progress, **self.ray)
        else:
            reranker = self.service(direction).reranker
            if reranker is None:
                raise SteerError('rerank outputs were asked of a run without a rerank mode; add "rerank" to `modes`')
            ranked = map_sharded(lambda part: rank(reranker, part), blocks, size=lambda block: len(block[0]))
        key = rerank_key(direction, rungs, settings, sha256_file(self.artefacts.probe_file), self.store.measured)
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
        """The recipes' rewrites of the texts at `todo`, here or on Ray (`steer.lab.passes`)."""
        from steer.lab import passes

        if self.ray is None:
            return passes.decode_here(self.service(direction), direction, recipes, todo, done)
        # the profile file the workers read, and the run's training texts for few-shot and keep-words recipes
        where = {"device": str(self.lm.device), "progress": self.progress, **self.ray}
        return passes.decode_recipes_on_ray(
            str(self.artefacts.profile_file()), direction, recipes, todo, done, where, self.corpora()
        )

    def _finish(self, record: TransferRecord, settings: TransferSettings, direction: Direction) -> str:
        """A cached raw reply's output under the current cleaning rules (echo lines refused)."""
        return finish_output(record.raw_output, settings, echo_filter(record.source_text, self.instruction(direction)))
