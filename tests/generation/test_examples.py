"""Few-shot rungs: the example pool returns the nearest target-style texts (never the source), the
prompt shows them before the instruction, and a ladder mixing few-shot and plain rungs decodes
exactly what each recipe decodes on its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from conftest import FORMAL, INFORMAL, make_lm, toy_profile

from steer.errors import SteerError
from steer.generation.decoding import decoding_groups
from steer.generation.examples import ExamplePool, ExampleSource
from steer.generation.rerank import Reranker
from steer.generation.steerer import Steerer
from steer.labels import describe
from steer.ladder import RerankSettings, Rung, parse_ladder
from steer.prompts import examples_block, render_prompt, reply_opening
from steer.settings import TransferSettings


class LetterEncoder:
    """A transparent encoder: normalised counts of the letters a–z (so nearness is checkable by hand)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        self.calls.append(len(texts))
        out = torch.zeros(len(texts), 26)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return torch.nn.functional.normalize(out, dim=-1)


def test_pool_returns_the_k_nearest_least_similar_first_and_never_the_source() -> None:
    pool = ExamplePool(["aaa b", "zzz", "aaaa", " aaaa ", "bbb", ""], LetterEncoder())
    assert pool.texts == ["aaa b", "zzz", "aaaa", "bbb"]  # stripped, deduplicated, empty dropped
    encoder = pool.encoder
    vectors = encoder.encode(pool.texts)
    query = encoder.encode(["aa"])[0]
    ranked = sorted(pool.texts, key=lambda t: -float(vectors[pool.texts.index(t)] @ query))
    assert pool.nearest(["aa"], 2) == [list(reversed(ranked[:2]))]  # reference: sort by cosine
    assert pool.nearest(["AAAA"], 1) == [["aaa b"]]  # "aaaa" is the source itself (case-folded): skipped
    assert pool.nearest(["aa", "zz"], 0) == [[], []]
    assert len(pool.nearest(["q"], 10)[0]) == 4  # never more than the pool holds


def test_pool_refuses_an_empty_corpus_and_source_names_the_style() -> None:
    with pytest.raises(SteerError, match="no texts"):
        ExamplePool(["", "  "], LetterEncoder())
    source = ExampleSource({"informal": INFORMAL}, LetterEncoder())
    with pytest.raises(SteerError, match="'formal'.*informal"):
        source("formal", ["x"], 2)
    encoder = LetterEncoder()
    source = ExampleSource({"informal": INFORMAL}, encoder)
    source("informal", ["a"], 1), source("informal", ["b"], 1)
    assert encoder.calls == [len(INFORMAL), 1, 1]  # the pool is embedded once


def test_examples_block_goes_before_the_instruction_and_none_changes_nothing() -> None:
    from conftest import make_tokenizer

    tok = make_tokenizer()
    plain = render_prompt(tok, "rewrite : {text}", "hey dude", "informal", "formal", '"')
    shown = render_prompt(tok, "rewrite : {text}", "hey dude", "informal", "formal", '"', ["thanks ,  i\nwould"])
    assert render_prompt(tok, "rewrite : {text}", "hey dude", "informal", "formal", '"', []) == plain
    block = examples_block(["thanks ,  i\nwould"], "formal")
    assert block == "Some formal sentences, for reference:\n- thanks , i would\n\n"
    assert shown == plain.replace("rewrite : hey dude", block + "rewrite : hey dude")


def test_settings_check_examples_and_describe_them() -> None:
    with pytest.raises(SteerError, match="`examples`"):
        TransferSettings(examples=-1)
    with pytest.raises(SteerError, match="`examples`"):
        TransferSettings(examples=99)
    assert describe(TransferSettings.bare(mode="prompt", examples=3)) == "prompt only + 3 examples"


def test_few_shot_rungs_parse_and_build_their_recipes() -> None:
    assert [str(r) for r in parse_ladder("0,f0,f1,fu0.5")] == ["0", "f0", "f1", "fu0.5"]
    assert Rung.parse("F2") == Rung(2.0, True, True)
    base = TransferSettings.preset("guided", max_new_tokens=8)
    plain, f0, f1, fu = RerankSettings(ladder=(0, "f0", "f1", "fu0.5"), base=base, examples=3).candidates()
    assert plain.examples == 0 and f0 == TransferSettings.resolve("prompt", base=base, examples=3)
    assert f1 == TransferSettings.resolve(base=base, mode="shift", strength=1.0, examples=3)
    assert fu.guidance == 0 and fu.examples == 3
    assert decoding_groups([plain, f0, f1, fu]) == [[0], [1, 2, 3]]
    with pytest.raises(SteerError, match="`examples`"):
        Rung.parse("f1").recipe(base, 0)


