"""Steer-and-rerank on the tiny model: the ladder decoded in one batch equals separate runs, λ = 0 is
plain prompting, the best score wins (usable first, rung weights), a repeated rung is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from conftest import FORMAL, INFORMAL, make_lm, one_line_error, profile_args, run, toy_profile, transfer_args

from steer.cli import cli
from steer.errors import SteerError
from steer.generation.rerank import candidate_scores, choose, flag_level, likely_usable
from steer.generation.steerer import Steerer, TransferSettings
from steer.ladder import DEFAULT_LADDER, RerankSettings, Rung, parse_ladder
from steer.profiling.probe import StyleProbe, build_probe, probe_path


def test_choose_and_scores_on_hand_made_numbers() -> None:
    assert choose([0.2, 0.5, 0.5, 0.1]) == 1  # ties go to the earlier (weaker) rung
    assert choose([0.0, 0.0]) == 0  # nothing better than the plain prompt: keep it
    scores = candidate_scores([0.9, 0.6], [0.5, -0.2], [1.0, 1.0], [1.0, 1.0])
    assert scores == pytest.approx([0.45, 0.0])  # negative similarity is clipped
    # a tempered probe lets similarity decide between a stylish paraphrase and a faithful one
    style, sims, ones = [0.98, 0.25], [0.4, 0.9], [1.0, 1.0]
    assert choose(candidate_scores(style, sims, ones, ones)) == 0
    tempered = candidate_scores(style, sims, ones, ones, style_exponent=0.25)
    assert tempered == pytest.approx([0.98**0.25 * 0.4, 0.25**0.25 * 0.9]) and choose(tempered) == 1
    with pytest.raises(SteerError, match="`style_exponent` must be in"):
        RerankSettings(style_exponent=0.0)
    assert parse_ladder("0, 1.5,u0.5, U1") == (Rung(0.0), Rung(1.5), Rung(0.5, guided=False), Rung(1.0, False))
    assert parse_ladder("u0") == (Rung(0.0),)  # λ = 0 is the plain prompt either way
    assert RerankSettings(ladder=(0, 2.0, "u1")).label == "0,2,u1"
    assert [r.rows for r in parse_ladder("0,u1,2")] == [1, 1, 2]
    for bad in ("a,b", "-1", "", "u", "g2", "nan", "inf", "3k", "3k0", "3k-1", "3kinf", "k2"):
        with pytest.raises(SteerError, match="`ladder`"):
            parse_ladder(bad)
    keep = parse_ladder("3k2,u0.5K1.5,0k4")
    assert keep == (Rung(3.0, keep=2.0), Rung(0.5, guided=False, keep=1.5), Rung(0.0, keep=4.0))
    assert [str(r) for r in keep] == ["3k2", "u0.5k1.5", "0k4"] and [r.rows for r in keep] == [2, 1, 1]


def test_rung_recipes_vary_only_strength_and_guidance() -> None:
    base = TransferSettings.preset("guided", top_k="10%", alpha=0.2, max_new_tokens=8)
    prompt, guided, unguided = RerankSettings(ladder=(0, 3, "u0.5"), base=base).candidates()
    assert prompt.mode == "prompt" and prompt.max_new_tokens == 8
    assert guided == replace(base, strength=3.0)
    assert unguided == replace(base, strength=0.5, guidance=0.0)
    kept_prompt, kept = RerankSettings(ladder=("0k4", "3k2"), base=base).candidates()
    assert kept_prompt == replace(prompt, keep_words=4.0) and kept == replace(base, strength=3.0, keep_words=2.0)
    # a rung without kβ keeps the base's β
    assert RerankSettings(ladder=(3,), base=replace(base, keep_words=1.0)).candidates()[0].keep_words == 1.0


def test_cli_default_ladder_is_the_library_default() -> None:
    from steer.cli.transfer import transfer as transfer_command

    option = next(p for p in transfer_command.params if p.name == "ladder")
    assert option.default is None  # not given: RerankSettings' own default, which the help shows
    shown = (option.help or "").rsplit("[default: ", 1)[1].rstrip("]")
    assert parse_ladder(shown) == DEFAULT_LADDER


def test_ladder_in_one_batch_equals_separate_runs_and_lambda_zero_is_the_prompt() -> None:
    lm = make_lm("llama")
    profile = toy_profile(lm)
    steerer = Steerer(lm, profile)
    texts = FORMAL + INFORMAL
    base = TransferSettings.preset("guided", top_k="10%", max_new_tokens=8, batch_size=4)
    settings = RerankSettings(ladder=(0.0, "u1", 3.0), base=base)
    together = steerer.transfer_candidates(texts, "formal", "informal", settings.candidates())
    separately = [steerer.transfer(texts, "formal", "informal", c) for c in settings.candidates()]
    for a, b in zip(together, separately, strict=True):
        assert [r.info["token_ids"] for r in a] == [r.info["token_ids"] for r in b]
    plain = steerer.transfer(texts, "formal", "informal", TransferSettings.bare(mode="prompt", max_new_tokens=8))
    assert [r.info["token_ids"] for r in together[0]] == [r.info["token_ids"] for r in plain]
    assert [r.output for r in together[2]] != [r.output for r in together[0]]  # λ = 3 did steer
    assert [r.output for r in together[1]] != [r.output for r in together[0]]  # so did unguided λ = 1


def test_rerank_cli_end_to_end(tmp_path: Path, saved_model: Path, corpus_files: tuple[Path, Path]) -> None:
    prof = tmp_path / "p.safetensors"
    runner = CliRunner()
    assert runner.invoke(cli, [*profile_args(saved_model, corpus_files), "-o", str(prof), "-q"]).exit_code == 0
    base = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%",
            "--max-new-tokens", "5", "--preset", "rerank", "-q"]  # fmt: skip
    missing = runner.invoke(cli, [*base, "hello"])
    assert missing.exit_code == 1 and "steer probe" in missing.output
    default = [x for x in base if x not in ("--preset", "rerank", "-q")]
    plain = tmp_path / "plain.jsonl"
    noted = runner.invoke(cli, [*default, "-o", str(plain), "hello"])  # no probe yet: guided, with a note
    assert noted.exit_code == 0 and "has no style probe" in noted.output
    assert json.loads(plain.read_text())["mode"] == "shift"
    built = runner.invoke(cli, ["probe", str(prof), "--top", "16", "--allow-no-heldout", "-q"])  # 11 toy texts
    assert built.exit_code == 0, built.output
    assert probe_path(prof).is_file() and "held-out accuracy" in built.output
    shown = runner.invoke(cli, ["inspect", str(prof), "--top-k", "10%"])
    assert "style probe" in shown.output
    out = tmp_path / "o.jsonl"
    result = runner.invoke(cli, [*base, "--ladder", "0,2,u1", "--keep-candidates", "-o", str(out), *FORMAL[:2]])
    assert result.exit_code == 0, result.output
    records = [json.loads(x) for x in out.read_text().splitlines()]
    for r in records:
        cands = r["rerank"]["candidates"]
        assert [c["rung"] for c in cands] == ["0", "2", "u1"] and [c["strength"] for c in cands] == [0.0, 2.0, 1.0]
        levels = [flag_level(c["flags"]) for c in cands]
        clean = [k for k in range(3) if levels[k] == min(levels)]  # flagged never beats clean, mild before worse
        clean = [k for k in clean if cands[k]["likely_usable"]] or clean  # then likely usable first
        best = max(clean, key=lambda k: (cands[k]["score"], -k))
        assert r["rerank"]["chosen"] == best and r["output"] == cands[best]["output"]
        assert r["rerank"]["rung"] == cands[best]["rung"] and r["ladder"] == "0,2,u1"
    weighed = tmp_path / "w.jsonl"
    args = ["--ladder", "0,2,u1", "--rung-weights", "2=1e6", "--score-only", "--keep-candidates", "-o", str(weighed)]
    result = runner.invoke(cli, [*base, *args, *FORMAL[:2]])
    assert result.exit_code == 0, result.output
    for r in (json.loads(x) for x in weighed.read_text().splitlines()):
        assert r["rung_weights"] == {"2": 1e6} and r["usable_first"] is False
        assert [c["weight"] for c in r["rerank"]["candidates"]] == [1.0, 1e6, 1.0]
    for extra, message in (
        (["--rung-weights", "2=2"], "names rung '2', which the ladder 0,u0.5,3,2k4,4k4 does not have"),
        (["--rung-weights", "3k4"], "rung weight '3k4' is not RUNG=NUMBER"),
    ):
        refused = runner.invoke(cli, [*base, *extra, "hello"])
        assert refused.exit_code == 1 and message in refused.output, refused.output
    guided = [x if x != "rerank" else "guided" for x in base]
    refused = runner.invoke(cli, [*guided, "--rung-weights", "3k4=2", "hello"])
    assert refused.exit_code == 1 and "--rung-weights weighs rerank candidates" in refused.output
    bad = runner.invoke(cli, [*base, "--ladder", "0,x", "hello"])
    assert bad.exit_code == 1 and "--ladder rung 'x' is not valid" in bad.output
    compare = runner.invoke(cli, [*base, "--compare", FORMAL[0]])
    assert compare.exit_code == 0 and "→ λ=" in compare.output
    chosen = tmp_path / "default.jsonl"  # with a probe, rerank is the default recipe
    assert runner.invoke(cli, [*default, "-q", "-o", str(chosen), "hello"]).exit_code == 0
    assert json.loads(chosen.read_text())["mode"] == "rerank"
    ignored = runner.invoke(cli, [*base, "--strength", "3", "hello"])
    assert ignored.exit_code == 1 and "--strength 3 has no effect under rerank" in ignored.output


def test_rank_scores_each_distinct_text_once_and_equals_a_per_candidate_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference scores every candidate list on its own (probe, encoder, fluency); rank() reads
    each distinct text once — candidates repeat each other and the source — with the same scores."""
    from steer.generation.rerank import Reranker, _fluency
    from steer.generation.steerer import TransferResult
    from steer.scoring.encoders import Embedder

    lm = make_lm("llama")
    profile = toy_profile(lm)
    probe = build_probe(lm, profile, {"formal": FORMAL, "informal": INFORMAL}, top=16, compare_judges=False)
    embedder = Embedder()
    texts = FORMAL[:3]
    rows = [[FORMAL[0], INFORMAL[0], ""], [INFORMAL[1], INFORMAL[0], FORMAL[2]], [INFORMAL[1], INFORMAL[2], "ok ok"]]
    decoded = [[TransferResult(t, o, o) for t, o in zip(texts, outs, strict=True)] for outs in rows]
    settings = RerankSettings(ladder=(0.0, 1.0, 2.0), style_exponent=0.5)
    reads: list[int] = []
    score = StyleProbe.score
    monkeypatch.setattr(StyleProbe, "score", lambda self, *a: reads.append(len(a[1])) or score(self, *a))
    ranked = Reranker(Steerer(lm, profile), probe, embedder).rank(texts, "informal", decoded, settings)
    assert reads == [len(set(texts) | {o for outs in rows for o in outs})]  # one pass over distinct texts
    _, source_nll = score(probe, lm, texts, "informal")
    for k, outs in enumerate(rows):
        style, nll = score(probe, lm, outs, "informal")
        sims = embedder.similarities(outs, texts)
        fluency = [_fluency(o, n, s) for o, n, s in zip(outs, nll, source_nll, strict=True)]
        expected = candidate_scores(style, sims, fluency, [1.0] * 3, 0.5)
        got = [r.info["rerank"]["candidates"][k]["score"] for r in ranked]
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)
    for i, r in enumerate(ranked):
        cands = r.info["rerank"]["candidates"]
        scores, flagged = [c["score"] for c in cands], [flag_level(c["flags"]) for c in cands]
        likely = [likely_usable(c["style"], c["similarity"], bool(f)) for c, f in zip(cands, flagged, strict=True)]
        assert [c["likely_usable"] for c in cands] == likely
        assert r.output == rows[choose(scores, flagged, likely)][i]
    assert ranked[2].info["rerank"]["candidates"][0]["flags"] == ["empty", "dropped"]  # "" never beats a clean one
    assert ranked[2].output != ""


