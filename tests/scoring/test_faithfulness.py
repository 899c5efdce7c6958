"""Faithfulness rules on hand-made strings (the failures issue 21 quotes among them), their rates in
`evaluate`, rerank's guard, and cleaning that refuses echoes."""

from __future__ import annotations

from typing import Any

import pytest

from steer.errors import SteerError
from steer.evaluation.metrics import USABLE_SIMILARITY, Scorers, evaluate
from steer.generation.replies import answer_complete, clean_output
from steer.generation.rerank import choose, flag_level, selection_flags
from steer.scoring import encoders
from steer.scoring.faithfulness import (
    content_kept,
    content_words,
    dropped,
    flags,
    instruction_text,
    invented,
    invented_share,
    junk,
    meta,
    near_loop,
)

TO_FORMAL = (
    "Rewrite this sentence in a formal, polite register with correct grammar and no slang. Keep its meaning. "
    "Reply with the rewritten sentence only.\n\n{text}"
)
TO_INFORMAL = (
    "Rewrite this sentence in a casual, informal style, as you would say it to a friend. Keep its meaning. "
    "Reply with the rewritten sentence only.\n\n{text}"
)
TO_SHAKESPEAREAN = (
    "Rewrite this line in the style of Shakespeare's plays (thou, thee, doth, hath). Keep its meaning. "
    "Reply with the rewritten line only.\n\n{text}"
)
FORMAL_INSTRUCTION = instruction_text(TO_FORMAL, "informal", "formal")
SHAKESPEAREAN_INSTRUCTION = instruction_text(TO_SHAKESPEAREAN, "modern", "shakespearean")
INFORMAL_INSTRUCTION = instruction_text(TO_INFORMAL, "formal", "informal")


@pytest.mark.parametrize(
    ("output", "source", "instruction"),
    [
        # the issue's examples
        (
            'I would say: "Rewrite this sentence in a formal, polite register with correct grammar and no slang."',
            "gotta go lol",
            FORMAL_INSTRUCTION,
        ),
        ('Rewrite the sentence to: "Rewrite the sentence to: …', "u r so cool", FORMAL_INSTRUCTION),
        (
            "The sentence is already rewritten in a casual, informal style, but I'll just rephrase it",
            "I would appreciate your help.",
            INFORMAL_INSTRUCTION,
        ),
        (
            "Rewrite this sentence in a casual, informal style, as you would say it to a friend.",
            "I regret to inform you that the meeting is cancelled.",
            INFORMAL_INSTRUCTION,
        ),
        # an echo of the instruction in other words than the task vocabulary: its 4-grams
        ("As you would say it to a friend, yo", "Please come.", INFORMAL_INSTRUCTION),
        ("Here is a more formal tone for you.", "hey", ""),
        # the instruction's example words listed (34 of 100 modern → shakespearean dev replies, plain prompt)
        ("Thou, thou, dost, hath.", "Thank you.", SHAKESPEAREAN_INSTRUCTION),
        (
            "Thou, thou, dost, hath sent seven of my servants to get him.",
            "I'd send seven of my servants.",
            SHAKESPEAREAN_INSTRUCTION,
        ),
        ("I kept its meaning: see you soon", "Goodbye for now.", ""),
    ],
)
def test_meta_flags_talk_about_the_task_and_echoes(output: str, source: str, instruction: str) -> None:
    assert meta(output, source, instruction)


@pytest.mark.parametrize(
    ("output", "source"),
    [
        ("Hey, what's up with the meeting?", "What is the status of the meeting?"),
        ("I would be grateful if you could send the report.", "send me the report pls"),
        # task words the source itself uses are content, not talk about the task
        ("Could you translate this sentence for me, please?", "translate this sentence for me"),
        ("", "anything"),
        # an apology that is the rewrite (issue 43, case 17), and requests and statements of people
        (
            "We're sorry, but we're unable to accommodate your request.",
            "We regret to inform you that the meeting has been cancelled.",
        ),
        ("Thanks for your review, I'll fix my statement.", "Thank you for reviewing it; I shall correct what I said."),
    ],
)
def test_meta_leaves_rewrites_alone(output: str, source: str) -> None:
    assert not meta(output, source, FORMAL_INSTRUCTION)


@pytest.mark.parametrize(
    ("output", "source"),
    [
        ("Thou dost not know, nor doth he.", "You don't know, and neither does he."),  # the words, not a list
        ("Thou, thou art a fool.", "You, you are a fool."),  # two items: no list
        ("Red, green, blue, hath he none.", "He has no red, green or blue."),  # a list with one told word
        ("Nay, nay, nay, I say.", "No, no, no, I say."),  # a list of words the instruction lacks
        ("Thou, thee, doth, hath.", "Thou, thee, doth, hath."),  # the source's own list is a copy
    ],
)
def test_a_list_is_an_echo_only_of_the_instructions_words(output: str, source: str) -> None:
    assert not meta(output, source, SHAKESPEAREAN_INSTRUCTION)


