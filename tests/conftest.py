"""Tiny random models from configs and a word-level tokenizer built in code: no downloads; and the helpers
several test files share (the CLI run in-process, its refusals, run configs, interrupted transfers)."""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from steer.cli import cli  # noqa: E402
from steer.rewriting.partial import PartialRecords  # noqa: E402

WORDS = (
    "i would be grateful if you could reply at your earliest convenience . hey dude send it asap lol "
    "thou shalt not the lord said unto them and it came to pass you will not he told hello there "
    "please kindly thanks gimme now ok yes no what why how we they she his her my our ! ? ,"
).split()
VOCAB_SIZE = 99
SPECIAL = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
CHAT_TEMPLATE = (
    "{% for m in messages %}[BOS] {{ m['role'] }} : {{ m['content'] }} [EOS] {% endfor %}"
    "{% if add_generation_prompt %}[BOS] assistant : {% endif %}"
)

FORMAL = [
    "i would be grateful if you could reply at your earliest convenience .",
    "please kindly reply at your earliest convenience .",
    "thanks , i would be grateful .",
    "we would be grateful if they could reply .",
    "could you please send it ?",
]
INFORMAL = [
    "hey dude send it asap lol",
    "gimme it now dude !",
    "ok lol",
    "yes dude send it now !",
    "what why how lol",
    "hey",
]


# Style names as words, for the LLM judge's forced choice between them (`make_tokenizer(JUDGE_WORDS)`);
# the other tests keep a vocabulary where style names are unknown, as they always were.
JUDGE_WORDS = ("formal", "informal", "modern", "shakespearean", "same", "different")


