"""Slow: the real embedded SmolLM2-135M model (converted once per test session)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from steer.cli import cli
from steer.profiling.profile import StyleProfile

pytestmark = pytest.mark.slow

ARCHAIC = ["And God said, Let there be light: and there was light.", "Thou shalt not kill."]
MODERN = ["God said, “Let there be light,” and there was light.", "You shall not murder."]


@pytest.fixture(scope="module")
def embedded() -> object:
    from steer.model.loading import load_model  # fails with the install command if `make test` did not install it

    return load_model("smollm2-135m", progress=False)


def test_embedded_model_shape(embedded: object) -> None:
    assert embedded.model_type == "llama"
    assert (embedded.num_layers, embedded.num_neurons) == (30, 1536)
    assert embedded.tokenizer.chat_template


def test_profile_embedded_model_cli(tmp_path: Path, embedded: object) -> None:
    a, m = tmp_path / "archaic.txt", tmp_path / "modern.txt"
    a.write_text("\n".join(ARCHAIC), encoding="utf-8")
    m.write_text("\n".join(MODERN), encoding="utf-8")
    out = tmp_path / "bible.safetensors"
    result = CliRunner().invoke(
        cli,
        [
            "profile",
            "--model",
            "smollm2-135m",
            "--style",
            f"archaic={a}",
            "--style",
            f"modern={m}",
            "-o",
            str(out),
            "-q",
        ]
        + ["--batch-size", "2"],
    )
    assert result.exit_code == 0, result.output
    prof = StyleProfile.load(out)
    assert prof.model_id == "smollm2-135m" and prof.fingerprint == embedded.fingerprint
    tokens = sum(len(embedded.tokenizer(t)["input_ids"]) for t in ARCHAIC)
    assert prof.counts["archaic"].num_tokens == tokens
    fired = prof.counts["archaic"].fired
    assert fired.shape == (30, 1536) and int(fired.max()) <= tokens and int(fired.sum()) > 0


def test_batching_does_not_change_counts_on_real_model(embedded: object) -> None:
    from steer.profiling.profile import count_activations
    from steer.settings import ProfileSettings

    texts = ARCHAIC + MODERN
    one, _ = count_activations(embedded, "x", texts, ProfileSettings(batch_size=1))
    four, _ = count_activations(embedded, "x", texts, ProfileSettings(batch_size=4, padding_side="left"))
    assert one.num_tokens == four.num_tokens
    # Batched matmuls may round differently; a neuron sitting exactly at 0 could flip, nothing more.
    assert (one.fired != four.fired).sum().item() <= 5
    assert torch.allclose(one.sums, four.sums, rtol=1e-3, atol=1e-2)


COMMITTED_PROFILE = Path(__file__).resolve().parents[2] / "data" / "profiles" / "formality-smollm2-135m.safetensors"


def test_committed_profile_matches_embedded_model_and_steers(embedded: object) -> None:
    from steer.generation.steerer import Steerer, TransferSettings

    prof = StyleProfile.load(COMMITTED_PROFILE)
    steerer = Steerer(embedded, prof)  # checks the fingerprint
    texts = ["I would be grateful if you could reply soon.", "Please submit the documents before Friday."]
    plain = steerer.transfer(texts, "formal", "informal", TransferSettings.bare(mode="prompt", max_new_tokens=12))
    steered = steerer.transfer(
        texts,
        "formal",
        "informal",
        TransferSettings.bare(mode="deactivate", top_k="1%", method="diff", contrast=True, beta=0.5, max_new_tokens=12),
    )
    assert len(steered) == len(plain) == 2 and all(r.raw_output for r in steered)
    assert [r.raw_output for r in steered] != [r.raw_output for r in plain]  # 461 zeroed neurons change something


def test_guided_preset_on_the_real_model_ignores_batching(embedded: object) -> None:
    """The default recipe steers the real model, and a row's rewrite does not depend on its batch."""
    from steer.generation.steerer import Steerer, TransferSettings

    steerer = Steerer(embedded, StyleProfile.load(COMMITTED_PROFILE))
    texts = ["I would be grateful if you could reply soon.", "Please submit the documents before Friday.", "Thanks."]
    plain = steerer.transfer(texts, "formal", "informal", TransferSettings.bare(mode="prompt", max_new_tokens=12))
    one = steerer.transfer(
        texts, "formal", "informal", TransferSettings.preset("guided", max_new_tokens=12, batch_size=1)
    )
    three = steerer.transfer(
        texts, "formal", "informal", TransferSettings.preset("guided", max_new_tokens=12, batch_size=3)
    )
    assert [r.raw_output for r in one] == [r.raw_output for r in three]
    assert [r.raw_output for r in one] != [r.raw_output for r in plain]


def test_stop_at_answer_on_the_real_model_keeps_the_cleaned_outputs(embedded: object) -> None:
    """Stopping a row once its answer line is complete gives the cleaned outputs of decoding to the
    limit, with fewer generated tokens; the demo's first sentence no longer loops."""
    from dataclasses import replace

    from steer.generation.steerer import Steerer, TransferSettings, echo_filter, finish_output
    from steer.prompts import prompt_template
    from steer.scoring.faithfulness import instruction_text
    from steer.scoring.loops import has_loop

    steerer = Steerer(embedded, StyleProfile.load(COMMITTED_PROFILE))
    texts = (COMMITTED_PROFILE.parent.parent / "demo-formal.txt").read_text().splitlines()
    texts += ["Kindly find attached the requested documents.", "Dear Sir, I hereby request a refund."]
    totals = {"stopped": 0, "full": 0}
    for preset in ("prompt", "guided"):
        r_settings = TransferSettings.preset(preset, max_new_tokens=40)
        stopped = steerer.transfer(texts, "formal", "informal", r_settings)
        full = steerer.transfer(texts, "formal", "informal", replace(r_settings, clean=False))
        instruction = instruction_text(prompt_template("formal", "informal", r_settings), "formal", "informal")
        assert [r.output for r in stopped] == [
            finish_output(r.raw_output, replace(r_settings, clean=True), echo_filter(r.text, instruction)) for r in full
        ]
        totals["stopped"] += sum(r.info["new_tokens"] for r in stopped)
        totals["full"] += sum(r.info["new_tokens"] for r in full)
        assert not any(has_loop(r.output) for r in stopped)
    assert totals["stopped"] <= totals["full"]  # most replies end with EOS anyway; bench/decoding.py measures
