"""Style markers: which words mark a style by their salience, and that keep-words leaves them out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FORMAL, INFORMAL, make_lm, toy_profile, write_corpora

from steer.errors import SteerError
from steer.generation.keeping import content_tokens
from steer.generation.markers import StyleMarkers, style_markers
from steer.generation.steerer import Steerer, TransferSettings

TOXIC = ["this shit is stupid", "shit food again", "stupid shit", "what shit food", "shit happens", "stupid food"]
NEUTRAL = ["good food here", "the food was cold", "a good day", "nice food", "good luck", "fine weather"]


def test_a_marker_is_in_many_more_of_its_styles_texts_than_of_the_others() -> None:
    # "shit": in 5 of 6 toxic texts and no neutral one, (5 + 1) / 6 over (0 + 1) / 6 = 6 ≥ 5
    assert style_markers(TOXIC, NEUTRAL) == {"shit"}
    # "stupid": 3 of 6, salience 4; "food" is in 3 texts of each (1); "happen" in one text only
    assert style_markers(TOXIC, NEUTRAL, salience=3.0) == {"shit", "stupid"}
    assert style_markers(TOXIC, NEUTRAL, salience=1.5) == {"shit", "stupid"}  # "happen" (2): too rare
    assert style_markers(NEUTRAL, TOXIC, salience=3.0) == {"good"}  # the other way round
    # texts, not occurrences, are counted: "stupid" in 4 of 7 (4.3), not 6 occurrences (6)
    assert style_markers([*TOXIC, "stupid stupid stupid"], NEUTRAL) == {"shit"}


def test_markers_need_texts_of_both_styles_and_known_styles() -> None:
    with pytest.raises(SteerError, match="both styles"):
        style_markers([], NEUTRAL)
    markers = StyleMarkers({"toxic": TOXIC, "neutral": NEUTRAL})
    assert markers("toxic", "neutral") is markers("toxic", "neutral")  # computed once per direction
    with pytest.raises(SteerError, match="'polite'.*have: neutral, toxic"):
        markers("polite", "neutral")


def test_keep_words_leaves_out_the_words_it_is_told_to_skip() -> None:
    def encode(text: str) -> list[int]:
        return [hash(text.strip().lower()) % 1000]  # one id per word, spellings alike

    words = content_tokens(encode, "this shit food is stupid")
    assert len(words) == 3  # shit, food, stupid
    assert content_tokens(encode, "this shit food is stupid", {"shit", "stupid"}) == [words[1]]
    assert content_tokens(encode, "42 shits", ["shit"]) == content_tokens(encode, "42")  # plural: the same word


def test_the_steerer_keeps_the_words_of_its_markers_out_of_the_plan() -> None:
    lm = make_lm("llama")
    steerer = Steerer(lm, toy_profile(lm))
    texts = ["hey dude send it asap lol"]
    kept = replace(TransferSettings.preset("guided", top_k="10%", max_new_tokens=4), keep_words=4.0)
    every = steerer._plan(texts, "informal", "formal", [kept]).keep_tokens[0]
    markers = lambda source, target: frozenset({"dude", "lol"}) if source == "informal" else frozenset()  # noqa: E731
    steerer = Steerer(lm, toy_profile(lm), markers=markers)
    fewer = steerer._plan(texts, "informal", "formal", [kept]).keep_tokens[0]
    assert len(every) == 5 and len(fewer) == 3  # hey, dude, send, asap, lol → hey, send, asap
    assert all(w in every for w in fewer)
    assert steerer._plan(texts, "formal", "informal", [kept]).keep_tokens[0] == every  # the other direction's
    lowered = steerer._plan(texts, "informal", "formal", [kept]).marker_tokens[0]  # dude, lol: lowered instead
    encode = lambda text: lm.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert all(spelling in lowered for spelling in (encode(" dude"), encode("dude"), encode(" lol")))
    assert encode(" send") not in lowered
    assert steerer._plan(texts, "formal", "informal", [kept]).marker_tokens == []  # no markers that way


def test_toy_corpora_have_no_markers_at_the_default_salience() -> None:
    """So the toy runs the other tests make keep every content word, as before markers."""
    assert style_markers(FORMAL, INFORMAL) == frozenset() and style_markers(INFORMAL, FORMAL) == frozenset()


DUDES = [
    "hey dude send it asap lol",
    "gimme it now dude !",
    "dude ok lol",
    "yes dude send it now !",
    "why dude",
    "hey dude",
]


@pytest.fixture
def corpus_files(tmp_path: Path) -> tuple[Path, Path]:
    """Toy corpora in which "dude" marks the informal style (in 6 of 6 texts, no formal one)."""
    return write_corpora(tmp_path, FORMAL, DUDES)


def test_steer_transfer_finds_markers_in_the_profiles_recorded_corpora(
    prof: Path, corpus_files: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    from steer.rewriting.service import RewriteJob, RewriteService

    kept = replace(TransferSettings.preset("guided", top_k="10%", max_new_tokens=4), keep_words=4.0)
    service = RewriteService(RewriteJob(str(prof), "informal", "formal", kept))
    assert service.steerer.markers is not None and service.steerer.markers("informal", "formal") == {"dude"}
    assert (
        RewriteService(RewriteJob(str(prof), "informal", "formal", replace(kept, keep_words=0))).steerer.markers is None
    )
    for file in corpus_files:
        file.unlink()  # the recorded corpora are gone: the recipe still runs, keeping every word, and says so
    with caplog.at_level("WARNING"):
        service = RewriteService(RewriteJob(str(prof), "informal", "formal", kept))
    assert service.steerer.markers is None
    assert "style markers too" in caplog.text and "does not exist" in caplog.text
    assert len(service.results(["hey dude"])) == 1