def make_tokenizer(extra: tuple[str, ...] = ()) -> Any:
    """A whitespace word-level tokenizer over `WORDS` with pad/unk/bos/eos and a chat template;
    `extra` words take the ids after `WORDS`' (theirs are unchanged)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + sorted(set(WORDS)) + [w for w in extra if w not in WORDS])}
    assert len(vocab) <= VOCAB_SIZE
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_config(kind: str) -> Any:
    """A small config with odd sizes for one architecture family."""
    import transformers as tf

    common = dict(vocab_size=VOCAB_SIZE, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    llama_like = dict(
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        **common,
    )
    if kind == "llama":
        return tf.LlamaConfig(**llama_like)
    if kind == "mistral":
        return tf.MistralConfig(**llama_like)
    if kind == "qwen2":
        return tf.Qwen2Config(**llama_like)
    if kind == "qwen3":
        return tf.Qwen3Config(head_dim=8, **llama_like)
    if kind == "olmo":
        return tf.OlmoConfig(**llama_like)
    if kind == "gemma":
        return tf.GemmaConfig(head_dim=8, **llama_like)
    if kind == "gemma2":
        return tf.Gemma2Config(head_dim=8, **llama_like)
    if kind == "gemma3_text":
        return tf.Gemma3TextConfig(head_dim=8, **llama_like)
    if kind == "phi3":
        return tf.Phi3Config(**llama_like)
    if kind == "gpt2":
        return tf.GPT2Config(n_embd=32, n_inner=37, n_layer=3, n_head=4, n_positions=128, **common)
    if kind == "gpt_neox":
        return tf.GPTNeoXConfig(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=3,
            num_attention_heads=4,
            max_position_embeddings=128,
            **common,
        )
    if kind == "opt":
        return tf.OPTConfig(
            hidden_size=32,
            ffn_dim=37,
            num_hidden_layers=3,
            num_attention_heads=4,
            word_embed_proj_dim=32,
            max_position_embeddings=128,
            **common,
        )
    raise ValueError(kind)


ALL_KINDS = [
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "olmo",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "gpt2",
    "gpt_neox",
    "opt",
]
MAIN_KINDS = ["llama", "phi3", "gpt2"]


def make_model(kind: str, seed: int = 0) -> Any:
    """A random tiny causal LM in eval mode (weights scaled up so activations are not all near 0)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(make_config(kind), attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
    return model.eval()


def make_lm(kind: str, seed: int = 0, words: tuple[str, ...] = ()) -> Any:
    """A `LoadedModel` around a tiny random model (`words`: `make_tokenizer`'s extra words)."""
    from steer.model.loading import wrap_model

    return wrap_model(make_model(kind, seed), make_tokenizer(words), f"tiny-{kind}")


def toy_profile(lm: Any) -> Any:
    """The profile of `lm` on the toy formal/informal corpora (the one most tests steer with)."""
    from steer.profiling.corpus import Corpus
    from steer.profiling.profile import profile_styles

    corpora = [Corpus("formal", tuple(FORMAL), "f", "x"), Corpus("informal", tuple(INFORMAL), "i", "y")]
    return profile_styles(lm, corpora)


@pytest.fixture(params=MAIN_KINDS)
def lm(request: pytest.FixtureRequest) -> Any:
    return make_lm(request.param)


@pytest.fixture
def llama_lm() -> Any:
    return make_lm("llama")


@pytest.fixture
def saved_model(tmp_path: Path) -> Path:
    """A tiny llama saved like any Hugging Face model directory."""
    path = tmp_path / "tiny-llama"
    make_model("llama").save_pretrained(path)
    make_tokenizer().save_pretrained(path)
    return path


def write_corpora(folder: Path, formal: list[str], informal: list[str]) -> tuple[Path, Path]:
    """formal.txt and informal.txt in `folder`, one text per line."""
    files = folder / "formal.txt", folder / "informal.txt"
    for file, texts in zip(files, (formal, informal), strict=True):
        file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return files


@pytest.fixture
def corpus_files(tmp_path: Path) -> tuple[Path, Path]:
    return write_corpora(tmp_path, FORMAL, INFORMAL)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep converted-model caches out of the user's home, except for the slow real-model tests."""
    if "STEER_CACHE" not in os.environ:
        monkeypatch.setenv("STEER_CACHE", str(tmp_path_factory.getbasetemp() / "steer-cache"))


def profile_args(model: Path, corpus_files: tuple[Path, Path]) -> list[str]:
    """`steer profile` arguments for the tiny model on the formal/informal toy corpora."""
    formal, informal = corpus_files
    return ["profile", "--model", str(model), "--style", f"formal={formal}", "--style", f"informal={informal}"]


@pytest.fixture
def prof(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> Path:
    """A profile of the tiny llama on the toy corpora, made by the CLI (`steer profile`)."""
    from click.testing import CliRunner

    from steer.cli import cli

    out = tmp_path / "p.safetensors"
    assert CliRunner().invoke(cli, [*profile_args(saved_model, corpus_files), "-o", str(out), "-q"]).exit_code == 0
    return out


# Shared by the tests of several commands: the CLI run in-process, the refusals a user meets (one line, the
# exit code), and the files a refusal must leave as they were.
def run(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), input=input)


def transfer_args(prof: Path) -> list[str]:
    return ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--max-new-tokens", "3", "-q"]


def one_line_error(result: Any, message: str, code: int = 1) -> None:
    """A user's mistake: `code` (1, or 2 for click's usage errors), the message, no traceback."""
    assert result.exit_code == code, result.output
    assert message in result.output, result.output
    assert "Traceback" not in result.output, result.output


# `one_line_error` with exit 1 and the output exactly that one line (the tests that import it under that name).
def one_line_error_exit_1(result: Any, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert message in result.output, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output


def refused(result: Any, message: str, code: int = 1) -> None:
    """`one_line_error`, and the output is that one line: nothing printed before it, no note."""
    one_line_error(result, message, code)
    assert len(result.output.strip().splitlines()) == 1, result.output


def files_in(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes: equal before and after, nothing was written or changed."""
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any model loads: these mistakes are refused before that."""
    import steer.model.loading
    import steer.rewriting.service

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a model was loaded before the mistake was refused")

    monkeypatch.setattr(steer.model.loading, "load_model", no_loading)
    monkeypatch.setattr(steer.rewriting.service, "load_model", no_loading)


# A run directory, a run config and a profile as the commands leave them.
METRICS = {"n": 2, "j": 0.2, "accuracy": 0.5, "similarity": 0.8, "ppl": 50.0, "repetition": 0.0, "usable": 0.1}


def _write_run(path: Path, metrics: dict[str, float]) -> Path:
    """A run directory as `steer run` leaves it (its one writers of results.json and tuned.json)."""
    from steer.rewriting.records import RunResults, TunedChoice, TuneResult

    guided = {"mode": "shift", "top_k": "5%", "strength": 2.0}
    rows = [
        {"direction": "a-b", "source": "a", "target": "b", "mode": m, "settings": s, "metrics": metrics}
        for m, s in (("prompt", {"mode": "prompt"}), ("guided", guided))
    ]
    path.mkdir()
    RunResults("toy", "tiny", "f00", rows, judge="tfidf", judge_heldout_accuracy={"tfidf": float("nan")}).write(
        path / "results.json"
    )
    trials = [{"direction": "a-b", "settings": guided, "metrics": metrics}]
    chosen = {"a-b": TunedChoice(guided, metrics, metrics)}
    TuneResult("j", "minilm", 0.8, 1.2, 2, chosen, trials).write(path / "tuned.json")
    return path


def _config(tmp_path: Path, model: Path, extra: str = "") -> Path:
    data = tmp_path / "data"
    data.mkdir(parents=True)
    (data / "train.formal.txt").write_text("\n".join(FORMAL * 4) + "\n")
    (data / "train.informal.txt").write_text("\n".join(INFORMAL * 4) + "\n")
    (data / "dev.formal.txt").write_text("\n".join(FORMAL[:3]) + "\n")
    (data / "dev.informal.txt").write_text("\n".join(INFORMAL[:3]) + "\n")
    (data / "refs.txt").write_text("\n".join(INFORMAL[:2] + [""]) + "\n")
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(f'''
name = "tiny"
model = "{model}"
data_dir = "{data}"
modes = ["prompt", "deactivate", "deactivate+contrast"]
metrics = ["accuracy", "bleu", "self-bleu", "copy", "ppl"]
[styles.formal]
train = "{{data_dir}}/train.formal.txt"
dev = "{{data_dir}}/dev.formal.txt"
[styles.informal]
train = "{{data_dir}}/train.informal.txt"
dev = "{{data_dir}}/dev.informal.txt"
[[directions]]
from = "formal"
to = "informal"
refs = ["{{data_dir}}/refs.txt"]
[[directions]]
from = "informal"
to = "formal"
[selection]
top_k = "10%"
method = "diff"
[contrast]
layers = "0-1"
beta = 0.5
[transfer]
max_new_tokens = 4
batch_size = 2
[tune]
candidates = ["guided", {{ mode = "deactivate", top_k = "5%" }}, {{ preset = "guided", strength = 3.0, alpha = 0.5 }}]
limit = 2
{extra}
''')
    return cfg


def _profile_file(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> Path:
    out = tmp_path / "p.safetensors"
    assert run(*profile_args(saved_model, corpus_files), "-o", str(out), "-q").exit_code == 0
    return out


def _steering(prof: Path) -> list[str]:
    """Profile, direction and a selection large enough to edit the tiny model."""
    return ["-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%", "--method", "diff"]


@pytest.fixture
def lm_and_profile() -> tuple[Any, Any]:
    lm = make_lm("llama")
    return lm, toy_profile(lm)


# `steer transfer -o FILE` runs to interrupt, resume and compare byte for byte.
def _transfer(prof: Path, *args: str) -> list[str]:
    return ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--max-new-tokens", "4", "-q", *args]


def _transfer_args(prof: Path, inputs: Path) -> list[str]:
    return ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "-i", str(inputs),
            "--max-new-tokens", "4", "--batch-size", "2", "-q"]  # fmt: skip


def _profiled(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> tuple[Path, Path]:
    prof = tmp_path / "p.safetensors"
    subprocess.run([sys.executable, "-m", "steer", *profile_args(saved_model, corpus_files), "-o", str(prof), "-q"],
                   check=True, capture_output=True)  # fmt: skip
    inputs = tmp_path / "in.txt"  # a blank line stays a blank record
    inputs.write_text("\n".join([*FORMAL[:3], "", *FORMAL[3:], *INFORMAL[:3]]) + "\n", encoding="utf-8")
    return prof, inputs


def _whole_run(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> tuple[list[str], Path]:
    """`steer transfer`'s arguments on a fresh profile and input file, and the file an uninterrupted run
    writes with them (`whole.jsonl`): what an interrupted and resumed run must equal byte for byte."""
    args = _transfer_args(*_profiled(tmp_path, saved_model, corpus_files))
    whole = tmp_path / "whole.jsonl"
    assert CliRunner().invoke(cli, [*args, "-o", str(whole)]).exit_code == 0
    return args, whole


def _interrupted(args: list[str], out: Path, monkeypatch: pytest.MonkeyPatch, batches: int = 1) -> Path:
    """`steer transfer ARGS -o OUT` stopped by Ctrl-C after `batches` batches: its partial file."""
    original = PartialRecords.append
    calls: list[int] = []

    def crash(self: PartialRecords, items: Any) -> None:
        if len(calls) == batches:
            raise KeyboardInterrupt
        calls.append(len(items))
        original(self, items)

    monkeypatch.setattr(PartialRecords, "append", crash)
    assert CliRunner().invoke(cli, [*args, "-o", str(out)]).exit_code == 130
    monkeypatch.setattr(PartialRecords, "append", original)
    partial = out.with_name(out.name + ".partial")
    assert partial.is_file()
    return partial