def test_near_loop() -> None:
    issue = "… a very real and very real example of a very real and very real example of the truth of the very very"
    assert near_loop(issue)
    assert near_loop("we should go go go, we should go")  # 3-gram "we should go" twice
    assert near_loop("thank you thank you for the help")  # a 2-word phrase twice in a row
    assert not near_loop("Thank you very much for the help.")
    assert not near_loop("very very good")  # one word twice is not a phrase
    # a repetition the source makes too is a faithful copy
    source = "let me see, let me see, let me see."
    assert near_loop(source) and not near_loop("Hmm, let me see, let me see, let me see.", source)
    assert near_loop("nay, nay, nay I say I say", source)  # "i say i say" is the output's own


def test_content_words_kept_and_invented() -> None:
    assert content_words("The cats didn't eat Tom's fish!") == {"cat", "did", "eat", "tom", "fish"}
    # a stop word ending in "s" is not a plural of a content word ("this" is not "thi")
    assert content_words("This always happens, perhaps; thus the cats") == {"happen", "cat"}
    assert content_words("I can't go, it won't ca n't wo n't end") == {"end"}  # "ca"/"wo" are can/will
    assert content_kept("the cat ate fish", "The cats eat fish") == pytest.approx(2 / 3)
    assert content_kept("anything", "the and of") is None  # no content words to keep
    assert invented_share("the dog ate fish", "The cat ate fish") == pytest.approx(1 / 3)
    assert invented_share("", "The cat ate fish") == 0.0
    source = "I like pizza."
    assert invented("I like pizza, and my uncle Bob owns a bakery in Paris with cheap bread.", source)
    assert not invented("Yes, I do like pizza, I do like it.", source)  # long, but hardly anything new
    assert not invented("I love cake.", source)  # new words, but not twice the length
    assert dropped("Okay.", "The committee approved the budget for next year.")
    assert not dropped("The committee okayed next year's budget.", "The committee approved the budget for next year.")
    assert dropped("", "The cat sat.") and not dropped("", "the and")


def test_junk() -> None:
    assert junk("The R Us R Us S R Us S S R Us S R Us")
    assert junk("Laura Br nono lao la br")
    assert junk("xqzt blorf wugga zzk")
    assert not junk("i did n't like it 's taste .")  # tokenised Yelp text
    assert not junk("Thou art a villain, and thy father hath no wit.")
    assert not junk("ok ok")  # too short to judge
    assert not junk("The count's messenger, Cesario.")  # a name and a possessive


def test_flags_and_instruction_text() -> None:
    assert instruction_text("Make it {target}: {text}", "formal", "informal") == "Make it informal: "
    f = flags("", "The cat sat.")
    assert f.empty and f.unusable and f.names() == ["empty", "dropped"]
    clean = flags("The cat was sitting.", "The cat sat.")
    assert not clean.any and clean.names() == []


class _Judge:
    name = "fake"

    def judgements(self, texts: list[str], target: str) -> list[tuple[float, bool]]:
        return [(0.9, "hey" in t.lower()) for t in texts]


class _Encoder:
    name = "fake-encoder"

    def __init__(self, sims: list[float]) -> None:
        self.sims = sims

    def similarities(self, outputs: list[str], sources: list[str]) -> list[float]:
        return self.sims[: len(outputs)]


def test_evaluate_rates_and_usable_on_hand_made_outputs() -> None:
    sources = ["Good morning, Sir.", "Please send the file.", "I appreciate it.", "Thank you kindly.", "Go now."]
    outputs = [
        "Hey, morning!",  # target style, close: usable
        "Hey, rewrite this sentence: send the file",  # meta
        "Hey hey thanks thanks hey hey thanks thanks",  # near-loop
        "Hey, thanks.",  # similarity below the bar
        "Leave now.",  # not judged target style
    ]
    sims = [0.8, 0.9, 0.7, USABLE_SIMILARITY - 0.01, 0.9]
    result = evaluate(
        outputs,
        sources=sources,
        target="informal",
        metrics=("meta", "near-loop", "junk", "content", "chrf-src", "usable", "accuracy"),
        scorers=Scorers(classifier=_Judge(), embedder=_Encoder(sims)),  # type: ignore[arg-type]
        per_sentence=True,
        instruction=INFORMAL_INSTRUCTION,
    )
    assert result["meta"] == pytest.approx(1 / 5)
    assert result["near_loop"] == pytest.approx(1 / 5)
    assert result["junk"] == 0.0
    assert result["accuracy"] == pytest.approx(4 / 5)
    assert result["usable"] == pytest.approx(1 / 5)
    assert result["sentences"]["usable"] == [True, False, False, False, False]
    kept = [k for k in (content_kept(o, s) for o, s in zip(outputs, sources, strict=True)) if k is not None]
    assert len(kept) == 4  # "Go now." has no content word: it is left out of the mean
    assert result["content_kept"] == pytest.approx(sum(kept) / len(kept))
    import sacrebleu

    assert result["chrf_src"] == pytest.approx(sacrebleu.corpus_chrf(outputs, [sources]).score)


