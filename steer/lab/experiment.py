"""Run configs: a TOML file → an `Experiment` (styles, corpora, directions with dev and tuning texts,
modes, metrics, recipe defaults, tuning and rerank tables), checked when it is read — unknown keys,
bad modes, metrics, judges and tune candidates are errors before any model loads.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.evaluation.metrics import METRICS
from steer.layers import check_layer_syntax
from steer.model.names import EMBEDDED_ALIAS
from steer.profiling.corpus import read_texts
from steer.scoring.judges import JUDGES
from steer.settings import MODES, PRESETS, ProfileSettings, TransferSettings, coerce, config_fields, recipe_fields

DEFAULT_RUN_MODES = ("prompt", "paper", "guided")
# TransferSettings field → (table, key) of a run config (`steer.settings.setting(..., config=…)`)
_CONFIG_FIELDS = config_fields()
# ProfileSettings field → its [profile] key (`setting(..., config="profile")`); `path` names a profile to reuse
_PROFILE_FIELDS = {name: key for name, (_, key) in config_fields(ProfileSettings).items()}
TUNE_KEYS = {"candidates", "limit", "start", "similarity_floor", "ppl_ceiling", "objective"}
# Every key a run config may hold, per table: a typo is an error, not a full run on defaults.
CONFIG_KEYS: dict[str, set[str]] = {
    "": {"name", "model", "data_dir", "limit", "modes", "metrics", "styles", "directions", "selection", "contrast",
         "transfer", "profile", "tune", "judge", "rerank", "llm_judge", "allow_same_model"},
    "styles.*": {"train", "dev"},
    "directions": {"from", "to", "dev", "refs"},
    "profile": {"path", *_PROFILE_FIELDS.values()},
    # [selection], [contrast], [transfer]: the settings fields that say where a config sets them
    **{t: {key for table, key in _CONFIG_FIELDS.values() if table == t} for t in ("selection", "contrast", "transfer")},
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
    # the LLM judge's model (`steer.evaluation.llm_judge`; evaluation only, never tuning), or None
    llm_judge: str | None = None
    allow_same_model: bool = False  # let the LLM judge be the model that decodes (the results say so)


def _slice(
    spec: Any, data_dir: str, limit: int | None = None, *, keep_empty: bool = False, where: str = "config"
) -> list[str]:
    """Texts from a path string or a `{path, start, stop}` table (line numbers from 0, `stop` not
    included), with `{data_dir}` filled in; `where` names it in errors (`c.toml: [styles.a] train`).
    A slice that selects no text is refused here, before any model loads."""
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - {"path", "start", "stop"})
        if unknown:
            raise SteerError(f"{where}: unknown key {unknown[0]!r} in {spec!r}; a text slice has path, start, stop")
        path, start, stop = spec.get("path"), spec.get("start", 0), spec.get("stop")
        for key, value in (("start", start), ("stop", stop)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise SteerError(f"{where}: {key} = {_shown(value)} is not valid; give a line number ≥ 0")
    else:
        path, start, stop = spec, 0, None
    if not isinstance(path, str):
        raise SteerError(f"{where}: expected a path or {{path, start, stop}}, got {_shown(spec)}")
    texts = read_texts(path.format(data_dir=data_dir), keep_empty=keep_empty)[start:stop]
    if not any(t.strip() for t in texts):
        raise SteerError(f"{where}: {spec!r} selects no text (start {start}, stop {stop}); widen the slice")
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


def _direction(
    d: dict[str, Any], styles: dict[str, Any], data: str, limit: int | None, tune_cfg: dict[str, Any], path: Path
) -> Direction:
    """One `[[directions]]` entry (or an implied one): its dev texts up to `limit`, its references,
    and its tuning texts — the `[tune] limit` dev texts after the evaluated ones (from `[tune]
    start`), or the first ones when there are too few to keep them apart."""
    src, tgt = d.get("from"), d.get("to")
    if src not in styles or tgt not in styles:
        raise SteerError(f"{path}: direction {src}→{tgt} names a style not in [styles] ({', '.join(styles)})")
    if src == tgt:
        raise SteerError(f"{path}: direction {src}→{tgt} goes from a style to itself; give two different styles")
    dev = d.get("dev", styles[src].get("dev"))
    if dev is None:
        raise SteerError(f"{path}: no dev texts for {src}→{tgt}; set styles.{src}.dev or the direction's dev")
    every = _slice(dev, data, keep_empty=bool(d.get("refs")), where=f"{path}: dev of {src}→{tgt}")
    every_refs = [
        tuple(x or None for x in _slice(r, data, keep_empty=True, where=f"{path}: refs of {src}→{tgt}"))
        for r in d.get("refs", [])
    ]
    for r in every_refs:
        if len(r) != len(every):
            raise SteerError(f"{path}: {src}→{tgt} has {len(every)} dev texts but a reference file with {len(r)}")
    tune_limit = int(tune_cfg.get("limit", 32))
    stop = len(every) if limit is None else int(limit)
    start = int(tune_cfg.get("start", stop))
    tune_stop = start + tune_limit
    overlaps = tune_stop > len(every)
    if overlaps:  # too few dev texts to keep tuning apart: tune on the first ones
        start, tune_stop = 0, tune_limit
    return Direction(
        src,
        tgt,
        tuple(every[:stop]),
        tuple(r[:stop] for r in every_refs),
        tuple(every[start:tune_stop]),
        tuple(r[start:tune_stop] for r in every_refs),
        overlaps or start < stop,
    )


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
    except UnicodeDecodeError:
        raise SteerError(f"{path} is not a UTF-8 text file; a run config is TOML (see configs/*.toml)") from None
    _check_config_keys(cfg, path)
    data = data_dir or cfg.get("data_dir", "")
    styles = cfg.get("styles", {})
    if len(styles) < 2:
        raise SteerError(f"{path}: needs a [styles.NAME] table for at least two styles")
    train, sources = {}, {}
    for name, spec in styles.items():
        if "train" not in spec:
            raise SteerError(f"{path}: style {name!r} has no 'train' corpus")
        train[name] = tuple(_slice(spec["train"], data, where=f"{path}: [styles.{name}] train"))
        sources[name] = str(spec["train"] if isinstance(spec["train"], str) else spec["train"]["path"]).format(
            data_dir=data
        )
    limit = limit if limit is not None else cfg.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise SteerError(f"{path}: limit {limit!r} is not valid; give a whole number of texts ≥ 1, or leave it out")
    tune_cfg = dict(cfg.get("tune", {}))
    unknown = sorted(set(tune_cfg) - TUNE_KEYS)
    if unknown:
        raise SteerError(f"{path}: unknown [tune] key {unknown[0]!r}; valid keys: {', '.join(sorted(TUNE_KEYS))}")
    if tune_cfg.get("objective", "j") not in TUNE_OBJECTIVES:
        raise SteerError(f"{path}: [tune] objective {tune_cfg['objective']!r} is not valid; choose one of j, guards")
    _check_tune(tune_cfg, path)
    if not isinstance(cfg.get("model", EMBEDDED_ALIAS), str):
        raise SteerError(
            f"{path}: model = {_shown(cfg['model'])} is not valid; give one model as a string, e.g. "
            f'model = "{EMBEDDED_ALIAS}"'
        )
    judge = str(cfg.get("judge", "auto"))
    if judge not in JUDGES:
        raise SteerError(f"{path}: judge {judge!r} is not valid; choose one of {', '.join(JUDGES)}")
    llm_judge, allow_same = _llm_judge_config(cfg, path)
    pairs = cfg.get("directions") or [{"from": a, "to": b} for a, b in itertools.permutations(list(styles)[:2], 2)]
    directions = [_direction(d, styles, data, limit, tune_cfg, path) for d in pairs]
    configured = cfg.get("modes", DEFAULT_RUN_MODES)
    if not isinstance(configured, list | tuple) or not configured or not all(isinstance(m, str) for m in configured):
        raise SteerError(
            f'{path}: modes {configured!r} is not valid; give a non-empty list, e.g. modes = ["prompt", "rerank"]'
        )
    modes_given = bool(modes)
    modes = tuple(modes or configured)
    for mode in modes:
        parse_mode(mode)
    repeated = next((m for i, m in enumerate(modes) if m in modes[:i]), None)
    if repeated is not None:
        where = "--modes" if modes_given else f"{path}: modes"
        raise SteerError(f"{where} {','.join(modes)} gives mode {repeated!r} twice; name each mode once")
    configured_metrics = cfg.get("metrics", METRICS)
    metrics = tuple(configured_metrics) if isinstance(configured_metrics, list | tuple) else (None,)
    if not metrics or not all(isinstance(m, str) for m in metrics):
        raise SteerError(
            f'{path}: metrics {configured_metrics!r} is not valid; give a list of names, e.g. metrics = ["j"]'
        )
    unknown_metrics = [m for m in metrics if m not in METRICS]
    if unknown_metrics:
        raise SteerError(f"{path}: unknown metric {unknown_metrics[0]!r}; choose from {', '.join(METRICS)}")
    # every field a config may set, from the settings' own metadata; the rest keep their bare defaults
    base = _base_settings(cfg, path)
    profiling = cfg.get("profile", {})
    name = cfg.get("name", path.stem)  # the file's stem is a name of one folder already
    if "name" in cfg and (not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name)):
        raise SteerError(
            f"{path}: name {_shown(name)} is not a plain name (it names the run's folder, runs/<name>); use letters, "
            'digits, ".", "_" and "-", e.g. name = "formality"'
        )
    return Experiment(
        name=name,
        model=str(cfg.get("model", EMBEDDED_ALIAS)),
        train=train,
        train_sources=sources,
        directions=tuple(directions),
        modes=modes,
        metrics=metrics,
        base=base,
        profile_settings=ProfileSettings(
            **{
                name: _whole(profiling[key], f"[profile] {key}", path)
                for name, key in _PROFILE_FIELDS.items()
                if key in profiling
            }
        ),
        profile_path=profiling.get("path"),
        tune=dict(cfg.get("tune", {})),
        judge=judge,
        rerank=_rerank_config(cfg.get("rerank", {}), path),
        llm_judge=llm_judge,
        allow_same_model=allow_same,
    )


def _base_settings(cfg: dict[str, Any], path: Path) -> TransferSettings:
    """The recipe fields the config sets, on a mode's bare settings; a bad value is one line naming
    the file, the table and the key as the config spells them."""
    given = {name: (table, key) for name, (table, key) in _CONFIG_FIELDS.items() if key in cfg.get(table, {})}

    def where(name: str) -> str:
        table, key = given[name]
        return f"{path}: [{table}] {key} = {_shown(cfg[table][key])}"

    values = {}
    for name in given:
        try:
            values[name] = coerce(name, cfg[given[name][0]][given[name][1]])
        except (SteerError, ValueError, TypeError, OverflowError) as exc:
            raise SteerError(f"{where(name)} is not valid ({exc})") from None
    check_layer_syntax(values, {name: f"{path}: [{table}] {key}" for name, (table, key) in given.items()})
    try:
        return TransferSettings.bare(**values)
    except SteerError as exc:
        named = next((n for n in given if f"`{n}`" in str(exc)), None)
        raise SteerError(f"{where(named)}: {exc}" if named else f"{path}: {exc}") from None


def _whole(value: Any, key: str, path: Path) -> Any:
    """A whole number ≥ 1 (or None: not given) for `key`; anything else is one line naming it."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise SteerError(f"{path}: {key} = {_shown(value)} is not valid; give a whole number ≥ 1")


