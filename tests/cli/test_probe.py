"""`steer probe`: what it refuses before the model loads."""

from __future__ import annotations

from pathlib import Path

from conftest import files_in, refused, run


# issue 43, case 16: a probe on too few texts to hold any out is refused (before the model), saying how many
def test_a_probe_on_too_few_texts_to_measure_is_refused(tmp_path: Path, prof: Path, no_model: None) -> None:
    from steer.profiling.probe import probe_path

    few = {}
    for style in ("formal", "informal"):
        few[style] = tmp_path / f"{style}-3.txt"
        few[style].write_text(f"a {style} text\nanother {style} text\na third {style} text\n")
    earlier = probe_path(prof)
    earlier.write_bytes(b"an earlier probe")
    before = files_in(tmp_path)
    given = ["--train-style", f"formal={few['formal']}", "--train-style", f"informal={few['informal']}"]
    refused(
        run("probe", str(prof), *given, "--force", "-q"),
        "too few texts to hold any out and measure the probe ('formal' 3, 'informal' 3; --limit 2000): it needs "
        "at least 20 in all, 10 per style; give more with --train-style NAME=SOURCE, or pass --allow-no-heldout",
    )
    refused(run("probe", str(prof), "--force", "-q"), "('formal' 5, 'informal' 6; --limit 2000)")  # its own corpora
    assert files_in(tmp_path) == before
