"""The LLM judge's prompt: the packaged, versioned TOML (`steer/data/judge.toml`) and the checks
every prompt — packaged or a trial's (docs/judge-trials/) — passes before a model is asked anything.

Why apart from `steer.scoring.llm_judge`: what is asked (the questions, their wording, which are
forced choices) is data with its own rules; how it is asked (prefix caches, batches, the answer
cache) is the judge's.
"""

from __future__ import annotations

import math
import tomllib
from typing import Any

from steer.config import SteerError

JUDGE_RESOURCE = "data/judge.toml"
QUESTIONS = ("style", "meaning", "fluency")
CHOICE_TABLES = {"style": "style_choice", "meaning": "meaning_choice"}  # a question asked as a choice


def load_judge_prompt() -> dict[str, Any]:
    """The packaged judge prompt: version, instructions, item, the yes/no questions and the choices
    (checked by `LLMJudge`)."""
    from importlib.resources import files

    resource = files("steer").joinpath(JUDGE_RESOURCE)
    if not resource.is_file():
        raise SteerError(f"the packaged judge prompt ({JUDGE_RESOURCE}) is missing; reinstall steer")
    return tomllib.loads(resource.read_text(encoding="utf-8"))


def check_judge_prompt(data: dict[str, Any]) -> dict[str, Any]:
    """A prompt's questions (packaged or a trial's): each asked once, as a yes/no question or as a
    forced choice whose fields can be filled; a bad one is one line here, not an error at the first item."""
    choices = [q for q, table in CHOICE_TABLES.items() if table in data]
    asked = sorted([*data.get("questions", {}), *choices])
    if asked != sorted(QUESTIONS):
        raise SteerError(
            f"{JUDGE_RESOURCE} must ask exactly the questions {', '.join(QUESTIONS)}, each once (in [questions] or "
            f"as [style_choice] / [meaning_choice]); it asks {', '.join(asked) or 'none'}"
        )
    for question in choices:
        table = CHOICE_TABLES[question]
        choice = data[table]
        text, margin = str(choice.get("question", "")), choice.get("margin")
        if "{a}" not in text or "{b}" not in text:
            raise SteerError(
                f"the judge prompt's [{table}] question {text!r} must name both answers as {{a}} and {{b}}"
            )
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not math.isfinite(margin):
            raise SteerError(f"the judge prompt's [{table}] margin {margin!r} must be a number (nats, e.g. 9.4)")
        try:  # the fields each text is filled with: any other one would fail at the first item
            text.format(a="a", b="b", **({"source": "s", "target": "t"} if question == "meaning" else {}))
            if question == "meaning":
                str(choice.get("text", "")).format(source_text="s", rewrite="r")
        except (KeyError, IndexError, ValueError) as e:
            fields = (
                "{a}, {b}, {source}, {target}; its text {source_text}, {rewrite}"
                if question == "meaning"
                else "{a}, {b}"
            )
            raise SteerError(
                f"the judge prompt's [{table}] names a field it cannot fill ({e}); it may use {fields}"
            ) from None
        if question == "meaning":
            answers, pair = choice.get("answers"), str(choice.get("text", ""))
            if not (isinstance(answers, list) and len(answers) == 2 and all(isinstance(a, str) for a in answers)):
                raise SteerError(
                    f'the judge prompt\'s [{table}] answers {answers!r} must be two words, e.g. ["same", "different"]'
                )
            if "{source_text}" not in pair or "{rewrite}" not in pair:
                raise SteerError(
                    f"the judge prompt's [{table}] text {pair!r} must show both {{source_text}} and {{rewrite}}"
                )
    return data