def test_evaluation_refuses_the_selection_encoder_unless_asked() -> None:
    class Selection(_Encoder):
        name = encoders.SELECTION_ENCODER

    kwargs: dict[str, Any] = {"sources": ["a b c"], "target": "informal", "metrics": ("similarity",)}
    with pytest.raises(SteerError, match="rerank and tuning select with"):
        evaluate(["a b"], scorers=Scorers(embedder=Selection([0.5])), **kwargs)  # type: ignore[arg-type]
    allowed = Scorers(embedder=Selection([0.5]), allow_selection_encoder=True)  # type: ignore[arg-type]
    assert evaluate(["a b"], scorers=allowed, **kwargs)["similarity"] == 0.5


def test_rerank_never_prefers_a_flagged_candidate() -> None:
    source = "I would appreciate a reply."
    candidates = [
        "Reply please.",  # λ = 0: clean, lowest score
        "Rewrite this sentence in a casual, informal style, as you would say it to a friend.",  # meta
        "hey hey reply reply hey hey reply reply",  # near-loop
        "Bz R Us R Us S R Qx",  # junk
        "Thanks a lot!",  # drops the source's content: neither "appreciate" nor "reply" kept
    ]
    flagged = [bool(selection_flags(c, source, INFORMAL_INSTRUCTION)) for c in candidates]
    assert flagged == [False, True, True, True, True]
    assert selection_flags(candidates[4], source, INFORMAL_INSTRUCTION) == ["dropped"]
    assert choose([0.1, 0.9, 0.8, 0.7, 0.95], flagged) == 0
    assert choose([0.1, 0.9, 0.8, 0.7, 0.95]) == 4  # without flags the score alone decides
    assert choose([0.3, 0.9], [True, True]) == 1  # every candidate flagged: the best score
    # dropped content alone is the mildest flag: among flagged candidates it beats the others
    levels = [flag_level(selection_flags(c, source, INFORMAL_INSTRUCTION)) for c in candidates]
    assert levels == [0, 2, 2, 2, 1]
    assert choose([0.1, 0.9, 0.8, 0.7, 0.05], levels) == 0  # a clean candidate still wins
    assert choose([0.9, 0.8, 0.7, 0.05], levels[1:]) == 3  # then the one that only drops content
    assert flag_level([]) == 0 and flag_level(["empty", "dropped"]) == 2 and flag_level(["dropped"]) == 1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # the issue's stop-at-answer failure: the instruction verbatim is not the answer
        (
            "Rewrite this sentence in a casual, informal style, as you would say it to a friend.\n"
            "Hey, can you get back to me?\n",
            "Hey, can you get back to me?",
        ),
        ('"Hey, can you get back to me?" That is more casual.', "Hey, can you get back to me?"),
        ('Here is the informal version: "yo, reply" - short and casual\n', "yo, reply"),
        ("Rewrite this sentence in a casual, informal style, as you would say it to a friend.", ""),
        # a refused line may carry the rewrite after its last colon
        ('The sentence should be rephrased to: "Hey, reply?"\nmore', "Hey, reply?"),
        ('"Rewrite this sentence to be more casual: "Pls reply."\n', "Pls reply."),
        ('Rewrite this sentence to be casual: "Rewrite it"\nok then\n', "ok then"),
    ],
)
def test_cleaning_refuses_echo_lines_and_ends_quotes(raw: str, expected: str) -> None:
    reject = lambda answer: meta(answer, "I would appreciate a reply.", INFORMAL_INSTRUCTION)  # noqa: E731
    assert clean_output(raw, reject) == expected
    for cut in range(len(raw) + 1):  # stop-at-answer agrees with cleaning, echo lines included
        if answer_complete(raw[:cut], reject):
            for continuation in ("", "\nmore", ' "x"\ny', raw[cut:]):
                assert clean_output(raw[:cut] + continuation, reject) == clean_output(raw[:cut], reject)