def _shown(value: Any) -> str:
    """A config value as TOML spells it in a message: `true`, not Python's `True`."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _llm_judge_config(cfg: dict[str, Any], path: Path) -> tuple[str | None, bool]:
    """`llm_judge = "qwen2.5-coder-1.5b"` (a model spec) and `allow_same_model = true`, checked when
    the config is read: the decoding model judging its own rewrites needs `allow_same_model`."""
    judge, allow = cfg.get("llm_judge"), cfg.get("allow_same_model", False)
    if not isinstance(allow, bool):
        raise SteerError(f"{path}: allow_same_model = {allow!r} is not true or false")
    if judge is None:
        if allow:
            raise SteerError(f'{path}: allow_same_model is set but there is no llm_judge; add llm_judge = "MODEL"')
        return None, False
    if not isinstance(judge, str) or not judge.strip():
        raise SteerError(f'{path}: llm_judge = {judge!r} is not a model; e.g. llm_judge = "qwen2.5-coder-1.5b"')
    if judge.strip() == str(cfg.get("model", EMBEDDED_ALIAS)) and not allow:
        raise SteerError(
            f"{path}: llm_judge {judge!r} is the model that decodes, so it would grade its own rewrites; "
            "choose another or set allow_same_model = true (the results then say so)"
        )
    return judge.strip(), allow


def _rerank_config(table: dict[str, Any], path: Path) -> dict[str, Any]:
    """`[rerank] ladder = [0, "u0.5", 3, "2k4", "4k4"]`, `length_weight`, `style_exponent`, `examples`,
    `rung_weights = {"4k4" = 1.3}`, `usable_first`, checked when the config is read."""
    from steer.ladder import RerankSettings

    defaults = RerankSettings()
    valid = tuple(key for _, key in config_fields(RerankSettings).values())  # declared with the fields
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise SteerError(f"{path}: unknown [rerank] key {unknown[0]!r}; valid keys: {', '.join(valid)}")
    weights = table.get("rung_weights")
    if weights is not None and not isinstance(weights, dict):
        raise SteerError(f'{path}: [rerank] rung_weights must be a table, e.g. rung_weights = {{"4k4" = 1.3}}')
    usable_first = table.get("usable_first", defaults.usable_first)
    if not isinstance(usable_first, bool):
        raise SteerError(f"{path}: [rerank] usable_first must be true or false, got {usable_first!r}")
    out = {
        "ladder": table.get("ladder", defaults.ladder),
        "length_weight": float(table.get("length_weight", defaults.length_weight)),
        "style_exponent": float(table.get("style_exponent", defaults.style_exponent)),
        "examples": int(table.get("examples", defaults.examples)),
        "rung_weights": weights,
        "usable_first": usable_first,
    }
    if isinstance(out["ladder"], str):
        out["ladder"] = out["ladder"].split(",")
    try:
        checked = RerankSettings(**out)
    except (SteerError, TypeError) as exc:
        raise SteerError(f"{path}: [rerank] {exc}") from None
    out["ladder"], out["rung_weights"] = checked.ladder, checked.rung_weights
    return out


def _check_tune(tune_cfg: dict[str, Any], path: Path) -> None:
    """[tune]'s values, checked when the config is read (not hours later, after profiling): whole
    numbers of texts, positive finite guards, candidates a non-empty list of distinct presets or tables."""
    for key, least in (("limit", 1), ("start", 0)):
        value = tune_cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise SteerError(
                f"{path}: [tune] {key} {value!r} is not valid; give a whole number ≥ {least}, or leave it out"
            )
    for key in ("similarity_floor", "ppl_ceiling"):
        value = tune_cfg.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0
        ):
            raise SteerError(f"{path}: [tune] {key} {value!r} is not valid; give a positive number, or leave it out")
    candidates = tune_cfg.get("candidates")
    if candidates is None:
        return
    if not isinstance(candidates, list) or not candidates:
        raise SteerError(
            f"{path}: [tune] candidates {candidates!r} is not valid; give a non-empty list of presets or tables, "
            'e.g. candidates = ["guided", {preset = "guided", strength = 3.0}], or leave it out'
        )
    seen: set[str] = set()
    for candidate in candidates:
        if not isinstance(candidate, str | dict):
            raise SteerError(f"{path}: [tune] candidate {candidate!r} is neither a preset name nor a table of settings")
        label, _ = _candidate(candidate)  # a bad candidate is an error when the config is read, not hours later
        if label in seen:
            raise SteerError(f"{path}: [tune] candidate {candidate!r} is listed twice; list each candidate once")
        seen.add(label)


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
        check_layer_syntax(fields)
        TransferSettings.bare(**fields)
    except SteerError as exc:
        raise SteerError(f"config: tune candidate {given!r}: {exc}") from None
    label = "-".join([preset or ""] + [f"{k}={v}" for k, v in spec.items()]).strip("-")
    return label.replace("%", "pct").replace("+", "_").replace(":", "_"), fields