def test_usable_first_on_hand_made_numbers() -> None:
    """A candidate the selection side reads as usable (probe > ½, MiniLM similarity ≥ 0.5, no flag)
    beats a higher-scoring one it does not; the score decides within each group."""
    assert likely_usable(0.51, 0.5, False) and not likely_usable(0.5, 0.9, False)
    assert not likely_usable(0.9, 0.49, False) and not likely_usable(0.9, 0.9, True)
    # a near-copy (probe 0.4, similarity 1.0) outscores a rewrite (0.6, 0.6): only usable-first keeps the rewrite
    style, sims, ones = [0.4, 0.6], [1.0, 0.6], [1.0, 1.0]
    scores = candidate_scores(style, sims, ones, ones, style_exponent=0.5)
    likely = [likely_usable(p, s, False) for p, s in zip(style, sims, strict=True)]
    assert scores[0] > scores[1] and likely == [False, True]
    assert choose(scores) == 0 and choose(scores, [False, False], likely) == 1
    assert choose([0.2, 0.9, 0.5], [False, False, False], [True, False, True]) == 2  # the best of the likely
    assert choose([0.2, 0.9], [False, True], [False, False]) == 0  # none likely: flags, then score
    assert choose([0.2, 0.9], [False, False], [False, False]) == 1
    assert choose([0.2, 0.9], [True, False], [True, False]) == 1  # flags come first, whatever is preferred


