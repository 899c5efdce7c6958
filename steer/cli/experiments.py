"""`steer run`, `tune`, `report`: run experiments over run configs and write the results document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from steer.cli.app import OUTPUT_FILE, cli
from steer.cli.running import RayOptions, run_options, runner_for
from steer.distributed import is_main_process


@cli.command()
@run_options
@click.option("--tune", "do_tune", is_flag=True, help="Pick a recipe per direction on dev first (see 'steer tune').")
def run(do_tune: bool, ray: RayOptions, **options: Any) -> None:
    """Profile, transfer every direction in every mode, evaluate, and write a report directory."""
    from steer.rewriting.records import TuneResult

    runner = runner_for(ray=ray, tuning=do_tune, **options)  # the options of `run_options`
    if runner is None:
        return
    tuned_file = runner.out / "tuned.json"
    with ray.cluster():
        if do_tune:
            tuned = runner.tune()
        elif tuned_file.is_file():
            tuned = TuneResult.read(tuned_file)
            if is_main_process():
                click.echo(f"using tuned settings from {tuned_file}", err=True)
        else:
            tuned = None
        runner.run(tuned)
    if not is_main_process():
        return
    click.echo((runner.out / "results.md").read_text())
    click.echo(f"report: {runner.out}/ (results.json, results.md, samples.md, chart.png)")


@cli.command()
@run_options
def tune(ray: RayOptions, **options: Any) -> None:
    """Try candidate recipes per direction on dev; keep the best J (or trade-off) per direction in tuned.json."""
    from steer.generation.steerer import describe

    runner = runner_for(ray=ray, tuning=True, **options)  # the options of `run_options`
    if runner is None:
        return
    with ray.cluster():
        tuned = runner.tune()
    if not is_main_process():
        return
    for name, chosen in tuned.chosen.items():
        m, p = chosen.metrics, chosen.prompt_metrics
        click.echo(
            f"{name}: {describe(chosen.settings)} — J {m.get('j', float('nan')):.3f} "
            f"(prompt {p.get('j', float('nan')):.3f}), accuracy {m.get('accuracy', float('nan')):.3f} "
            f"(prompt {p.get('accuracy', float('nan')):.3f}), similarity {m.get('similarity', float('nan')):.3f} "
            f"(prompt {p.get('similarity', float('nan')):.3f})"
        )
    click.echo(f"wrote {runner.out / 'tuned.json'}; 'steer run' in the same directory uses it for mode 'tuned'")


@cli.command()
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=OUTPUT_FILE,
    default=Path("docs/results.md"),
    show_default=True,
    help="The Markdown document to write (its trade-off chart goes beside it as <name>-tradeoff.png).",
)
@click.option(
    "--header",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Markdown placed at the top: what the runs are and how they were made (e.g. docs/results-header.md). "
    "Without it, a short header naming the runs and the model.",
)
@click.option(
    "--findings",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A findings document to link after the samples (e.g. research/findings.md); linked, not copied.",
)
@click.option("--force", is_flag=True, help="Replace an earlier 'steer report' document.")
def report(run_dirs: tuple[Path, ...], output: Path, header: Path | None, findings: Path | None, force: bool) -> None:
    """Write the results document of several run directories: their tables, the computed verdict
    against prompting (thresholds from each run's tuned.json), random samples and the tuning trade-off."""
    from steer.lab.report import write_report

    path = write_report(run_dirs, output, findings=findings, header=header, force=force)
    click.echo(f"wrote {path}")
