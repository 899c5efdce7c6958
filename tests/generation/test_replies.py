"""Cleaning replies and telling when an answer is complete (`steer.generation.replies`)."""

from __future__ import annotations

import pytest

from steer.generation.replies import answer_complete, clean_output


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Here is the rewritten sentence: Hey, what's up?", "Hey, what's up?"),
        ('"Send it now, dude."\n\nThis version is informal because…', "Send it now, dude."),
        ("Informal: gimme that", "gimme that"),
        ("Sure! Here's the formal version:\n“I would appreciate a reply.”", "I would appreciate a reply."),
        ("  plain output  ", "plain output"),
        ("I can make it friendlier. Here's the revised sentence:\nsee ya", "see ya"),
        ("", ""),
    ],
)
def test_clean_output(raw: str, clean: str) -> None:
    assert clean_output(raw) == clean


@pytest.mark.parametrize(
    "raw",
    [
        "Hey dude, reply asap.\nThanks!",
        "Here is the rewritten sentence:\n\nHey dude, reply asap.\nMore text",
        "Sure! Here's a casual version: yo, reply soon\nand more",
        "\n\n  \nyo\nsecond",
        "Informal:\nhey\nthere",
        '"Hey there"\nok',
        "The sentence:\n",
        "no newline at all",
    ],
)
def test_answer_complete_agrees_with_cleaning(raw: str) -> None:
    """Whenever a prefix is complete, no continuation changes what cleaning keeps."""
    for cut in range(len(raw) + 1):
        prefix = raw[:cut]
        if answer_complete(prefix):
            for continuation in ("", "\nmore", " tail\nx", raw[cut:]):
                assert clean_output(prefix + continuation) == clean_output(prefix), (prefix, continuation)
    assert answer_complete(raw + "\n") == bool(clean_output(raw + "\n") and not clean_output(raw).endswith(":")) or (
        raw.count("\n") >= 1
    )


def test_answer_complete_hand_made() -> None:
    assert not answer_complete("Hey dude")  # the line may still go on
    assert answer_complete("Hey dude\n")
    assert not answer_complete("Here is the informal version:\n")  # only a label so far
    assert answer_complete("Here is the informal version:\nyo\n")
    assert not answer_complete("\n\n")