def test_rank_applies_rung_weights_and_weight_one_is_a_no_op() -> None:
    from steer.generation.rerank import Reranker
    from steer.generation.steerer import TransferResult
    from steer.scoring.encoders import Embedder

    lm = make_lm("llama")
    profile = toy_profile(lm)
    probe = build_probe(lm, profile, {"formal": FORMAL, "informal": INFORMAL}, top=16, compare_judges=False)
    reranker = Reranker(Steerer(lm, profile), probe, Embedder())
    texts = FORMAL[:3]
    rows = [[FORMAL[0], INFORMAL[0], FORMAL[1]], [INFORMAL[1], INFORMAL[0], FORMAL[2]]]
    decoded = [[TransferResult(t, o, o) for t, o in zip(texts, outs, strict=True)] for outs in rows]

    def ranked(**kw: Any) -> list[Any]:
        return reranker.rank(texts, "informal", decoded, RerankSettings(ladder=(0, 1), **kw))

    plain, one = ranked(), ranked(rung_weights={"1": 1.0})
    assert [r.output for r in plain] == [r.output for r in one]
    assert [r.info["rerank"] for r in plain] == [
        {**r.info["rerank"], "candidates": [{**c, "weight": 1.0} for c in r.info["rerank"]["candidates"]]} for r in one
    ]
    heavy = ranked(rung_weights={"1": 1e6}, usable_first=False)  # the weighted rung wins wherever it scores
    for r, p in zip(heavy, ranked(usable_first=False), strict=True):
        before, after = p.info["rerank"]["candidates"], r.info["rerank"]["candidates"]
        assert after[1]["score"] == pytest.approx(before[1]["score"] * 1e6) and after[0]["score"] == before[0]["score"]
        if after[1]["score"] > 0 and not after[1]["flags"]:
            assert r.output == rows[1][texts.index(r.text)]


