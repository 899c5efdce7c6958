"""The LLM judge's prompt: the packaged, versioned TOML and the checks every prompt passes.

The packaged prompt is `steer/data/judge.toml`; it and a trial's (research/judge-trials/) are checked
before a model is asked anything.

Why apart from `steer.evaluation.llm_judge`: what is asked (the questions, their wording, which are
forced choices) is data with its own rules; how it is asked (prefix caches, batches, the answer
cache) is the judge's.
"""

from __future__ import annotations

import math
import tomllib
from typing import Any

from steer.errors import SteerError

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
    pair_margins(data)  # checked here, with the rest
    return data


def pair_margins(data: dict[str, Any]) -> dict[frozenset[str], dict[str, float]]:
    """A prompt's per-pair margins (`[[pair_margins]]`: `styles = [a, b]`, either direction, and a
    margin for any question asked as a choice; `-inf` passes every rewrite of the pair): where one
    margin cannot serve every pair — a sentiment rewrite moves much further toward its target than
    a formality one."""
    out: dict[frozenset[str], dict[str, float]] = {}
    for entry in data.get("pair_margins", []):
        styles = entry.get("styles") if isinstance(entry, dict) else None
        if not (isinstance(styles, list) and len(styles) == 2 and all(isinstance(x, str) for x in styles)) or (
            styles[0] == styles[1]
        ):
            raise SteerError(
                f"the judge prompt's [[pair_margins]] styles {styles!r} must be two different style names, "
                'e.g. ["negative", "positive"]'
            )
        pair, margins = frozenset(styles), {k: v for k, v in entry.items() if k != "styles"}
        named = "/".join(sorted(styles))
        if pair in out:
            raise SteerError(f"the judge prompt's [[pair_margins]] lists {named} twice; keep one")
        for question, margin in margins.items():
            if question not in CHOICE_TABLES or CHOICE_TABLES[question] not in data:
                asked = [q for q, table in CHOICE_TABLES.items() if table in data]
                raise SteerError(
                    f"the judge prompt's [[pair_margins]] for {named} sets {question!r}, which it "
                    f"does not ask as a choice; a pair may set {', '.join(asked) or 'nothing'}"
                )
            if isinstance(margin, bool) or not isinstance(margin, int | float) or margin != margin:
                raise SteerError(
                    f"the judge prompt's [[pair_margins]] {question} margin {margin!r} for {named} "
                    "must be a number (nats; -inf passes every rewrite of the pair)"
                )
        out[pair] = {q: float(m) for q, m in margins.items()}
    return out


def margins_for(
    margins: dict[str, float], pairs: dict[frozenset[str], dict[str, float]], source: str, target: str
) -> dict[str, float]:
    """The margins a rewrite from `source` to `target` is judged with: its pair's where
    `pair_margins` sets one, else the prompt's own."""
    return {**margins, **pairs.get(frozenset((source, target)), {})}
