"""Typed, versioned records of what steer writes as JSON — a rewrite, a tune result, a run's
results — each with exactly one writer and one reader.

A rewrite is one JSONL line (`steer transfer -o x.jsonl`, a run's `outputs/<direction>.<mode>.jsonl`);
a tune result is `tuned.json`; a run's results are `results.json`. Every record carries
`record_version`; files written before versioning read as version 1. Readers reject what they
cannot read with one line saying which command rewrites the file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import atomic_path, json_lines, sha256_file, write_text

RECORD_VERSION = 1
# `[tune] similarity_floor` and `ppl_ceiling`: a candidate's similarity ≥ floor × prompting's and its
# perplexity ≤ ceiling × prompting's (the "guards" objective; the report's trade-off uses them too)
SIMILARITY_FLOOR, PPL_CEILING = 0.8, 1.2


def _load_json(path: Path, remedy: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SteerError(f"{path} does not exist; {remedy}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SteerError(f"{path} cannot be read as JSON ({exc}); {remedy}") from None


def check_record_version(data: dict[str, Any], path: Path, remedy: str) -> None:
    """A record's (or file's) `record_version` is one this steer reads: newer is "upgrade steer"."""
    version = data.get("record_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise SteerError(
            f"{path} has record version {version!r}, which is not a version number (steer writes 1 to "
            f"{RECORD_VERSION}); the file was changed after steer wrote it — {remedy}"
        )
    if version > RECORD_VERSION:
        raise SteerError(
            f"{path} has record version {version!r}; this steer reads up to {RECORD_VERSION}: upgrade steer"
        )
    if version < 1:
        raise SteerError(f"{path} has record version {version!r}; {remedy}")


@dataclass(frozen=True)
class TransferRecord:
    """One rewrite and everything needed to reproduce and audit it."""

    source_text: str
    output: str
    raw_output: str
    source_style: str
    target_style: str
    mode: str
    model_id: str
    fingerprint: str
    settings: dict[str, Any] | None = None
    recipe: str | None = None
    truncated: bool | None = None
    key: str | None = None  # runs: hash of the settings and texts, so finished work is reused
    profile: str | None = None
    profile_sha256: str | None = None
    prompt_template: str | None = None
    seed: int | None = None
    steer_version: str | None = None
    rerank: dict[str, Any] | None = None  # the rerank choice (and, when kept, every candidate)
    ladder: str | None = None
    length_weight: float | None = None
    style_exponent: float | None = None
    rung_weights: dict[str, float] | None = None  # rerank: weights on rungs' scores
    usable_first: bool | None = None  # rerank: a candidate the selection side reads as usable first
    weights: str | None = None  # the lighter linear format decoding ran with (`--dtype fp16-linear`, …)
    # the steps at which a plausibility filter weakened the recipe, by filter ("guidance", "contrast"),
    # and the reply's new tokens ("of"): how often the unsteered model overruled the steering
    filtered_steps: dict[str, int] | None = None
    record_version: int = RECORD_VERSION

    @classmethod
    def of(cls, result: Any, source: str, target: str, mode: str, lm: Any, **extra: Any) -> TransferRecord:
        """The record of one `TransferResult` decoded by `lm` (its model id and fingerprint), plus
        the caller's extra fields (settings, recipe, profile, rerank choice, run key, …)."""
        return cls(
            source_text=result.text,
            output=result.output,
            raw_output=result.raw_output,
            source_style=source,
            target_style=target,
            mode=mode,
            model_id=lm.model_id,
            fingerprint=lm.fingerprint,
            weights=getattr(lm, "weights", None),
            **extra,
        )

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready fields; fields that are None are left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def to_json(self) -> str:
        """One JSONL line (`to_dict`); the characters some readers split lines at (U+2028, U+2029,
        U+0085) are escaped, so every reader sees one record per line."""
        line = json.dumps(self.to_dict(), ensure_ascii=False)
        return line.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> TransferRecord:
        known = {f.name for f in fields(cls)}
        required = ("source_text", "output", "source_style", "target_style", "mode", "model_id", "fingerprint")
        absent = [m for m in required if m not in data]
        if absent:
            raise SteerError(f"{where} has no {absent[0]!r} field; it is not a steer rewrite record")
        values = {k: v for k, v in data.items() if k in known}
        values.setdefault("raw_output", data["output"])
        return cls(**values)


