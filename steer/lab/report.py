"""`steer report`'s results document: a header (the user's Markdown, else one naming the runs), every
run's tables, the computed verdict, random samples, a link to the findings and the tuning trade-off —
written from run directories only (`results.json`, `tuned.json`); no experiment's prose lives here.

Data flows one way: `steer run` writes `results.json` (+ `tuned.json` from tuning) into a run
directory; this module reads them and renders Markdown and PNG. Thresholds in the verdict come
from the runs' `tuned.json` (`similarity_floor`, `ppl_ceiling`), never from constants here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import check_not_an_input, write_text
from steer.lab.tables import measured, results_table
from steer.labels import describe
from steer.rewriting.records import PPL_CEILING, SIMILARITY_FLOOR, RunResults, TuneResult

# The marker `steer report` puts on the first line: only a file that has it is replaced (--force).
REPORT_MARKER = "<!-- written by `steer report`; edit research/findings.md or the runs, not this file -->"

# The verdict's targets (issue 21): usable% over prompting's, and ceilings on the failure rates.
USABLE_GAIN, META_MAX, NEAR_LOOP_MAX, INVENTED_MAX = 15.0, 2.0, 3.0, 5.0
SAMPLES_PER_DIRECTION, SAMPLE_SEED = 10, 0


class RunReport:
    """One run directory as the report reads it: results.json and, when tuned, tuned.json."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        results = self.path / "results.json"
        if not results.is_file():
            raise SteerError(f"{self.path} has no results.json; run 'steer run CONFIG -o {self.path}' first")
        self.results = RunResults.read(results).to_dict()
        tuned = self.path / "tuned.json"
        self.tuned = TuneResult.read(tuned) if tuned.is_file() else None

    @property
    def floor(self) -> float:
        return self.tuned.similarity_floor if self.tuned is not None else SIMILARITY_FLOOR

    @property
    def ceiling(self) -> float:
        return self.tuned.ppl_ceiling if self.tuned is not None else PPL_CEILING

    def trials(self) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], bool]]:
        """Every steered candidate tuning scored: (direction, settings, metrics, prompt's metrics, chosen?)."""
        if self.tuned is None:
            return
        for t in self.tuned.trials:
            if t["settings"].get("mode") == "prompt":
                continue
            pick = self.tuned.chosen[t["direction"]]
            yield t["direction"], t["settings"], t["metrics"], pick.prompt_metrics, pick.settings == t["settings"]


# The headline measure: the LLM judge's usable when every compared row has it (it agrees with blind
# reads better than the rules: docs/results.md, "Which measure agrees with reading"), else the rules'.
HEADLINES = {"llm_usable": "LLM-usable%", "usable": "Usable%"}


def _compared(runs: Sequence[RunReport]) -> Iterator[tuple[str, RunReport, str, dict[str, Any], dict[str, Any]]]:
    """Every steered row beside its direction's plain prompt: (direction, run, mode, metrics, prompt's)."""
    for run in runs:
        rows = run.results["rows"]
        for direction in dict.fromkeys(r["direction"] for r in rows):
            by_mode = {r["mode"]: r["metrics"] for r in rows if r["direction"] == direction}
            base = by_mode.get("prompt")
            if base is None:
                continue
            for mode, m in by_mode.items():
                if mode != "prompt":
                    yield direction, run, mode, m, base


def headline_measure(runs: Sequence[RunReport]) -> str:
    """`llm_usable` when every steered row and its prompt were graded by the LLM judge, else `usable`:
    one measure heads the whole verdict, so no two rows are compared on different scales."""
    pairs = list(_compared(runs))
    judged = bool(pairs) and all(measured(m.get("llm_usable")) and measured(b.get("llm_usable")) for *_, m, b in pairs)
    return "llm_usable" if judged else "usable"


