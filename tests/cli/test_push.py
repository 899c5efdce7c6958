"""`steer push`: the Hub offline or unreachable is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import files_in, refused, run


# case 11: steer push with the Hub offline or unreachable
def test_push_offline_or_unreachable_is_one_line(tmp_path: Path, prof: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = files_in(tmp_path)
    refused(run("push", str(prof), "me/repo"), "HF_HUB_OFFLINE is set, and 'steer push' uploads to the Hub; unset it")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    refused(run("push", str(prof), "me/repo"), f"could not push {prof} to me/repo: ")  # no probe note before it
    assert "check the network and your login" in run("push", str(prof), "me/repo").output
    assert files_in(tmp_path) == before
