"""Lighter linear layers (`--dtype fp16-linear`, `int8-linear`): each equals its reference
computation, an int8 row's output never depends on its batch, the hook sites and the fingerprint stay,
and the whole model stays within a documented tolerance of float32."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL, MAIN_KINDS, make_lm, make_model, toy_profile

from steer.cli import cli
from steer.generation.steerer import Steerer, TransferSettings
from steer.model.hooks import edit_neurons
from steer.model.loading import load_model
from steer.model.names import LIGHT_FORMATS
from steer.model.weights import Fp16Linear, Int8Linear, is_light, lighten

# Whole-model tolerance against float32 on the tiny models (weights N(0, 0.2)), largest |Δ log p|
# over the vocabulary: float16 weights round each weight by ≤ 2⁻¹¹ relative; int8 weights and
# per-token int8 activations by ≤ 1/254 of each row's (channel's) largest magnitude.
TOLERANCE = {"fp16-linear": 1e-2, "int8-linear": 0.25}


def _light(kind: str, fmt: str) -> Any:
    lm = make_lm(kind)
    lighten(lm.model, fmt)
    lm.weights = fmt
    return lm


@pytest.mark.parametrize("fmt", LIGHT_FORMATS)
def test_each_layer_equals_its_reference_computation(fmt: str) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(37, 23)
    x = torch.randn(2, 5, 37)
    light = Fp16Linear(linear) if fmt == "fp16-linear" else Int8Linear(linear)
    w = linear.weight.detach()
    if fmt == "fp16-linear":
        reference = x @ w.half().float().T + linear.bias.detach()
    else:  # int8 per output channel and per row, integer products summed exactly (int64 here)
        ws = w.abs().amax(1) / 127
        rows = x.reshape(-1, 37)
        xs = rows.abs().amax(1, keepdim=True) / 127
        sums = torch.round(rows / xs).long() @ torch.round(w / ws[:, None]).long().T
        reference = (sums.float() * xs * ws + linear.bias.detach()).reshape(2, 5, 23)
    assert torch.allclose(light(x), reference, atol=1e-5, rtol=1e-5)
    assert torch.allclose(light.float_weight(), w, atol=float(w.abs().max()) / 100)
    rows = x.reshape(10, 37)
    if fmt == "int8-linear":  # integer sums: a row's output never depends on its batch (torch's dynamic int8 does)
        assert torch.equal(light(rows), torch.cat([light(rows[i : i + 1]) for i in range(10)]))
    else:  # fbgemm picks its kernel by the row count, like float32's: the same call shape gives the same bits
        assert torch.equal(light(rows), light(rows.clone()))
        assert torch.allclose(light(rows[:1]), light(rows)[:1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fmt", LIGHT_FORMATS)
@pytest.mark.parametrize("kind", MAIN_KINDS)
def test_the_whole_model_stays_within_the_documented_tolerance_of_float32(kind: str, fmt: str) -> None:
    lm = _light(kind, fmt)
    reference = make_model(kind)
    ids = torch.tensor([[5, 9, 14, 20, 31, 7], [8, 8, 40, 41, 12, 3], [60, 2, 5, 9, 9, 11]])
    with torch.inference_mode():
        light = lm.model(input_ids=ids).logits
        full = reference(input_ids=ids).logits
    gap = (light.log_softmax(-1) - full.log_softmax(-1)).abs().max().item()
    assert gap <= TOLERANCE[fmt], gap


@pytest.mark.parametrize("fmt", LIGHT_FORMATS)
def test_lighten_replaces_every_linear_and_keeps_the_hook_sites(fmt: str) -> None:
    lm = make_lm("llama")
    sites = lm.activation_sites()
    linears = [n for n, m in lm.model.named_modules() if type(m) is torch.nn.Linear]
    assert lighten(lm.model, fmt) == len(linears) > 0
    assert not any(type(m) is torch.nn.Linear for m in lm.model.modules())
    assert all(is_light(lm.model.get_submodule(n)) for n in linears)
    assert lm.activation_sites() == sites  # the very same modules: steering hooks them unchanged


# fp16-linear only: int8-linear's layers are row-independent too (above), but its rounding can turn
# the last-bit differences of batched attention into other tokens on a real model (steer.model.weights)
@pytest.mark.parametrize("fmt", ["fp16-linear"])
def test_steered_rewrites_do_not_depend_on_the_batch_and_a_no_op_edit_changes_nothing(fmt: str) -> None:
    lm = _light("llama", fmt)
    steerer = Steerer(lm, toy_profile(make_lm("llama")))
    common = dict(mode="shift", top_k="10%", method="diff", strength=2.0, guidance=1.0, max_new_tokens=6)

    def rewrites(batch_size: int, **extra: Any) -> list[str]:
        settings = TransferSettings.bare(**{**common, **extra}, batch_size=batch_size)
        return [r.raw_output for r in steerer.transfer(FORMAL + INFORMAL, "formal", "informal", settings)]

    assert rewrites(1) == rewrites(3) == rewrites(16)
    shared = steerer
    steerer = Steerer(steerer.lm, steerer.profile, share_prompt_prefix=False)  # each row prefills its whole prompt
    assert rewrites(3) == rewrites(1)  # the same rewrites
    steerer = shared
    before = copy.deepcopy(lm.model.state_dict())
    ids = torch.tensor([[5, 9, 14, 20, 31, 7]])
    logits = {}
    with torch.inference_mode():
        logits["plain"] = lm.model(input_ids=ids).logits
        for strength in (0.0, 2.0):
            edit = steerer.build_edit("formal", "informal", TransferSettings.bare(**{**common, "strength": strength}))
            with edit_neurons(lm.activation_sites(), edit, "all"):
                logits[strength] = lm.model(input_ids=ids).logits
    assert torch.equal(logits["plain"], logits[0.0])  # the hooks sit where they did: a no-op is exact
    assert not torch.equal(logits["plain"], logits[2.0])  # and a real edit reaches the output
    assert all(torch.equal(before[k], v) for k, v in lm.model.state_dict().items())


@pytest.mark.parametrize("fmt", LIGHT_FORMATS)
def test_loading_with_a_light_format_keeps_the_fingerprint_and_records_say_so(
    saved_model: Path, tmp_path: Path, corpus_files: tuple[Path, Path], fmt: str
) -> None:
    assert load_model(str(saved_model), dtype=fmt).fingerprint == load_model(str(saved_model)).fingerprint
    formal, informal = corpus_files
    profile = tmp_path / "p.safetensors"
    runner = CliRunner()
    made = runner.invoke(cli, ["profile", "--model", str(saved_model), "--style", f"formal={formal}",
                               "--style", f"informal={informal}", "-o", str(profile), "-q"])  # fmt: skip
    assert made.exit_code == 0, made.output
    out = tmp_path / "o.jsonl"
    args = ["transfer", "-p", str(profile), "--from", "formal", "--to", "informal", "--preset", "prompt"]
    done = runner.invoke(cli, [*args, "--dtype", fmt, "--max-new-tokens", "4", "-q", "-o", str(out), *FORMAL[:2]])
    assert done.exit_code == 0, done.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["weights"] for r in records] == [fmt, fmt]
    plain = tmp_path / "plain.jsonl"
    assert runner.invoke(cli, [*args, "--max-new-tokens", "4", "-q", "-o", str(plain), *FORMAL[:2]]).exit_code == 0
    assert all("weights" not in json.loads(line) for line in plain.read_text().splitlines())  # as before


@pytest.mark.parametrize("fmt", LIGHT_FORMATS)
def test_light_formats_are_refused_where_they_cannot_work_before_any_model_loads(
    saved_model: Path, tmp_path: Path, fmt: str
) -> None:
    from steer.errors import SteerError

    with pytest.raises(SteerError, match="CPU only"):
        load_model(str(tmp_path / "never-read"), dtype=fmt, device="cuda")
    profile = tmp_path / "missing.safetensors"
    profile.write_bytes(b"")
    export = CliRunner().invoke(
        cli, ["export", "-p", str(profile), "--from", "formal", "--to", "informal", "--dtype", fmt, "-o",
              str(tmp_path / "exp")],
    )  # fmt: skip
    assert export.exit_code == 2 and "export writes float weights" in export.output
    assert "Traceback" not in export.output and not (tmp_path / "exp").exists()


def test_auto_is_fp16_linear_only_for_the_embedded_qwen_models_on_a_cpu() -> None:
    from steer.model.loading import resolve_dtype

    for alias in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):
        assert resolve_dtype(alias, "auto") == "fp16-linear"
        assert resolve_dtype(alias, "auto", device="cuda") == "auto"  # float32 there; bfloat16 by asking
        assert resolve_dtype(alias, "auto", device_map="auto") == "auto"
        assert resolve_dtype(alias, "float32") == "float32"  # asking for float32 gets float32
    assert resolve_dtype("smollm2-135m", "auto") == "auto"  # its outputs stay byte for byte as they were
    assert resolve_dtype("/some/model/dir", "auto") == "auto"


def test_the_resume_key_names_the_weight_format_the_records_are_decoded_with() -> None:
    from steer.rewriting.service import RewriteJob

    settings = TransferSettings.preset("prompt")
    profiles = Path(__file__).resolve().parents[2] / "data" / "profiles"  # committed; no model is loaded
    qwen = str(profiles / "formality-qwen2.5-coder-1.5b.safetensors")
    small = str(profiles / "formality-smollm2-135m.safetensors")
    auto = RewriteJob(qwen, "formal", "informal", settings)
    assert auto.weights() == "fp16-linear" and auto.key()[-1] == "fp16-linear"
    assert RewriteJob(qwen, "formal", "informal", settings, dtype="float32").key() == auto.key()[:-1]
    assert RewriteJob(qwen, "formal", "informal", settings, dtype="int8-linear").key()[-1] == "int8-linear"
    plain = RewriteJob(small, "formal", "informal", settings).key()
    assert plain == RewriteJob(small, "formal", "informal", settings, dtype="float32").key()  # as before


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2", "opt"])
@pytest.mark.parametrize("fmt", LIGHT_FORMATS)
@pytest.mark.parametrize("mapped", [False, True])
def test_reading_straight_into_light_weights_equals_lightening_a_float32_load(
    kind: str, fmt: str, mapped: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model directory read tensor by tensor into `fmt` (`load_light`) is the float32 load then
    `lighten`, bit for bit: every remaining parameter, the packed weights' logits, the fingerprint and
    the rewrites; tied heads (Qwen's) and biases included."""
    from conftest import make_tokenizer

    import steer.model.weights as weights

    folder = tmp_path / kind
    model = make_model(kind)
    if kind == "qwen2":
        model.config.tie_word_embeddings = True
        model.tie_weights()
    model.save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    with monkeypatch.context() as patch:  # read straight into `fmt`: nothing is lightened afterwards
        patch.setattr(weights, "lighten", lambda *_: pytest.fail("a float32 model was loaded and lightened"))
        patch.setattr(weights, "MAPPED_BYTES", 0 if mapped else 1 << 40)  # embeddings mapped from the file, or read
        direct = load_model(str(folder), dtype=fmt, progress=False)
    plain = load_model(str(folder), dtype="float32", progress=False)
    lightened = plain.fingerprint
    lighten(plain.model, fmt)
    assert direct.weights == fmt and direct.fingerprint == lightened
    ours, theirs = dict(direct.model.named_parameters()), dict(plain.model.named_parameters())
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    ids = torch.tensor([[5, 9, 13, 7, 22, 30]])
    with torch.no_grad():
        assert torch.equal(direct.model(input_ids=ids).logits, plain.model(input_ids=ids).logits)
    settings = TransferSettings.bare(mode="prompt", max_new_tokens=5)
    outputs = [Steerer(lm, None).transfer(FORMAL[:3], "formal", "informal", settings) for lm in (direct, plain)]
    assert [r.raw_output for r in outputs[0]] == [r.raw_output for r in outputs[1]]


def test_a_directory_the_light_reader_cannot_map_is_read_float32_and_lightened(tmp_path: Path) -> None:
    """Tensors renamed on load (GPT-NeoX's `embed_out`), a stray .safetensors file beside the
    model's: the light reader steps aside, so `fp16-linear` loads what float32 loads, lightened."""
    from conftest import make_tokenizer
    from safetensors.torch import save_file

    folder = tmp_path / "neox"
    make_model("gpt_neox").save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    save_file({"gpt_neox.layers.0.mlp.dense_4h_to_h.weight": torch.zeros(32, 37)}, str(folder / "zz-notes.safetensors"))
    light = load_model(str(folder), dtype="fp16-linear", progress=False)
    plain = load_model(str(folder), dtype="float32", progress=False)
    lighten(plain.model, "fp16-linear")
    ids = torch.tensor([[5, 9, 13, 7]])
    with torch.no_grad():
        assert torch.equal(light.model(input_ids=ids).logits, plain.model(input_ids=ids).logits)
    assert light.fingerprint == load_model(str(folder), dtype="float32", progress=False).fingerprint