def verdict(runs: Sequence[RunReport]) -> str:
    """Per direction and steered mode against prompting: the headline measure (`headline_measure`)
    and the faithfulness ceilings first (issue 21's targets), the other usable beside it, then
    accuracy, similarity and J — computed from the runs."""
    floors = sorted({r.floor for r in runs})
    floor = floors[0] if len(floors) == 1 else None
    sim_rule = f"Sim ≥ {floor:g}× prompting's" if floor is not None else "Sim within each run's tuning floor"
    key = headline_measure(runs)
    name = HEADLINES[key].rstrip("%")
    lines = [
        "## Verdict (computed from the tables above)",
        "",
        f"Δ = steered − prompt (points). target = Δ{name} ≥ +{USABLE_GAIN:g}, Meta ≤ {META_MAX:g}%, "
        f"NearLoop ≤ {NEAR_LOOP_MAX:g}%, Inv ≤ {INVENTED_MAX:g}%, ΔAcc ≥ +10 (or Acc ≥ 95%) and {sim_rule} "
        "(similarity by the evaluation encoder)."
        + (" The headline is the LLM judge's usable; the rules' Usable% is beside it." if key == "llm_usable" else ""),
        "",
    ]
    other = "| Usable%: steered (prompt) | ΔUsable " if key == "llm_usable" else ""
    lines += [
        f"| direction | run | mode | {HEADLINES[key]}: steered (prompt) | Δ{name} {other}| Meta% | NearLoop% "
        "| Inv% | ΔAcc | Sim ratio | ΔJ | PPL ratio | target? |",
        "|---|---|---|---|---|" + ("---|---|" if other else "") + "---|---|---|---|---|---|---|---|",
    ]
    header = len(lines)
    for direction, run, mode, m, base in _compared(runs):
        lines.append(_verdict_row(direction, run, mode, m, base, key))
    if len(lines) == header:  # no row: no steered mode beside a plain prompt
        lines[2:] = ["No steered mode ran beside the plain prompt in one direction: there is nothing to compare."]
    return "\n".join(lines) + "\n"


def _pct(m: dict[str, Any], key: str) -> str:
    return f"{100 * m[key]:.0f}" if measured(m.get(key)) else "—"


def _delta(m: dict[str, Any], base: dict[str, Any], key: str) -> float | None:
    """`key`'s gain in points over the prompt's, None where either was not measured (absent or NaN)."""
    return round(100 * (m[key] - base[key]), 1) if measured(m.get(key)) and measured(base.get(key)) else None


def _verdict_row(direction: str, run: RunReport, mode: str, m: dict[str, Any], base: dict[str, Any], key: str) -> str:
    """One verdict line, headed by `key`'s gain; a metric a run did not compute shows as — and fails the target."""
    sim = m["similarity"] / base["similarity"] if m.get("similarity") and base.get("similarity") else None
    ppl = m["ppl"] / base["ppl"] if m.get("ppl") and base.get("ppl") else None
    gain = _delta(m, base, "accuracy")
    usable = _delta(m, base, key)
    hit = (
        usable is not None
        and gain is not None
        and sim is not None
        and usable >= USABLE_GAIN
        and round(100 * m.get("meta", 1.0), 1) <= META_MAX
        and round(100 * m.get("near_loop", 1.0), 1) <= NEAR_LOOP_MAX
        and round(100 * m.get("invented", 1.0), 1) <= INVENTED_MAX
        and (gain >= 10 or round(100 * m["accuracy"], 1) >= 95)
        and round(sim, 3) >= run.floor
    )
    delta_j = f"{100 * (m['j'] - base['j']):+.1f}" if "j" in m and "j" in base else "—"
    beside = ""
    if key != "usable":
        rules = _delta(m, base, "usable")
        beside = f"{_pct(m, 'usable')} ({_pct(base, 'usable')}) | {'—' if rules is None else f'{rules:+.0f}'} | "
    return (
        f"| {direction.replace('-', ' → ')} | {run.path.name} (n = {m.get('n', '?')}) | {mode} | "
        f"{_pct(m, key)} ({_pct(base, key)}) | {'—' if usable is None else f'{usable:+.0f}'} | {beside}"
        f"{_pct(m, 'meta')} | {_pct(m, 'near_loop')} | {_pct(m, 'invented')} | "
        f"{'—' if gain is None else f'{gain:+.0f}'} | {'—' if sim is None else f'{sim:.2f}'} | {delta_j} | "
        f"{'—' if ppl is None else f'{ppl:.2f}'} | {'**yes**' if hit else 'no'} |"
    )


