"""`steer run` / `steer tune`: one TOML config → profile, transfer in several modes, evaluate, report.

A run directory holds `profile.safetensors`, `outputs/<from>-<to>.<mode>.jsonl`, `results.json`,
`results.md` (the paper-style table), `samples.md` and `chart.png`. Every step is skipped when
its output already exists for the same inputs and settings, so an interrupted run resumes.
Under several processes (`--processes N`, `accelerate launch`) every decoding and scoring pass is
split with `distributed.map_sharded` and only the main process writes files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from steer.config import ProfileSettings, SteerError
from steer.corpus import Corpus, corpus_hash, read_texts
from steer.distributed import is_main_process, map_sharded, on_main
from steer.evaluate import METRICS, Scorers, evaluate
from steer.files import write_text
from steer.models import DEFAULT_MODEL, LoadedModel
from steer.profile import StyleProfile
from steer.records import (
    RunResults,
    TransferRecord,
    TunedChoice,
    TuneResult,
    read_transfer_records,
    write_transfer_records,
)
from steer.report import results_table, samples_markdown, write_chart
from steer.scoring.encoders import EVALUATION_ENCODER, SELECTION_ENCODER, shared_embedder
from steer.scoring.faithfulness import instruction_text
from steer.scoring.judges import JUDGES, build_judge
from steer.settings import recipe_fields
from steer.transfer import MODES, PRESETS, Steerer, TransferResult, TransferSettings, echo_filter, finish_output

logger = logging.getLogger(__name__)
DEFAULT_RUN_MODES = ("prompt", "paper", "guided")
TUNE_KEYS = {"candidates", "limit", "start", "similarity_floor", "ppl_ceiling", "objective"}
# Every key a run config may hold, per table: a typo is an error, not a full run on defaults.
CONFIG_KEYS: dict[str, set[str]] = {
    "": {"name", "model", "data_dir", "limit", "modes", "metrics", "styles", "directions", "selection", "contrast",
         "transfer", "profile", "tune", "judge", "rerank"},
    "styles.*": {"train", "dev"},
    "directions": {"from", "to", "dev", "refs"},
    "selection": {"top_k", "method", "positions", "amplify_factor", "strength"},
    "contrast": {"layers", "alpha", "beta", "dtype"},
    "transfer": {"max_new_tokens", "batch_size", "no_repeat_ngram", "prompt", "opening"},
    "profile": {"batch_size", "max_length", "path"},
}  # fmt: skip


def _check_config_keys(cfg: dict[str, Any], path: Path) -> None:
    """Refuse a key no table knows, naming the table and the valid keys."""

    def check(table: Any, allowed: set[str], where: str) -> None:
        if not isinstance(table, dict):
            raise SteerError(f"{path}: {where or 'the config'} must be a table")
        unknown = sorted(set(table) - allowed)
        if unknown:
            place = f"[{where}] key" if where else "top-level key"
            raise SteerError(f"{path}: unknown {place} {unknown[0]!r}; valid keys: {', '.join(sorted(allowed))}")

    check(cfg, CONFIG_KEYS[""], "")
    for name, spec in dict(cfg.get("styles", {})).items():
        check(spec, CONFIG_KEYS["styles.*"], f"styles.{name}")
    for spec in cfg.get("directions", []):
        check(spec, CONFIG_KEYS["directions"], "[directions]")
    for table in ("selection", "contrast", "transfer", "profile"):
        check(cfg.get(table, {}), CONFIG_KEYS[table], table)


TUNE_OBJECTIVES = ("j", "guards")
# What `steer tune` tries per direction when the config's [tune] has no `candidates`.
DEFAULT_TUNE_CANDIDATES: tuple[str | dict[str, Any], ...] = (
    "guided",
    {"preset": "guided", "strength": 1.0},
    {"preset": "guided", "strength": 3.0},
    {"preset": "guided", "positions": "all"},
    {"preset": "guided", "positions": "all", "strength": 1.0},
    {"preset": "guided", "positions": "all", "strength": 3.0},
    {"mode": "deactivate", "method": "paper", "top_k": "1%"},
)


@dataclass(frozen=True)
class Direction:
    """One transfer direction with its evaluation texts and optional parallel references."""

    source: str
    target: str
    texts: tuple[str, ...]
    references: tuple[tuple[str | None, ...], ...] = ()
    # `steer tune` texts: by default the dev texts right after the evaluated ones, so the choice
    # is made on texts the report does not score; `tune_overlaps` says when there were too few.
    tune_texts: tuple[str, ...] = ()
    tune_references: tuple[tuple[str | None, ...], ...] = ()
    tune_overlaps: bool = False

    @property
    def name(self) -> str:
        return f"{self.source}-{self.target}"


@dataclass(frozen=True)
class Experiment:
    """A parsed config: what to profile, which directions and modes to run, how to score them."""

    name: str
    model: str
    train: dict[str, tuple[str, ...]]
    train_sources: dict[str, str]
    directions: tuple[Direction, ...]
    modes: tuple[str, ...]
    metrics: tuple[str, ...]
    base: TransferSettings
    profile_settings: ProfileSettings
    profile_path: str | None = None
    tune: dict[str, Any] = field(default_factory=dict)
    judge: str = "auto"
    rerank: dict[str, Any] = field(default_factory=dict)


def _slice(spec: Any, data_dir: str, limit: int | None = None, *, keep_empty: bool = False) -> list[str]:
    """Texts from a path string or a `{path, start, stop}` table, with `{data_dir}` filled in."""
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - {"path", "start", "stop"})
        if unknown:
            raise SteerError(f"config: unknown key {unknown[0]!r} in {spec!r}; a text slice has path, start, stop")
        path, start, stop = spec.get("path"), int(spec.get("start", 0)), spec.get("stop")
    else:
        path, start, stop = spec, 0, None
    if not isinstance(path, str):
        raise SteerError(f"config: expected a path or {{path, start, stop}}, got {spec!r}")
    texts = read_texts(path.format(data_dir=data_dir), keep_empty=keep_empty)[
        start : None if stop is None else int(stop)
    ]
    return texts[:limit] if limit is not None else texts


def parse_mode(mode: str) -> tuple[str, bool]:
    """`"deactivate+contrast"` → ("deactivate", True); a preset or `tuned` → (name, False)."""
    if mode in PRESETS or mode in ("tuned", "rerank"):
        return mode, False
    base, contrast = (mode[: -len("+contrast")], True) if mode.endswith("+contrast") else (mode, False)
    if base not in MODES:
        choices = ", ".join([*PRESETS, "tuned", "rerank", *MODES, *(f"{m}+contrast" for m in MODES if m != "prompt")])
        raise SteerError(f"config: unknown mode {mode!r}; choose from {choices}")
    return base, contrast


def mode_settings(mode: str, base: TransferSettings, tuned: dict[str, Any] | None = None) -> TransferSettings:
    """The settings a run mode stands for: a preset's recipe, tune's choice, or a bare mode with
    the config's [selection]/[contrast] values. `base` carries the config's generic fields."""
    name, contrast = parse_mode(mode)
    if name == "tuned":
        if tuned is None:
            raise SteerError("mode 'tuned' needs tune results: run 'steer tune CONFIG' first or 'steer run --tune'")
        return TransferSettings.resolve(recipe=tuned, base=base)
    if name in PRESETS:
        return TransferSettings.resolve(name, base=base)
    return TransferSettings.resolve(base=base, mode=name, contrast=contrast)


def load_experiment(
    path: str | Path, *, data_dir: str | None = None, limit: int | None = None, modes: Sequence[str] | None = None
) -> Experiment:
    """Read and validate a run config (see configs/*.toml)."""
    path = Path(path)
    if not path.is_file():
        raise SteerError(f"config {path} does not exist")
    try:
        cfg = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SteerError(f"{path} is not valid TOML: {exc}") from None
    _check_config_keys(cfg, path)
    data = data_dir or cfg.get("data_dir", "")
    styles = cfg.get("styles", {})
    if len(styles) < 2:
        raise SteerError(f"{path}: needs a [styles.NAME] table for at least two styles")
    train, sources = {}, {}
    for name, spec in styles.items():
        if "train" not in spec:
            raise SteerError(f"{path}: style {name!r} has no 'train' corpus")
        train[name] = tuple(_slice(spec["train"], data))
        sources[name] = str(spec["train"] if isinstance(spec["train"], str) else spec["train"]["path"]).format(
            data_dir=data
        )
    limit = limit if limit is not None else cfg.get("limit")
    tune_cfg = dict(cfg.get("tune", {}))
    unknown = sorted(set(tune_cfg) - TUNE_KEYS)
    if unknown:
        raise SteerError(f"{path}: unknown [tune] key {unknown[0]!r}; valid keys: {', '.join(sorted(TUNE_KEYS))}")
    tune_limit = int(tune_cfg.get("limit", 32))
    if tune_cfg.get("objective", "j") not in TUNE_OBJECTIVES:
        raise SteerError(f"{path}: [tune] objective {tune_cfg['objective']!r} is not valid; choose one of j, guards")
    for candidate in tune_cfg.get("candidates", []):
        _candidate(candidate)  # a bad candidate is an error when the config is read, not hours later
    judge = str(cfg.get("judge", "auto"))
    if judge not in JUDGES:
        raise SteerError(f"{path}: judge {judge!r} is not valid; choose one of {', '.join(JUDGES)}")
    pairs = cfg.get("directions") or [{"from": a, "to": b} for a, b in itertools.permutations(list(styles)[:2], 2)]
    directions = []
    for d in pairs:
        src, tgt = d.get("from"), d.get("to")
        if src not in styles or tgt not in styles:
            raise SteerError(f"{path}: direction {src}→{tgt} names a style not in [styles] ({', '.join(styles)})")
        dev = d.get("dev", styles[src].get("dev"))
        if dev is None:
            raise SteerError(f"{path}: no dev texts for {src}→{tgt}; set styles.{src}.dev or the direction's dev")
        every = _slice(dev, data, keep_empty=bool(d.get("refs")))
        every_refs = [tuple(x or None for x in _slice(r, data, keep_empty=True)) for r in d.get("refs", [])]
        for r in every_refs:
            if len(r) != len(every):
                raise SteerError(f"{path}: {src}→{tgt} has {len(every)} dev texts but a reference file with {len(r)}")
        stop = len(every) if limit is None else int(limit)
        start = int(tune_cfg.get("start", stop))
        tune_stop = start + tune_limit
        overlaps = tune_stop > len(every)
        if overlaps:  # too few dev texts to keep tuning apart: tune on the first ones
            start, tune_stop = 0, tune_limit
        directions.append(
            Direction(
                src,
                tgt,
                tuple(every[:stop]),
                tuple(r[:stop] for r in every_refs),
                tuple(every[start:tune_stop]),
                tuple(r[start:tune_stop] for r in every_refs),
                overlaps or start < stop,
            )
        )
    modes = tuple(modes or cfg.get("modes", DEFAULT_RUN_MODES))
    for mode in modes:
        parse_mode(mode)
    metrics = tuple(cfg.get("metrics", METRICS))
    unknown_metrics = [m for m in metrics if m not in METRICS]
    if unknown_metrics:
        raise SteerError(f"{path}: unknown metric {unknown_metrics[0]!r}; choose from {', '.join(METRICS)}")
    selection, contrast, transfer = cfg.get("selection", {}), cfg.get("contrast", {}), cfg.get("transfer", {})
    base = TransferSettings.bare(
        top_k=str(selection.get("top_k", "1%")),
        method=selection.get("method", "paper"),
        positions=selection.get("positions", "all"),
        amplify_factor=float(selection.get("amplify_factor", 2.0)),
        strength=float(selection.get("strength", 1.0)),
        contrast_layers=contrast.get("layers"),
        alpha=float(contrast.get("alpha", 0.1)),
        beta=float(contrast.get("beta", 1.0)),
        contrast_dtype=str(contrast.get("dtype", "auto")),
        max_new_tokens=int(transfer.get("max_new_tokens", 48)),
        batch_size=int(transfer.get("batch_size", 8)),
        no_repeat_ngram=int(transfer.get("no_repeat_ngram", 0)),
        prompt=transfer.get("prompt"),
        opening=transfer.get("opening"),
    )
    profiling = cfg.get("profile", {})
    return Experiment(
        name=str(cfg.get("name", path.stem)),
        model=str(cfg.get("model", DEFAULT_MODEL)),
        train=train,
        train_sources=sources,
        directions=tuple(directions),
        modes=modes,
        metrics=metrics,
        base=base,
        profile_settings=ProfileSettings(
            batch_size=int(profiling.get("batch_size", 32)), max_length=int(profiling.get("max_length", 256))
        ),
        profile_path=profiling.get("path"),
        tune=dict(cfg.get("tune", {})),
        judge=judge,
        rerank=_rerank_config(cfg.get("rerank", {}), path),
    )


def _rerank_config(table: dict[str, Any], path: Path) -> dict[str, Any]:
    """`[rerank] ladder = [0, "u0.5", 1, 3]`, `length_weight`, `style_exponent`, checked when the config is read."""
    from steer.rerank import RerankSettings

    defaults = RerankSettings()
    unknown = sorted(set(table) - {"ladder", "length_weight", "style_exponent"})
    if unknown:
        raise SteerError(
            f"{path}: unknown [rerank] key {unknown[0]!r}; valid keys: ladder, length_weight, style_exponent"
        )
    out = {
        "ladder": table.get("ladder", defaults.ladder),
        "length_weight": float(table.get("length_weight", defaults.length_weight)),
        "style_exponent": float(table.get("style_exponent", defaults.style_exponent)),
    }
    if isinstance(out["ladder"], str):
        out["ladder"] = out["ladder"].split(",")
    try:
        out["ladder"] = RerankSettings(**out).ladder
    except (SteerError, TypeError) as exc:
        raise SteerError(f"{path}: [rerank] {exc}") from None
    return out


# Options added after the first release, left out of the key while off so older outputs stay reusable.
_LATER_OPTIONS: dict[str, Any] = {
    "guidance": 0.0,
    "edit_layers": None,
    "no_repeat_ngram": 0,
    "opening": None,
    "echo_guard": False,
}


def _settings_key(settings: TransferSettings, direction: Direction) -> str:
    from steer.prompts import reply_opening

    fields = {k: v for k, v in settings.to_dict().items() if _LATER_OPTIONS.get(k, object()) != v}
    opening = reply_opening(direction.source, direction.target, settings)
    if opening:  # a primed reply is another recipe (the packaged opening is not a settings field)
        fields["opening"] = opening
    blob = json.dumps([fields, direction.source, direction.target, corpus_hash(direction.texts)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Runner:
    """Carries one experiment through profile → transfer → evaluate, reusing finished work."""

    def __init__(self, exp: Experiment, out_dir: str | Path, lm: LoadedModel, *, progress: bool = True) -> None:
        self.exp, self.out, self.lm = exp, Path(out_dir), lm
        self.progress = progress and is_main_process()  # one progress display, the main process's
        self.out.mkdir(parents=True, exist_ok=True)
        self._scorers: Scorers | None = None
        self._profile_path: Path | None = None
        self._selector: Scorers | None = None
        self.judge_accuracies: dict[str, float] = {}
        self._profile: StyleProfile | None = None

    def log(self, message: str) -> None:
        """Progress messages go to `logging` (INFO); the CLI shows them unless -q."""
        if self.progress:
            logger.info(message)

    def profile(self) -> StyleProfile:
        """The experiment's profile: reused when its model and corpora match, else computed."""
        if self._profile is not None:
            return self._profile
        from steer.profile import profile_styles

        hashes = {s: corpus_hash(t) for s, t in self.exp.train.items()}
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
        corpora = [Corpus(s, t, self.exp.train_sources[s], hashes[s]) for s, t in self.exp.train.items()]
        prof = profile_styles(self.lm, corpora, self.exp.profile_settings, progress=self.progress)
        on_main(lambda: prof.save(self.out / "profile.safetensors", force=True))
        self._profile, self._profile_path = prof, self.out / "profile.safetensors"
        return prof

    def probe(self) -> Any:
        """The profile's style probe for rerank: `probe.safetensors` in the run directory, rebuilt
        when it was made from another profile."""
        from steer.probe import StyleProbe, build_probe, file_sha256

        self.profile()
        digest = file_sha256(self._profile_path)
        path = self.out / "probe.safetensors"
        if path.is_file():
            probe = StyleProbe.load(path)
            if probe.profile_sha256 == digest and probe.fingerprint == self.lm.fingerprint:
                return probe
        self.log("building the style probe from the train corpora")
        probe = build_probe(self.lm, self.profile(), dict(self.exp.train), profile_sha256=digest)
        on_main(lambda: probe.save(path, force=True))
        judges = ", ".join(f"{k} {v:.3f}" for k, v in probe.judges_heldout_accuracy.items())
        self.log(f"style probe: held-out accuracy {probe.heldout_accuracy:.3f} (text judges: {judges})")
        return probe

    def rerank(self, direction: Direction, label: str = "rerank") -> tuple[list[str], dict[str, Any]]:
        """Steer-and-rerank outputs for one direction and the chosen λ counts: the ladder's rungs
        (`rungs`) ranked by the profile's style probe, similarity and fluency (`steer.rerank`)."""
        from steer.probe import file_sha256
        from steer.rerank import Reranker, RerankSettings

        settings = RerankSettings(
            self.exp.rerank["ladder"],
            mode_settings("guided", self.exp.base),
            self.exp.rerank["length_weight"],
            self.exp.rerank["style_exponent"],
        )
        probe = self.probe()
        rungs, decoded = self.rungs(direction, settings.ladder, label)
        reranker = Reranker(Steerer(self.lm, self.profile()), probe, shared_embedder(SELECTION_ENCODER))
        texts = direction.texts
        ranked = map_sharded(
            lambda part: reranker.rank(
                [texts[i] for i in part],
                direction.target,
                [[d[i] for i in part] for d in decoded],
                settings,
                rungs,
                self.instruction(direction),
            ),
            list(range(len(texts))),
            size=lambda i: len(texts[i]),
        )
        key = hashlib.sha256(
            json.dumps(
                [
                    [_settings_key(r, direction) for r in rungs],
                    settings.length_weight,
                    settings.style_exponent,
                    file_sha256(self.out / "probe.safetensors"),
                ]
            ).encode()  # fmt: skip
        ).hexdigest()[:16]
        records = [self._record(key, r, direction, label, rerank=r.info["rerank"]) for r in ranked]
        self._write(self.out / "outputs" / f"{direction.name}.{label}.jsonl", records)
        chosen: dict[str, int] = {}
        for r in records:
            name = (r.rerank or {})["rung"]
            chosen[name] = chosen.get(name, 0) + 1
        return [r.output for r in records], {
            "ladder": [str(r) for r in settings.ladder],
            "length_weight": settings.length_weight,
            "style_exponent": settings.style_exponent,
            "chosen_strengths": chosen,
            "probe_heldout_accuracy": probe.heldout_accuracy,
        }

    def rungs(
        self, direction: Direction, ladder: Sequence[Any], label: str = "rerank"
    ) -> tuple[list[TransferSettings], list[list[TransferResult]]]:
        """The recipe and the outputs of every rung of a rerank ladder (`steer.rerank.Rung`) on these texts.

        Each rung is an ordinary recipe — λ = 0 the `prompt` mode, else the `guided` preset at that
        strength, without guidance for an unguided rung — so rungs decoded earlier by other modes or
        by tuning are reused from `outputs/`; the missing ones are decoded together in one batch and
        saved as `<direction>.<label>-strength=<rung>.jsonl`."""
        from steer.rerank import Rung

        guided = mode_settings("guided", self.exp.base)
        rungs = [Rung.parse(x) for x in ladder]
        # rung 0 is the prompt mode's own recipe (same cache key), not the prompt on the guided base
        recipes = [
            mode_settings("prompt", self.exp.base) if r.strength == 0 else r.recipe(guided) for r in rungs
        ]  # fmt: skip
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
            records = self._cached(direction, recipe)
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
            steerer = Steerer(self.lm, self.profile())
            per_text = map_sharded(  # [text][candidate]
                lambda part: list(
                    zip(
                        *steerer.transfer_candidates(
                            part, direction.source, direction.target, [recipes[k] for k in missing],
                            progress=self.progress,
                        ),
                        strict=True,
                    )
                ),
                direction.texts,
            )  # fmt: skip
            for j, k in enumerate(missing):
                key = _settings_key(recipes[k], direction)
                rows = [candidates[j] for candidates in per_text]
                extra = {"settings": recipes[k].to_dict()}
                records = [self._record(key, r, direction, labels[k], **extra) for r in rows]
                self._write(self.out / "outputs" / f"{direction.name}.{labels[k]}.jsonl", records)
                decoded[k] = rows
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
            self._scorers = Scorers(judge, self.lm, shared_embedder(EVALUATION_ENCODER))
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
            )
            evaluating = self._scorers.classifier.name
            self.log(f"tuning selects with the {selector.name} judge (evaluation reports with {evaluating})")
        return self._selector

    def _cached(
        self, direction: Direction, settings: TransferSettings, path: Path | None = None
    ) -> list[dict[str, Any]] | None:
        """Records of these settings on these texts from any `outputs/<direction>.*.jsonl`
        (the same recipe under another label — `tuned` picking `guided` — is reused too)."""
        key = _settings_key(settings, direction)
        first = [path] if path is not None else []
        for candidate in [*first, *sorted((self.out / "outputs").glob(f"{direction.name}.*.jsonl"))]:
            records = _read_records(candidate, key) if candidate.is_file() else None
            if records is not None and len(records) == len(direction.texts):
                return records
        return None

    def transfer(self, direction: Direction, settings: TransferSettings, label: str) -> list[str]:
        """Outputs for one direction and settings, from `outputs/` when already computed."""
        key = _settings_key(settings, direction)
        path = self.out / "outputs" / f"{direction.name}.{label}.jsonl"
        records = self._cached(direction, settings, path)
        if records is not None:
            if not path.is_file() or _read_records(path, key) is None:
                self._write(path, records)
            # outputs follow the current cleaning and loop rules, re-derived from the raw replies
            return [self._finish(r, settings, direction) for r in records]
        self.log(f"{direction.name} {label}: {len(direction.texts)} texts")
        steerer = Steerer(self.lm, self.profile())
        results = map_sharded(
            lambda part: steerer.transfer(part, direction.source, direction.target, settings, progress=self.progress),
            direction.texts,
        )
        self._write(path, [self._record(key, r, direction, label, settings=settings.to_dict()) for r in results])
        return [r.output for r in results]

    def _finish(self, record: TransferRecord, settings: TransferSettings, direction: Direction) -> str:
        """A cached raw reply's output under the current cleaning rules (echo lines refused)."""
        return finish_output(record.raw_output, settings, echo_filter(record.source_text, self.instruction(direction)))

    @staticmethod
    def _write(path: Path, records: list[TransferRecord]) -> None:
        """Write an outputs file (the main process writes; the others wait for it)."""
        on_main(lambda: write_transfer_records(path, records))

    def _record(self, key: str, result: Any, direction: Direction, label: str, **extra: Any) -> TransferRecord:
        """One line of `outputs/<direction>.<label>.jsonl`: the run's own record of a rewrite."""
        return TransferRecord.of(result, direction.source, direction.target, label, self.lm, key=key, **extra)

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
            results.write(self.out / "results.json")
            write_text(self.out / "results.md", results_table(results.to_dict()))
            write_text(self.out / "samples.md", samples_markdown(samples))
            write_chart(self.out / "chart.png", rows)

        on_main(write_report)
        return results

    def tune(self) -> TuneResult:
        """Try each candidate recipe per direction on held-out dev texts; keep the best trade-off.

        The tuning texts are `Direction.tune_texts`: the `[tune] limit` dev texts after the
        evaluated ones (`[tune] start` moves them). They are scored with the *selection* judge,
        never the evaluation judge. `[tune] objective = "j"` (default) keeps the candidate — the
        plain prompt included — with the highest joint score J; `"guards"` keeps the most accurate
        candidate whose similarity stays ≥ `similarity_floor` × prompting's and whose perplexity
        stays ≤ `ppl_ceiling` × prompting's, else the plain prompt.
        """
        candidates = [_candidate(c) for c in self.exp.tune.get("candidates", DEFAULT_TUNE_CANDIDATES)]
        floor = float(self.exp.tune.get("similarity_floor", 0.8))
        ceiling = float(self.exp.tune.get("ppl_ceiling", 1.2))
        objective = str(self.exp.tune.get("objective", "j"))
        chosen: dict[str, TunedChoice] = {}
        trials = []
        for full in self.exp.directions:
            direction = replace(full, texts=full.tune_texts, references=full.tune_references)
            prompt = self.score(
                direction,
                self.transfer(direction, mode_settings("prompt", self.exp.base), "tune-prompt"),
                selecting=True,
            )
            scored = [({"mode": "prompt"}, prompt)]
            for label, fields in candidates:
                settings = TransferSettings.resolve(recipe=fields, base=self.exp.base)
                outputs = self.transfer(direction, settings, f"tune-{label}")
                scored.append((fields, self.score(direction, outputs, selecting=True)))
            if objective == "j":
                best = max(scored, key=lambda c: float(c[1].get("j", float("-inf"))))
            else:
                best = max(scored, key=lambda c: _objective(c[1], prompt, floor, ceiling))
            chosen[direction.name] = TunedChoice(best[0], best[1], prompt, full.tune_overlaps)
            trials += [{"direction": direction.name, "settings": f, "metrics": m} for f, m in scored]
        tuned = TuneResult(
            objective=objective,
            selection_judge=self.scorers(selecting=True).classifier.name,
            similarity_floor=floor,
            ppl_ceiling=ceiling,
            limit=len(self.exp.directions[0].tune_texts) if self.exp.directions else 0,
            chosen=chosen,
            trials=trials,
        )
        on_main(lambda: tuned.write(self.out / "tuned.json"))
        return tuned


def _read_records(path: Path, key: str) -> list[TransferRecord] | None:
    """The records of an outputs file when every one was made with settings `key`, else None."""
    with path.open(encoding="utf-8") as fh:
        first = fh.readline()
    if not first.strip() or json.loads(first).get("key") != key:
        return None
    records = read_transfer_records(path)
    return records if all(r.key == key for r in records) else None


def _candidate(spec: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A tune candidate — a preset name or a table of settings (optionally on top of `preset`) —
    as (label, the settings fields it sets)."""
    if isinstance(spec, str):
        spec = {"preset": spec}
    spec = dict(spec)
    given = dict(spec)
    preset = spec.pop("preset", None)
    try:
        fields = recipe_fields(preset, spec) if preset is not None else spec
        TransferSettings.bare(**fields)
    except SteerError as exc:
        raise SteerError(f"config: tune candidate {given!r}: {exc}") from None
    label = "-".join([preset or ""] + [f"{k}={v}" for k, v in spec.items()]).strip("-")
    return label.replace("%", "pct").replace("+", "_").replace(":", "_"), fields


def _objective(m: dict[str, Any], prompt: dict[str, Any], floor: float, ceiling: float) -> tuple[int, float, float]:
    """Sort key for tune: within the similarity/PPL limits first, then accuracy, then similarity."""
    ok_sim = m.get("similarity") is None or m["similarity"] >= floor * prompt.get("similarity", 0)
    ok_ppl = (
        m.get("ppl") is None or not math.isfinite(prompt.get("ppl", math.nan)) or (m["ppl"] <= ceiling * prompt["ppl"])
    )
    return (int(ok_sim and ok_ppl), float(m.get("accuracy", 0.0)), float(m.get("similarity") or 0.0))
