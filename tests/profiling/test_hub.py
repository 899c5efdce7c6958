"""Sharing on the Hub with the client's network calls replaced at the boundary: `steer push` sends
the profile, its probe and a card that says what they are; `-p hf:REPO[@REV]` reads them back,
checked against the card, and refuses a tampered file; `steer export` writes a card too."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner, Result

from steer.cli import cli
from steer.errors import SteerError
from steer.profiling.hub import (
    CARD_FILE,
    INSTRUCT_FILE,
    PROBE_FILE,
    PROFILE_FILE,
    TRAINED_FILE,
    base_model_id,
    file_digest,
    parse_hub_spec,
    read_card,
    resolve_profile,
)


class FakeHub:
    """A Hub in a folder: `HfApi.create_repo` / `upload_folder` store files per (repo, revision);
    `snapshot_download` copies what `allow_patterns` names into a fresh local snapshot."""

    def __init__(self, root: Path) -> None:
        self.root, self.calls = root, []

    def repo(self, repo_id: str, revision: str | None = None) -> Path:
        return self.root / "repos" / repo_id / (revision or "main")

    def api(self, token: str | None = None) -> Any:
        hub = self

        class Api:
            def create_repo(self, repo_id: str, *, private: bool = False, exist_ok: bool = False) -> str:
                hub.calls.append(("create_repo", repo_id, private, exist_ok))
                return f"https://huggingface.co/{repo_id}"

            def upload_folder(
                self, *, repo_id: str, folder_path: Path, revision: str | None, commit_message: str
            ) -> Any:
                sent = sorted(p.name for p in Path(folder_path).iterdir())
                hub.calls.append(("upload_folder", repo_id, revision, sent, commit_message))
                target = hub.repo(repo_id, revision)
                target.mkdir(parents=True, exist_ok=True)
                for p in Path(folder_path).iterdir():
                    shutil.copyfile(p, target / p.name)
                return type("Commit", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()

        return Api()

    def snapshot_download(self, repo_id: str, *, revision: str | None = None, allow_patterns: list[str]) -> str:
        self.calls.append(("snapshot_download", repo_id, revision, sorted(allow_patterns)))
        source = self.repo(repo_id, revision)
        if not source.is_dir():
            raise OSError(f"404 Client Error: Repository Not Found for url: https://huggingface.co/{repo_id}")
        local = self.root / "snapshots" / repo_id / (revision or "main")
        local.mkdir(parents=True, exist_ok=True)
        for p in source.iterdir():
            if p.name in allow_patterns:
                shutil.copyfile(p, local / p.name)
        return str(local)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    import huggingface_hub
    import transformers.utils.hub  # noqa: F401  (before the patch: its annotations read `HfApi | None` at import)

    fake = FakeHub(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the fake Hub is reachable (the suite runs offline)
    monkeypatch.setattr(huggingface_hub, "HfApi", fake.api)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    return fake


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def probed(prof: Path) -> Path:
    assert run("probe", str(prof), "--allow-no-heldout", "-q").exit_code == 0  # the toy corpora: 11 texts
    return prof


def test_push_sends_profile_probe_and_a_card_that_says_what_they_are(hub: FakeHub, probed: Path) -> None:
    from steer.profiling.probe import StyleProbe, probe_path
    from steer.profiling.profile import StyleProfile

    result = run("push", str(probed), "me/formality-tiny", "--private")
    assert result.exit_code == 0, result.output
    assert "pushed" in result.output and "me/formality-tiny" in result.output
    assert hub.calls[0] == ("create_repo", "me/formality-tiny", True, True)
    assert hub.calls[1][:4] == (
        "upload_folder",
        "me/formality-tiny",
        None,
        sorted([CARD_FILE, PROBE_FILE, PROFILE_FILE]),
    )
    remote = hub.repo("me/formality-tiny")
    assert (remote / PROFILE_FILE).read_bytes() == probed.read_bytes()
    assert (remote / PROBE_FILE).read_bytes() == probe_path(probed).read_bytes()
    card = (remote / CARD_FILE).read_text()
    assert card.startswith("---\n") and "library_name: steer" in card and "- steer" in card
    meta = read_card(remote)
    profile = StyleProfile.load(probed)
    assert meta["styles"] == ["formal", "informal"]
    assert {s: c["sha256"] for s, c in meta["corpora"].items()} == {s: m["sha256"] for s, m in profile.corpora.items()}
    assert meta["corpora"]["formal"]["texts"] == profile.counts["formal"].num_texts
    held_out = StyleProbe.load(probe_path(probed)).heldout_accuracy  # NaN on the toy corpora: too few to hold out
    assert meta["probe_heldout_accuracy"] == (None if math.isnan(held_out) else pytest.approx(held_out, abs=1e-4))
    fit = StyleProbe.load(probe_path(probed)).fit
    assert meta["probe_fit"] == fit and set(fit) == {"top", "limit", "c"}
    assert f"texts per style, C = {fit['c']:g})" in card
    assert meta["files"][PROFILE_FILE] == file_digest(probed)
    assert meta["files"][PROBE_FILE] == file_digest(probe_path(probed))
    assert meta["profiling"] == profile.settings and meta["fingerprint"] == profile.fingerprint


def test_hf_profile_reads_back_verified_and_transfers_like_the_local_file(hub: FakeHub, probed: Path) -> None:
    assert run("push", str(probed), "me/tiny").exit_code == 0
    local = run("transfer", "-p", str(probed), "--from", "formal", "--to", "informal", "--preset", "guided",
                "--max-new-tokens", "4", "-q", "hey dude")  # fmt: skip
    remote = run("transfer", "-p", "hf:me/tiny", "--from", "formal", "--to", "informal", "--preset", "guided",
                 "--max-new-tokens", "4", "-q", "hey dude")  # fmt: skip
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    assert remote.output == local.output
    wanted = sorted([CARD_FILE, PROBE_FILE, PROFILE_FILE, INSTRUCT_FILE, TRAINED_FILE])
    assert hub.calls[-1] == ("snapshot_download", "me/tiny", None, wanted)
    path = resolve_profile("hf:me/tiny")
    assert path.name == PROFILE_FILE and path.read_bytes() == probed.read_bytes()
    inspect = run("inspect", "hf:me/tiny", "--top-k", "2")
    assert inspect.exit_code == 0 and "formal" in inspect.output


def test_a_revision_is_passed_on_and_a_tampered_file_is_refused(hub: FakeHub, probed: Path) -> None:
    assert run("push", str(probed), "me/tiny", "--revision", "v1").exit_code == 0
    assert resolve_profile("hf:me/tiny@v1").is_file()
    assert hub.calls[-1][2] == "v1"
    (hub.repo("me/tiny", "v1") / PROBE_FILE).write_bytes(b"not the probe")
    result = run("inspect", "hf:me/tiny@v1")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "does not match its card" in result.output and PROBE_FILE in result.output
    missing = run("inspect", "hf:me/other")
    assert missing.exit_code == 1 and "could not download hf:me/other" in missing.output
    assert missing.output.count("\n") == 1 and "check the network, the repo id and revision" in missing.output


def test_a_repo_without_a_steer_card_is_refused(hub: FakeHub, prof: Path) -> None:
    repo = hub.repo("someone/model")
    repo.mkdir(parents=True)
    shutil.copyfile(prof, repo / PROFILE_FILE)
    with pytest.raises(SteerError, match="no model card"):
        resolve_profile("hf:someone/model")
    (repo / CARD_FILE).write_text("---\nlibrary_name: transformers\n---\n# a model\n")
    with pytest.raises(SteerError, match="not a steer profile card"):
        resolve_profile("hf:someone/model")


def test_specs_and_base_models() -> None:
    assert parse_hub_spec("hf:me/x") == ("me/x", None)
    assert parse_hub_spec("hf:me/x@v2") == ("me/x", "v2")
    for bad in ("hf:x", "hf:me/x@", "hf:/x", "hf:a/b/c"):
        with pytest.raises(SteerError, match="hf:OWNER/NAME"):
            parse_hub_spec(bad)
    assert base_model_id("smollm2-135m") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_model_id("meta-llama/Llama-3.2-1B") == "meta-llama/Llama-3.2-1B"
    assert base_model_id("/tmp/some/model.gguf") is None


def test_push_refuses_a_bad_repo_id_and_a_non_profile(hub: FakeHub, prof: Path, tmp_path: Path) -> None:
    bad = run("push", str(prof), "no-owner")
    assert bad.exit_code == 1 and "OWNER/NAME" in bad.output
    other = tmp_path / "x.safetensors"
    other.write_bytes(b"junk")
    assert run("push", str(other), "me/x").exit_code == 1
    assert [c for c in hub.calls if c[0] == "upload_folder"] == []
    assert "--revision" in run("push", "--help").output


def test_export_writes_a_card_with_front_matter(prof: Path, tmp_path: Path) -> None:
    from huggingface_hub import ModelCard

    out = tmp_path / "exported"
    result = run("export", "-p", str(prof), "--from", "formal", "--to", "informal", "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    card = ModelCard((out / "README.md").read_text())
    data = card.data.to_dict()
    record = json.loads((out / "steer_edit.json").read_text())
    assert data["library_name"] == "transformers" and "steer" in data["tags"]
    assert data["steer"]["profile_sha256"] == file_digest(prof)["sha256"] == record["profile_sha256"]
    assert data["steer"]["source"] == "formal" and data["steer"]["target"] == "informal"
    assert "vLLM" in card.text and "TGI" not in card.text


def test_trained_edits_beside_the_profile_travel_with_it(hub: FakeHub, probed: Path) -> None:
    from steer.files import sha256_file
    from steer.model.hooks import NeuronEdit
    from steer.profiling.hub import resolve_profile
    from steer.profiling.profile import StyleProfile
    from steer.profiling.trained import TrainedEdits, trained_path

    profile = StyleProfile.load(probed)
    edit = NeuronEdit.empty(profile.num_layers, profile.num_neurons).with_scale(
        torch.ones(profile.num_layers, profile.num_neurons, dtype=torch.bool), 0.5
    )
    learned = TrainedEdits(profile.fingerprint, sha256_file(probed)).with_edit("formal", "informal", edit, {"seed": 1})
    learned.save(trained_path(probed))
    assert run("push", str(probed), "me/trained").exit_code == 0
    assert TRAINED_FILE in hub.calls[-1][3] and INSTRUCT_FILE not in hub.calls[-1][3]
    pulled = resolve_profile("hf:me/trained")
    assert trained_path(pulled).read_bytes() == trained_path(probed).read_bytes()
    trained_path(probed).write_bytes(b"not a trained file")
    assert "trained-edit file" in run("push", str(probed), "me/trained").output