def random_samples(run: RunReport, modes: Sequence[str] = ("prompt", "rerank")) -> str:
    """Ten rewrites per direction drawn at random (seed 0, not chosen): the source, then each
    mode's output with the faithfulness rules' flags, from the run's outputs/ files."""
    import random

    from steer.rewriting.records import read_transfer_records
    from steer.scoring.faithfulness import flags, instruction_text

    lines = [f"### Random samples — {run.path.name}", ""]
    for direction in dict.fromkeys(r["direction"] for r in run.results["rows"]):
        outputs = {}
        for mode in modes:
            path = run.path / "outputs" / f"{direction}.{mode}.jsonl"
            if path.is_file():
                outputs[mode] = read_transfer_records(path)
        if not outputs:
            continue
        n = min(len(r) for r in outputs.values())
        picks = sorted(random.Random(SAMPLE_SEED).sample(range(n), min(SAMPLES_PER_DIRECTION, n)))
        lines += [f"#### {direction.replace('-', ' → ')} (texts {', '.join(str(i + 1) for i in picks)} of {n})", ""]
        for i in picks:
            source = next(iter(outputs.values()))[i].source_text
            lines.append(f"- **source**: {_cell(source)}")
            for mode, records in outputs.items():
                record = records[i]
                out = record.output or ""
                template = record.prompt_template or _packaged_template(record.source_style, record.target_style)
                instruction = instruction_text(template, record.source_style, record.target_style) if template else ""
                names = flags(out, source, instruction).names()
                mark = f" — *{', '.join(names)}*" if names else ""
                lines.append(f"  - *{mode}*: {_cell(out) or '(empty)'}{mark}")
        lines.append("")
    return "\n".join(lines)


def _packaged_template(source: str, target: str) -> str:
    """The packaged prompt of a direction (what a run prompts with unless its config sets one)."""
    from steer.prompts import load_prompts

    prompts = load_prompts()
    return prompts.get(f"{source}->{target}", prompts["default"])


def _cell(text: str) -> str:
    """A text as one Markdown list item: one line, no stray markup."""
    return " ".join(text.split()).replace("|", "\\|")


def _tune_limit(runs: Sequence[RunReport]) -> int | None:
    limits = {r.tuned.limit for r in runs if r.tuned is not None}
    if len(limits) > 1:
        raise SteerError(f"the runs were tuned on different numbers of texts: {sorted(limits)}; tune them alike")
    return limits.pop() if limits else None