def write_transfer_records(path: str | Path, records: Iterable[TransferRecord]) -> int:
    """The one writer of rewrite records: JSONL, written atomically, streamed line by line (so a
    generator of records never sits in memory whole); returns how many it wrote."""
    return write_outputs(path, records, as_records=True)


def write_outputs(
    path: str | Path, records: Iterable[TransferRecord], *, as_records: bool | None = None, replace: bool = True
) -> int:
    """`steer transfer -o FILE`: the records as JSONL (`as_records`, by default when FILE ends in
    .jsonl), else one output per line (newlines inside an output become spaces); atomic, streamed;
    returns how many it wrote. `replace=False`: FileExistsError, and nothing written, when FILE
    exists (`atomic_path`)."""
    as_records = Path(path).suffix == ".jsonl" if as_records is None else as_records
    count = 0
    with atomic_path(path, replace=replace) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write((record.to_json() if as_records else record.output.replace("\n", " ")) + "\n")
            count += 1
        if not count:
            fh.write("\n")
    return count


def read_transfer_records(path: str | Path) -> list[TransferRecord]:
    """The one reader of rewrite records (a steer JSONL file)."""
    path = Path(path)
    remedy = "write it again with 'steer transfer -o FILE.jsonl' or 'steer run'"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SteerError(f"{path} does not exist; {remedy}") from None
    except UnicodeDecodeError:
        raise SteerError(f"{path} is not valid UTF-8; {remedy}") from None
    records = []
    for number, data in json_lines(lines, path, remedy):
        check_record_version(data, path, remedy)
        records.append(TransferRecord.from_dict(data, f"{path}: line {number}"))
    return records


@dataclass(frozen=True)
class TunedChoice:
    """The recipe `steer tune` kept for one direction, with its and the plain prompt's metrics."""

    settings: dict[str, Any]
    metrics: dict[str, Any]
    prompt_metrics: dict[str, Any]
    tuned_on_evaluated_texts: bool = False


@dataclass(frozen=True)
class TuneResult:
    """`tuned.json`: per direction the chosen recipe, plus every candidate scored (the trials)."""

    objective: str
    selection_judge: str
    similarity_floor: float
    ppl_ceiling: float
    limit: int
    chosen: dict[str, TunedChoice]
    trials: list[dict[str, Any]] = field(default_factory=list)
    record_version: int = RECORD_VERSION

    def write(self, path: str | Path) -> None:
        """The one writer of tuned.json: strict JSON like results.json (a NaN metric, e.g. BLEU
        without references, written as null and read back as NaN)."""
        write_text(path, json.dumps(strict_json(asdict(self)), indent=2, allow_nan=False))

    @classmethod
    def read(cls, path: str | Path) -> TuneResult:
        """The one reader of tuned.json."""
        path = Path(path)
        remedy = "create it with 'steer tune CONFIG' (or 'steer run --tune')"
        data = _load_json(path, remedy)
        if not isinstance(data, dict) or not isinstance(data.get("chosen"), dict):
            raise SteerError(f"{path} is not a tuned.json written by 'steer tune'; {remedy}")
        check_record_version(data, path, remedy)
        again = "write it again with 'steer tune CONFIG'"
        if not data["chosen"]:
            raise SteerError(f"{path} chooses nothing for any direction ('chosen' is empty); {again}")
        chosen = {}
        for name, c in data["chosen"].items():
            if not isinstance(c, dict) or not isinstance(c.get("settings"), dict):
                raise SteerError(f"{path} comes from an older 'steer tune'; run 'steer tune' again")
            chosen[name] = TunedChoice(
                c["settings"],
                _metrics(c.get("metrics", {}), path, f"chosen {name!r} metrics", again),
                _metrics(c.get("prompt_metrics", {}), path, f"chosen {name!r} prompt_metrics", again),
                bool(c.get("tuned_on_evaluated_texts")),
            )
        trials = data.get("trials", [])
        if not isinstance(trials, list):
            raise SteerError(f"{path}: 'trials' is {type(trials).__name__}, not a list; {again}")
        for k, t in enumerate(trials):
            if not (isinstance(t, dict) and isinstance(t.get("settings"), dict) and isinstance(t.get("metrics"), dict)):
                raise SteerError(f"{path}: trial {k} lacks its settings or metrics table; {again}")
            if t.get("direction") not in chosen:
                raise SteerError(
                    f"{path}: trial {k} names direction {t.get('direction')!r}, which 'chosen' does not have "
                    f"(it has: {', '.join(chosen)}); {again}"
                )
        trials = [
            {**t, "metrics": _metrics(t["metrics"], path, f"trial {k} metrics", again)} for k, t in enumerate(trials)
        ]
        for key, default in (("similarity_floor", SIMILARITY_FLOOR), ("ppl_ceiling", PPL_CEILING), ("limit", 0)):
            value = data.get(key, default)
            if not _a_number(value) or value != value:
                raise SteerError(f"{path}: {key} is {value!r}, not a number; {again}")
        return cls(
            objective=str(data.get("objective", "guards")),
            selection_judge=str(data.get("selection_judge", "")),
            similarity_floor=float(data.get("similarity_floor", SIMILARITY_FLOOR)),
            ppl_ceiling=float(data.get("ppl_ceiling", PPL_CEILING)),
            limit=int(data.get("limit", 0)),
            chosen=chosen,
            trials=trials,
            record_version=int(data.get("record_version", 1)),
        )

    def settings_for(self, direction: str, path: str | Path = "tuned.json") -> dict[str, Any]:
        """The settings chosen for `direction` ("formal-informal"); an error lists the tuned ones."""
        if direction not in self.chosen:
            have = ", ".join(self.chosen) or "none"
            raise SteerError(f"{path} has no tuned settings for {direction.replace('-', ' → ')}; it has: {have}")
        return dict(self.chosen[direction].settings)