def test_records_are_the_same_at_any_batch_size_and_thread_count(tmp_path: Path, prof: Path) -> None:
    """Every number a rerank record carries (probe style, NLL-based fluency, MiniLM similarity,
    score) is the same float at batch sizes 1, 3 and 16 and on 1 or 2 threads: the scoring passes
    read each text alone on one thread (`steer.model.invariant`). Only `settings.batch_size` differs."""
    runner = CliRunner()
    assert runner.invoke(cli, ["probe", str(prof), "--top", "16", "--allow-no-heldout", "-q"]).exit_code == 0
    base = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", "--top-k", "10%",
            "--max-new-tokens", "6", "--preset", "rerank", "--ladder", "0,2,u1", "--keep-candidates", "-q"]  # fmt: skip
    texts = [*FORMAL, *INFORMAL[:4]]
    before = torch.get_num_threads()
    records = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for batch in (1, 3, 16):
                out = tmp_path / f"t{threads}-b{batch}.jsonl"
                result = runner.invoke(cli, [*base, "--batch-size", str(batch), "-o", str(out), *texts])
                assert result.exit_code == 0, result.output
                assert torch.get_num_threads() == threads  # the scoring passes put the thread count back
                rows = [json.loads(line) for line in out.read_text().splitlines()]
                for row in rows:
                    assert row["settings"].pop("batch_size") == batch
                records[threads, batch] = rows
    finally:
        torch.set_num_threads(before)
    first = records[1, 1]
    assert len(first) == len(texts) and all(len(r["rerank"]["candidates"]) == 3 for r in first)
    for key, rows in records.items():
        assert rows == first, key  # floats compared exactly


class _captured_warning:
    """Collect the messages rerank's settings (steer.ladder) log at WARNING."""

    def __enter__(self) -> list[str]:
        import logging

        self.messages: list[str] = []
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.messages.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("steer.ladder").addHandler(self.handler)
        return self.messages

    def __exit__(self, *exc: Any) -> None:
        import logging

        logging.getLogger("steer.ladder").removeHandler(self.handler)


# 10. duplicate rungs are refused; absurd strengths get a warning
def test_duplicate_and_absurd_rungs(prof: Path) -> None:
    one_line_error(run(*transfer_args(prof), "--preset", "rerank", "--ladder", "0,0,0", "hey"), "repeats rung 0")
    from steer.ladder import RerankSettings

    with _captured_warning() as seen:
        RerankSettings(ladder=(0, "u1e9"))
    assert any("u1e+09" in m or "u1e9" in m for m in seen)