def test_steerer_without_examples_says_how_to_give_them() -> None:
    lm = make_lm("llama")
    with pytest.raises(SteerError, match="`examples` 2 needs texts of the formal style"):
        Steerer(lm).transfer(["hey"], "informal", "formal", TransferSettings.bare(mode="prompt", examples=2))


def test_few_shot_prompt_tokens_and_mixed_ladder_equal_each_recipe_alone() -> None:
    lm = make_lm("llama")
    profile = toy_profile(lm)
    steerer = Steerer(lm, profile, examples=ExampleSource({"formal": FORMAL, "informal": INFORMAL}, LetterEncoder()))
    texts = FORMAL[:3] + INFORMAL[:3]
    base = TransferSettings.preset("guided", top_k="10%", max_new_tokens=6, batch_size=4)
    few = TransferSettings.resolve("prompt", base=base, examples=2)
    # the prompt holds exactly the pool's nearest examples, rendered before the instruction
    ids, _ = steerer.encode_prompts(texts, "formal", "informal", few)
    shots = steerer.examples("informal", texts, 2)
    template = steerer.prompts["formal->informal"]
    opening = reply_opening("formal", "informal", few, steerer.openings)
    for i, text in enumerate(texts):
        expected = render_prompt(lm.tokenizer, template, text, "formal", "informal", opening, shots[i])
        assert ids[i] == lm.tokenizer(expected, add_special_tokens=False)["input_ids"]
    settings = RerankSettings(ladder=(0, "f0", "f1"), base=base, examples=2)
    recipes = settings.candidates()
    grouped = steerer.transfer_candidates(texts, "formal", "informal", recipes)
    for k, recipe in enumerate(recipes):
        alone = steerer.transfer(texts, "formal", "informal", recipe)
        assert [r.info["token_ids"] for r in grouped[k]] == [r.info["token_ids"] for r in alone]
    assert [r.info["token_ids"] for r in grouped[1]] != [r.info["token_ids"] for r in grouped[0]]  # shots mattered


def test_rerank_with_few_shot_rungs_ranks_what_was_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rerank over a ladder whose rungs need two passes equals ranking the recipes decoded one by one."""
    from steer.profiling.probe import build_probe

    lm = make_lm("llama")
    profile = toy_profile(lm)
    probe = build_probe(lm, profile, {"formal": FORMAL, "informal": INFORMAL}, top=16, compare_judges=False)
    steerer = Steerer(lm, profile, examples=ExampleSource({"formal": FORMAL, "informal": INFORMAL}, LetterEncoder()))
    texts = FORMAL + INFORMAL[:2]
    base = TransferSettings.preset("guided", top_k="10%", max_new_tokens=6, batch_size=3)
    settings = RerankSettings(ladder=(0, "f0", "u1"), base=base, examples=2)
    reranker = Reranker(steerer, probe, LetterEncoderEmbedder())
    seen: list[list[int]] = []
    ranked = reranker.transfer(texts, "formal", "informal", settings, on_batch=lambda rows, _: seen.append(rows))
    assert sorted(i for rows in seen for i in rows) == list(range(len(texts)))  # every text handed on once
    decoded = [steerer.transfer(texts, "formal", "informal", c) for c in settings.candidates()]
    reference = reranker.rank(texts, "informal", decoded, settings)
    assert [r.output for r in ranked] == [r.output for r in reference]
    assert [r.info["rerank"]["rung"] for r in ranked] == [r.info["rerank"]["rung"] for r in reference]


class LetterEncoderEmbedder(LetterEncoder):
    """The letter encoder with the `similarities` rerank reads (cosine; an empty output scores 0)."""

    def similarities(
        self, outputs: Sequence[str | None], sources: Sequence[str], *, invariant: bool = False
    ) -> list[float]:
        a, b = self.encode([o or "" for o in outputs]), self.encode(list(sources))
        return [float(x) if o else 0.0 for x, o in zip((a * b).sum(-1), outputs, strict=True)]


def test_cli_ladder_with_a_few_shot_rung_uses_the_profiles_own_corpora(prof: Any, tmp_path: Any) -> None:
    """`--ladder 0,f0`: the few-shot rung's examples come from the corpora the profile records."""
    import json

    from click.testing import CliRunner

    from steer.cli import cli

    runner = CliRunner()
    assert runner.invoke(cli, ["probe", str(prof), "--allow-no-heldout", "-q"]).exit_code == 0
    out = tmp_path / "o.jsonl"
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--max-new-tokens", "4"]
    result = runner.invoke(cli, [*args, "--ladder", "0,f0", "--keep-candidates", "-q", "-o", str(out), "hey dude"])
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text().splitlines()[0])
    rungs = [c["rung"] for c in record["rerank"]["candidates"]]
    assert rungs == ["0", "f0"] and "4 examples" in record["rerank"]["candidates"][1]["recipe"]