@dataclass(frozen=True)
class RunResults:
    """`results.json`: one row per direction × mode with its settings and metrics."""

    experiment: str
    model_id: str
    fingerprint: str
    rows: list[dict[str, Any]]
    judge: str | None = None
    judge_heldout_accuracy: dict[str, float] = field(default_factory=dict)
    classifier_heldout_accuracy: float | None = None
    tuned: dict[str, Any] = field(default_factory=dict)
    record_version: int = RECORD_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: str | Path) -> None:
        """The one writer of results.json: strict JSON, a metric that is not a number (NaN: nothing to
        measure) written as null and read back as NaN."""
        write_text(path, json.dumps(strict_json(self.to_dict()), indent=2, allow_nan=False))

    @classmethod
    def read(cls, path: str | Path) -> RunResults:
        """The one reader of results.json."""
        path = Path(path)
        remedy = f"run 'steer run CONFIG -o {path.parent}' again"
        data = _load_json(path, remedy)
        if not isinstance(data, dict) or "rows" not in data or "experiment" not in data:
            raise SteerError(f"{path} is not a 'steer run' results file; {remedy}")
        check_record_version(data, path, remedy)
        known = {f.name for f in fields(cls)}
        missing = [k for k in ("model_id", "fingerprint") if k not in data]
        rows = data["rows"]
        if missing or not isinstance(rows, list) or not rows:
            what = f"has no {missing[0]!r}" if missing else "has 'rows' that are not a list" if rows else "has no rows"
            raise SteerError(f"{path} {what}; it is not a complete results file — {remedy}")
        for number, row in enumerate(rows, start=1):
            needed = ("direction", "mode", "metrics", "settings")
            if not isinstance(row, dict) or any(k not in row for k in needed) or not isinstance(row["metrics"], dict):
                raise SteerError(
                    f"{path}: row {number} lacks one of {', '.join(needed)} (or its metrics are not a table); {remedy}"
                )
            if not (
                isinstance(row["direction"], str) and isinstance(row["mode"], str) and isinstance(row["settings"], dict)
            ):
                raise SteerError(
                    f"{path}: row {number}'s direction and mode must be names and its settings a table; this file was "
                    f"changed after 'steer run' wrote it — {remedy}"
                )
            for name, value in row["metrics"].items():
                if not _a_metric(name, value):
                    raise SteerError(
                        f"{path}: row {number}'s metric {name!r} is {value!r}, not a number (or null); "
                        f"this file was changed after 'steer run' wrote it — {remedy}"
                    )
            rerank = row.get("rerank")
            if rerank and not (
                isinstance(rerank, dict)
                and isinstance(rerank.get("chosen_strengths"), dict)
                and _a_number(rerank.get("probe_heldout_accuracy"))
            ):
                raise SteerError(
                    f"{path}: row {number}'s rerank is not a table with chosen_strengths and a number "
                    f"probe_heldout_accuracy; this file was changed after 'steer run' wrote it — {remedy}"
                )
        for name in ("judge", "tuned"):
            kind = str if name == "judge" else dict
            if data.get(name) is not None and not isinstance(data[name], kind):
                shown = "a name" if kind is str else "a table"
                raise SteerError(f"{path}: {name!r} is {data[name]!r}, not {shown}; this file was changed — {remedy}")
        held = data.get("judge_heldout_accuracy") or {}
        if not isinstance(held, dict) or not all(v is None or _a_number(v) for v in held.values()):
            raise SteerError(f"{path}: judge_heldout_accuracy is not a table of numbers; {remedy}")
        for row in rows:
            row["metrics"] = _nan_for_null(row["metrics"])
        data["judge_heldout_accuracy"] = _nan_for_null(held)
        return cls(**{k: v for k, v in data.items() if k in known})


