"""The LLM judge's prompt: the packaged, versioned TOML and the checks every prompt passes.

The packaged prompt is `steer/data/judge.toml`; it and a trial's (research/judge-trials/) are checked
before a model is asked anything. Besides the three questions a prompt may hold `[pairwise_choice]`
(which of two rewrites of one source is the better; `steer.evaluation.pairwise`); one without it
loads, and asking it to compare is one line (`pairwise_table`).

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
PAIRWISE_TABLE = "pairwise_choice"  # optional: which of two rewrites of one source is the better


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
    forced choice whose fields can be filled, and the optional pairwise choice likewise; a bad one is
    one line here, not an error at the first item."""
    choices = [q for q, table in CHOICE_TABLES.items() if table in data]
    asked = sorted([*data.get("questions", {}), *choices])
    if asked != sorted(QUESTIONS):
        raise SteerError(
            f"{JUDGE_RESOURCE} must ask exactly the questions {', '.join(QUESTIONS)}, each once (in [questions] or "
            f"as [style_choice] / [meaning_choice]); it asks {', '.join(asked) or 'none'}"
        )
    for table in [CHOICE_TABLES[q] for q in choices] + ([PAIRWISE_TABLE] if PAIRWISE_TABLE in data else []):
        _check_choice(table, data[table])
    pair_margins(data)  # checked here, with the rest
    return data


# Each choice table's fields: its question's (beside {a} and {b}), and its text's (None: it has no
# text, the question is asked of one text alone); a pairwise choice has no margin.
_CHOICE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "style_choice": ((), None),
    "meaning_choice": (("source", "target"), ("source_text", "rewrite")),
    PAIRWISE_TABLE: (("source", "target"), ("source_text", "first", "second")),
}
_EXAMPLE_ANSWERS = {"meaning_choice": '["same", "different"]', PAIRWISE_TABLE: '["first", "second"]'}


def _check_choice(table: str, choice: Any) -> None:
    """A forced choice's table: a question naming both answers as {a} and {b}, a margin (but the
    pairwise one), a text showing each of its fields, two answer words; every field fillable."""
    if not isinstance(choice, dict):
        raise SteerError(f"the judge prompt's [{table}] must be a table (question, text, answers, ...)")
    fields, text_fields = _CHOICE_FIELDS[table]
    text, margin = str(choice.get("question", "")), choice.get("margin")
    if "{a}" not in text or "{b}" not in text:
        raise SteerError(f"the judge prompt's [{table}] question {text!r} must name both answers as {{a}} and {{b}}")
    if table != PAIRWISE_TABLE and (
        isinstance(margin, bool) or not isinstance(margin, int | float) or not math.isfinite(margin)
    ):
        raise SteerError(f"the judge prompt's [{table}] margin {margin!r} must be a number (nats, e.g. 9.4)")
    try:  # the fields each text is filled with: any other one would fail at the first item
        text.format(a="a", b="b", **dict.fromkeys(fields, "x"))
        if text_fields is not None:
            str(choice.get("text", "")).format(**dict.fromkeys(text_fields, "x"))
    except (KeyError, IndexError, ValueError) as e:
        allowed = ", ".join("{" + f + "}" for f in ("a", "b", *fields))
        if text_fields is not None:
            allowed += "; its text " + ", ".join("{" + f + "}" for f in text_fields)
        raise SteerError(
            f"the judge prompt's [{table}] names a field it cannot fill ({e}); it may use {allowed}"
        ) from None
    if text_fields is None:
        return
    answers, pair = choice.get("answers"), str(choice.get("text", ""))
    if not (
        isinstance(answers, list) and len(answers) == 2 and all(isinstance(a, str) and a.strip() for a in answers)
    ) or (answers[0] == answers[1]):
        raise SteerError(
            f"the judge prompt's [{table}] answers {answers!r} must be two words, e.g. {_EXAMPLE_ANSWERS[table]}"
        )
    missing = [f for f in text_fields if "{" + f + "}" not in pair]
    if missing:
        shown = " and ".join(", ".join("{" + f + "}" for f in text_fields).rsplit(", ", 1))
        raise SteerError(
            f"the judge prompt's [{table}] text {pair!r} must show {'both' if len(text_fields) == 2 else 'each of'} "
            f"{shown}"
        )


def pairwise_table(data: dict[str, Any]) -> dict[str, Any]:
    """The prompt's `[pairwise_choice]` (checked by `check_judge_prompt`), or one line saying it has none."""
    if PAIRWISE_TABLE not in data:
        raise SteerError(
            f"the judge prompt {data.get('version', '')!r} has no [{PAIRWISE_TABLE}] table, so it cannot compare two "
            f"rewrites; ask with a prompt that has one (the packaged {JUDGE_RESOURCE} does)"
        )
    return dict(data[PAIRWISE_TABLE])


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
