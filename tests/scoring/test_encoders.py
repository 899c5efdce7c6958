"""Sentence encoders through sentence-transformers: the same embeddings as mean pooling by hand
(the computation steer used before) within 1e-5, any encoder folder accepted, clear errors, the
evaluation encoder reassembled from its parts and checked."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch

from steer.errors import SteerError
from steer.scoring import encoders
from steer.scoring.encoders import EVALUATION_ENCODER, SELECTION_ENCODER, Embedder, embedder_path

TEXTS = [
    "hey dude send it asap lol",
    "I would be grateful if you could reply at your earliest convenience.",
    "",
    "Thou shalt not kill.",
]


def mean_pooled(path: str, texts: list[str], max_length: int) -> torch.Tensor:
    """The reference: the encoder's last hidden states, mean-pooled over real tokens, L2-normalised."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()
    enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9), dim=-1)


@pytest.mark.parametrize("name", [SELECTION_ENCODER, EVALUATION_ENCODER])
def test_embeddings_equal_mean_pooling_by_hand(name: str) -> None:
    embedder = Embedder(name)
    got = embedder.encode(TEXTS, batch_size=3)
    expected = mean_pooled(embedder_path(name), TEXTS, embedder.model.max_seq_length)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-5)
    assert embedder.similarities(["", TEXTS[0]], TEXTS[:2])[0] == 0.0  # an empty output scores 0


def test_a_plain_transformers_folder_gets_mean_pooling(tmp_path: Path) -> None:
    """A BERT folder without sentence-transformers modules (a tiny random one): mean pooling, normalised."""
    from conftest import make_tokenizer
    from transformers import BertConfig, BertModel

    folder = tmp_path / "tiny-bert"
    config = BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tok = make_tokenizer()
    tok.chat_template = None  # an encoder's tokenizer has none (with one, sentence-transformers would apply it)
    tok.save_pretrained(folder)
    texts = ["hey dude send it", "i would be grateful ."]
    got = Embedder(str(folder)).encode(texts)
    assert torch.allclose(got, mean_pooled(str(folder), texts, 512), atol=1e-5)


def test_a_missing_encoder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SteerError, match="could not load embedder .*all-minilm-l6-v2"):
        Embedder(str(tmp_path / "nowhere"))


def test_embedder_similarity() -> None:
    emb = Embedder()
    assert emb.similarity(["a cat sat on the mat"], ["a cat sat on the mat"]) == pytest.approx(1.0, abs=1e-5)
    close = emb.similarity(["a cat sat on the mat"], ["the cat is sitting on the mat"])
    far = emb.similarity(["a cat sat on the mat"], ["quarterly revenue exceeded forecasts"])
    assert close > far


def test_mpnet_is_reassembled_once_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five parts of a zip → one folder in the cache; a wrong sha256 is refused and nothing is left."""
    import hashlib

    weights = b"fake weights"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("all-mpnet-base-v2/model.safetensors", weights)
        zf.writestr("all-mpnet-base-v2/config.json", "{}")
    blob = buffer.getvalue()
    cut = [len(blob) * i // 5 for i in range(6)]
    parts = []
    for i in range(5):
        part = tmp_path / f"part{i}"
        part.write_bytes(blob[cut[i] : cut[i + 1]])
        parts.append(part)
    monkeypatch.setattr(encoders, "wheel_part", lambda name, suffix, install: parts[int(suffix[-3:]) - 1])
    monkeypatch.setattr(encoders, "_MPNET_WEIGHTS_SHA256", "0" * 64)
    with pytest.raises(SteerError, match="pinned sha256"):
        encoders.mpnet_path(tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache" / "encoders").iterdir()] == []  # no half-made folder
    monkeypatch.setattr(encoders, "_MPNET_WEIGHTS_SHA256", hashlib.sha256(weights).hexdigest())
    folder = encoders.mpnet_path(tmp_path / "cache")
    assert (folder / "model.safetensors").read_bytes() == weights
    parts[0].unlink()  # once assembled, the parts are not read again
    assert encoders.mpnet_path(tmp_path / "cache") == folder