_NAMED = ("judge", "llm_judge")  # metrics whose value is a name
_NESTED = ("signatures", "sentences")  # metrics whose value is a table or list: sacrebleu's, per sentence


def _a_metric(name: str, value: Any) -> bool:
    """A value a results row may hold under `name`: a number, null (NaN), a name where one is
    expected, or a nested table or list where one is expected (sacrebleu's signatures,
    per-sentence scores) — a list where the table shows a number (`"bleu": [1]`) is refused."""
    if value is None:
        return True
    if isinstance(value, dict | list):
        return name in _NESTED
    if isinstance(value, str):
        return name in _NAMED
    return _a_number(value)


def _a_number(value: Any) -> bool:
    """An int or float, not a bool (JSON's true is no score)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _metrics(metrics: Any, path: Path, what: str, remedy: str) -> dict[str, Any]:
    """A metrics table of tuned.json read back (`_nan_for_null`), each value checked by `_a_metric`."""
    if not isinstance(metrics, dict):
        raise SteerError(f"{path}: {what} is {metrics!r}, not a table; {remedy}")
    for name, value in metrics.items():
        if not _a_metric(name, value):
            raise SteerError(f"{path}: {what} {name!r} is {value!r}, not a number (or null); {remedy}")
    return dict(_nan_for_null(metrics))


def _nan_for_null(metrics: Any) -> Any:
    """A metrics table read back: each null (a NaN `strict_json` wrote) is NaN again; anything
    that is not a table is returned as it is, for the reader's own check to name."""
    if not isinstance(metrics, dict):
        return metrics
    return {k: math.nan if v is None else v for k, v in metrics.items()}


def strict_json(value: Any) -> Any:
    """`value` with every non-finite float replaced by None, nested lists and dicts included."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def check_recorded_profile(path: Path, digest: str | None, near: Path | None = None) -> Path:
    """The profile a transfer record names, which must still be the file the rewrites were made
    with: the recorded (relative) path from the current folder, else from the records file's
    folder `near` or a folder above it, whichever has the recorded sha256."""
    from steer.files import recorded_paths

    found = list(recorded_paths(path, near or Path.cwd()))
    if not found:
        raise SteerError(
            f"the records name profile {path}, which does not exist from {Path.cwd()} or the records' folder; "
            "pass `profile_path` or `train_styles`"
        )
    for candidate in found:
        if not digest or sha256_file(candidate) == digest:
            return candidate
    raise SteerError(
        f"profile {found[0]} has changed since these rewrites were made (sha256 differs); pass `profile_path` "
        "or `train_styles` NAME=SOURCE"
    )