def tradeoff(runs: Sequence[RunReport]) -> str:
    """Every candidate `steer tune` scored (the trade-off curve), per direction, as Δ vs prompting."""
    lines = [
        f"## Trade-off: every tuning candidate ({_tune_limit(runs)} held-out dev texts per direction)",
        "",
        "Δ in points against the plain prompt on the same texts, scored with the *selection* judge (the one "
        "tuning chooses by, not the evaluation judge); ratios against the prompt's similarity and PPL.",
        "",
        "| direction | recipe | ΔJ | ΔAcc | Sim ratio | PPL ratio | Loop% | chosen |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for direction, settings, m, base, chosen in run.trials():
            lines.append(
                f"| {direction.replace('-', ' → ')} | {describe(settings)} | {100 * (m['j'] - base['j']):+.1f} | "
                f"{100 * (m['accuracy'] - base['accuracy']):+.0f} | {m['similarity'] / base['similarity']:.2f} | "
                f"{m['ppl'] / base['ppl']:.2f} | {100 * m['repetition']:.0f} | {'**yes**' if chosen else ''} |"
            )
    return "\n".join(lines) + "\n"


# The metrics the trade-off table and chart read from every tuning trial (and the plain prompt's).
TRADEOFF_METRICS = ("j", "accuracy", "similarity", "ppl", "repetition")
# The PNG Software text of the trade-off chart: `--force` replaces a chart only when it carries it.
CHART_SOFTWARE = "steer report"


def tradeoff_missing(runs: Sequence[RunReport]) -> list[str]:
    """The trade-off metrics some tuning trial lacks (a run config's `metrics` without them):
    then the document says so instead of the trade-off."""
    scored = [m for r in runs for _, _, m, base, _ in r.trials() for m in (m, base)]
    return [k for k in TRADEOFF_METRICS if any(k not in m for m in scored)]


def check_chart_target(chart: Path, force: bool) -> None:
    """Refuse to replace a trade-off chart `steer report` did not write (its PNG carries
    `CHART_SOFTWARE`), or any without `force` — checked before anything is written."""
    if not os.path.lexists(chart):
        return
    if not force:
        raise SteerError(f"{chart} exists; add `force` to replace it")
    if chart.is_symlink() or not chart.is_file():
        what = "a symbolic link" if chart.is_symlink() else "not a regular file"
        raise SteerError(f"{chart} is {what}, which 'steer report' never replaces; pick another -o")
    if f"Software\x00{CHART_SOFTWARE}".encode() not in chart.read_bytes():
        raise SteerError(f"{chart} was not written by 'steer report'; refusing to replace it (pick another -o)")


def tradeoff_chart(runs: Sequence[RunReport], path: Path) -> bool:
    """Scatter of every tuning candidate: similarity ratio (x) against accuracy gain (y), per recipe.

    The target region is top right of the dashed lines (ΔAcc ≥ +10, Sim ≥ the floor); PPL is not shown.
    """
    if tradeoff_missing(runs):
        return False
    points: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        for _direction, settings, m, base, _chosen in run.trials():
            xy = (m["similarity"] / base["similarity"], 100 * (m["accuracy"] - base["accuracy"]))
            points.setdefault(describe(settings), []).append(xy)
    if not points:
        return False
    from steer.plots import scatter_chart

    scatter_chart(
        path,
        points,
        xline=runs[0].floor,
        yline=10,
        xlabel="similarity to source, ratio to plain prompting",
        ylabel="style accuracy gain over prompting (points)",
        title=f"Tuning candidates, all directions ({_tune_limit(runs)} held-out dev texts each)",
        software=CHART_SOFTWARE,
    )
    return True


def default_header(runs: Sequence[RunReport], run_dirs: Sequence[str | Path]) -> str:
    """The document's header when no `header` file is given: what the runs are and how to write the
    document again — no experiment's prose (that is the header file's, e.g. docs/results-header.md)."""
    models = sorted({str(r.results.get("model_id", "?")) for r in runs})
    names = ", ".join(str(r.results.get("experiment", r.path.name)) for r in runs)
    return (
        f"# Results: {names}\n\nModel: {', '.join(models)}. Written by `steer report "
        + " ".join(str(d) for d in run_dirs)
        + '`; the columns are explained in `steer eval --help` and docs/usage.md ("Evaluation").\n'
    )


def results_document(
    runs: Sequence[RunReport], header: str, findings: str | None = None, chart: str | None = None
) -> str:
    """The whole results document: `header` (Markdown), each run's table (+ tuned choices), the
    verdict, random samples, a link to the findings (`findings`: its path from the document) and
    the trade-off."""
    if not runs:
        raise SteerError("no run directories given; pass the directories 'steer run -o' wrote")
    parts = [REPORT_MARKER + "\n\n" + header.rstrip("\n") + "\n"]
    for run in runs:
        table = results_table(run.results).replace("# ", "## ", 1).replace("\n## ", "\n### ")
        parts.append(table)
        if run.tuned is not None:
            chosen = run.tuned.chosen.items()
            parts.append("Tuned choices: " + "; ".join(f"{d}: {describe(c.settings)}" for d, c in chosen) + "\n")
    parts.append(verdict(runs))
    parts.append(
        "## Random samples (seed 0, not chosen)\n\nIn italics after an output: the faithfulness rules that flag "
        'it (README, "Faithfulness"; the meta rule with the run\'s instruction). (empty) is an empty output.\n'
    )
    for run in runs:
        parts.append(random_samples(run))
    if findings:
        parts.append(
            f"## Findings\n\nThe measurements and blind reads behind these tables, dated and newest first: "
            f"[{Path(findings).name}]({findings}).\n"
        )
    missing = tradeoff_missing(runs)
    if any(True for r in runs for _ in r.trials()) and missing:
        parts.append(
            "## Trade-off\n\nNot shown: the tuning trials were not scored with "
            + ", ".join(missing)
            + " (add them to the run config's `metrics` and tune again).\n"
        )
    elif any(True for r in runs for _ in r.trials()):
        parts.append(tradeoff(runs))
        if chart:
            parts.append(f"![trade-off of the tuning candidates]({chart})\n")
    return "\n".join(parts)


def check_report_target(path: Path, force: bool) -> None:
    """Refuse to replace a file `steer report` did not write, or any file without `force`."""
    if path.is_dir():
        raise SteerError(f"-o {path} is a directory; give the Markdown file to write, e.g. docs/results.md")
    if not path.exists():
        return
    if not force:
        raise SteerError(f"{path} exists; add `force` to replace it")
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = fh.readline().strip()
    if first != REPORT_MARKER:
        raise SteerError(f"{path} was not written by 'steer report'; refusing to replace it (pick another -o)")


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    findings: str | Path | None = None,
    header: str | Path | None = None,
    force: bool = False,
) -> Path:
    """Write the results document for `run_dirs` to `out` (and its trade-off chart beside it): the
    `header` file's Markdown on top (else `default_header`), a link to `findings` (not a copy). A
    run named twice (`RUN RUN`, `RUN ./RUN/`) is refused, as its tables would be printed twice."""
    out = Path(out)
    seen: dict[Path, str | Path] = {}
    for given in run_dirs:
        where = Path(given).resolve()
        if where in seen:
            also = "" if str(seen[where]) == str(given) else f" (as {seen[where]} and {given})"
            raise SteerError(f"run directory {given} is given twice{also}; name each run once")
        seen[where] = given
    runs = [RunReport(p) for p in run_dirs]  # the inputs first: a missing run is the error to show
    inputs: dict[str, str | Path | None] = {"the `findings` file": findings, "the `header` file": header}
    inputs.update({f"{r.path}'s results.json": r.path / "results.json" for r in runs})
    check_not_an_input(out, inputs)
    check_report_target(out, force)
    link = None
    if findings is not None:
        fpath = Path(findings)
        if not fpath.is_file():
            raise SteerError(f"`findings` {fpath} does not exist; write it or drop `findings`")
        link = os.path.relpath(fpath.resolve(), out.resolve().parent)
    if header is not None:
        hpath = Path(header)
        if not hpath.is_file():
            raise SteerError(f"`header` {hpath} does not exist; write it (Markdown) or drop `header`")
        top = hpath.read_text(encoding="utf-8")
    else:
        top = default_header(runs, run_dirs)
    chart = out.with_name(f"{out.stem}-tradeoff.png")
    drawn = not tradeoff_missing(runs) and any(True for r in runs for _ in r.trials())
    document = results_document(runs, top, link, chart.name if drawn else None)  # built before anything is written
    if drawn:
        check_chart_target(chart, force)
        tradeoff_chart(runs, chart)
    write_text(out, document)
    return out
