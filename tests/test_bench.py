"""Smoke run of the benchmarks with a tiny model and tiny sizes: every figure must be produced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import profile_args

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # about 200 s: runs every benchmark end to end
def test_bench_produces_every_figure(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    formal = corpus_files[0]
    profile = tmp_path / "p.safetensors"
    cmd = [sys.executable, "-m", "steer", *profile_args(saved_model, corpus_files), "-o", str(profile), "-q"]
    subprocess.run(cmd, check=True)
    figures_file, report = tmp_path / "figures.json", tmp_path / "performance.md"
    env = dict(os.environ, STEER_BENCH_JSON=str(figures_file))
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--model",
            str(saved_model),
            "--corpus",
            str(formal),
            "--profile",
            str(profile),
            "--profile-texts",
            "6",
            "--official-texts",
            "2",
            "--pad-to",
            "32",
            "--gen-texts",
            "2",
            "--official-gen-texts",
            "1",
            "--batch-size",
            "2",
            "--new-tokens",
            "3",
            "--scale",
            "2,4",
            "--batch-sizes",
            "1,2",
            "--skip-load",
            "--out",
            str(report),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(figures_file.read_text())
    assert set(figures["profile"]) == {"bare", "steer", "official"}
    assert set(figures["transfer"]) == {
        "prompt",
        "deactivate",
        "deactivate+contrast",
        "guided",
        "official",
        "model_only",
    }
    for group in ("profile", "transfer"):
        for name, fig in figures[group].items():
            assert fig["peak_rss_mb"] > 0, name
            if name != "model_only":
                assert fig["value"] > 0 and fig["tokens"] > 0, name
    assert set(figures["scaling"]["texts"]) == {"2", "4"} and set(figures["scaling"]["batch"]) == {"1", "2"}
    text = report.read_text()
    for heading in ("## 1. Profiling", "## 2. Transfer", "## 5. Scaling"):
        assert heading in text


def test_performance_document_is_the_header_the_tables_and_the_notes() -> None:
    """`make bench` rebuilds docs/performance.md from bench/header.md, the tables and bench/notes.md,
    so prose written into the document alone would be lost: the two hand-written parts must be its
    start and its end."""
    document = (ROOT / "docs" / "performance.md").read_text()
    assert document.startswith((ROOT / "bench" / "header.md").read_text())
    assert document.endswith((ROOT / "bench" / "notes.md").read_text())
