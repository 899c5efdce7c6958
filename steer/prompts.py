"""Rewrite instructions: the prompt templates shipped inside the package (one per direction, plus a
default), the reply openings the assistant's turn is primed with, their checks, and how a
template becomes the model's input (chat template or not).

A reply opening is text placed at the start of the model's own turn, so the reply begins where
the rewrite begins (e.g. an opening quote mark) instead of with commentary on the task; the
opening is part of the reply that cleaning reads (`steer.generation.replies`), never part of the output.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steer.errors import SteerError

if TYPE_CHECKING:
    from steer.settings import TransferSettings

GENERIC_PROMPT = (
    "Rewrite the following {source} text in a {target} style. Keep its meaning. "
    "Reply with the rewritten text only.\n\n{text}"
)
PROMPTS_RESOURCE = "data/prompts.toml"  # inside the package, so a wheel install reads the same prompts

# The instructions `instruction_contrast` pushes away from, each (template, reply opening): the same
# text asked for with no style, so what differs between the two next-token distributions is what the
# direction's instruction asks beyond it. `paraphrase` keeps the request to keep the meaning; `repeat`
# asks for a copy (pushing away from copying the source).
NEUTRAL: dict[str, tuple[str, str]] = {
    "paraphrase": (
        "Rewrite the following text in other words. Keep its meaning. Reply with the rewritten text only.\n\n{text}",
        'Here is the rewritten text: "',
    ),
    "repeat": ("Repeat the following text exactly. Reply with the text only.\n\n{text}", 'Here is the text: "'),
}


MAX_TEMPLATE_CHARS = 4000  # a prompt template or reply opening; the text it frames is bounded apart


def _plain_fields(template: str, where: str, what: str) -> set[str]:
    """The `{field}`s of a template or opening, each plain: a format spec or conversion
    (`{text:>99999999}`, `{text!r}`) would let a few bytes ask for gigabytes of padding."""
    import string

    if len(template) > MAX_TEMPLATE_CHARS:
        raise SteerError(f"{where} has {len(template)} characters; at most {MAX_TEMPLATE_CHARS} are allowed")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise SteerError(f"{where} is not a valid {what} ({exc}); write a literal brace as {{{{ or }}}}") from None
    for _, name, spec, conversion in parts:
        if name is not None and (spec or conversion):
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            article = "an" if what[0] in "aeiou" else "a"
            raise SteerError(
                f"{where} formats a field ({shown}); {article} {what} may hold only plain fields like {{{name}}}"
            )
    return {name for _, name, _, _ in parts if name is not None}


def check_template(template: str, where: str) -> None:
    """A prompt template must contain {text} and no other field than {source} and {target}, each plain."""
    fields = _plain_fields(template, where, "template")
    unknown = sorted(fields - {"text", "source", "target"})
    if unknown:
        raise SteerError(
            f"{where} uses the unknown field {{{unknown[0]}}}; the fields are {{text}}, {{source}}, {{target}}"
        )
    if "text" not in fields:
        raise SteerError(f"{where} must contain '{{text}}' (and may use '{{source}}' and '{{target}}')")
    import string

    names = [name for _, name, _, _ in string.Formatter().parse(template) if name]
    if names.count("text") > 1:  # each copy is another max_input_tokens of prompt
        raise SteerError(f"{where} holds {{text}} {names.count('text')} times; a template holds it once")
    if max(names.count("source"), names.count("target")) > 4:
        raise SteerError(
            f"{where} repeats {{source}} or {{target}} more than 4 times; name each style a few times at most"
        )


def _read_prompts_toml(path: str | Path | None) -> tuple[Path, dict[str, Any]]:
    """The prompts TOML (the packaged one without `path`) as (file, parsed table)."""
    if path is None:
        from importlib.resources import files

        resource = files("steer").joinpath(PROMPTS_RESOURCE)
        if not resource.is_file():
            raise SteerError(f"the packaged prompts ({PROMPTS_RESOURCE}) are missing; reinstall steer")
        file, text = Path(str(resource)), resource.read_text(encoding="utf-8")
    else:
        file = Path(path)
        if file.is_dir():
            raise SteerError(f"prompts file {file} is a folder; pass a TOML file")
        if not file.is_file():
            raise SteerError(f"prompts file {file} does not exist")
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SteerError(f"{file} is not valid UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SteerError(f"{file} is not valid TOML: {exc}") from None
    _check_prompts_layout(file, data)
    return file, data


_KNOWN_PROMPT_KEYS = "default (a template), [pairs] and [openings] (tables keyed SOURCE->TARGET)"


def _check_prompts_layout(file: Path, data: dict[str, Any]) -> None:
    """Refuse what steer would otherwise ignore without a word: a misspelt table (`[pair]`), an
    unknown top-level key, a `[pairs]` or `[openings]` that is not a table, a key there that is not
    SOURCE->TARGET (an opening may also be keyed `default`), or a value that is not a string."""
    for key, value in data.items():
        if key not in ("default", "pairs", "openings"):
            kind = "table" if isinstance(value, dict) else "key"
            shown = f"[{key}]" if kind == "table" else repr(key)
            raise SteerError(f"{file}: unknown top-level {kind} {shown}; the known ones are {_KNOWN_PROMPT_KEYS}")
    if "default" in data and not isinstance(data["default"], str):
        raise SteerError(f"{file}: 'default' must be a template string, got {type(data['default']).__name__}")
    for table in ("pairs", "openings"):
        entries = data.get(table, {})
        if not isinstance(entries, dict):
            raise SteerError(f"{file}: {table!r} must be a table ([{table}]) keyed SOURCE->TARGET")
        for key, value in entries.items():
            source, arrow, target = key.partition("->")
            if not (arrow and source.strip() and target.strip()) and not (table == "openings" and key == "default"):
                also = " or default" if table == "openings" else ""
                raise SteerError(f'{file}: [{table}] key {key!r} is not SOURCE->TARGET{also}, e.g. "formal->informal"')
            if not isinstance(value, str):
                raise SteerError(f"{file}: [{table}] {key!r} must be a string, got {type(value).__name__}")


def load_prompts(path: str | Path | None = None) -> dict[str, str]:
    """Prompt templates keyed `"source->target"` (plus `"default"`), from a TOML file.

    Without `path`, the prompts shipped inside the package (`steer/data/prompts.toml`, read with
    `importlib.resources`, so editable and wheel installs agree); their absence is an error, never
    a silent fall-back to the generic template.
    """
    file, data = _read_prompts_toml(path)
    prompts = {"default": str(data.get("default", GENERIC_PROMPT))}
    prompts.update({str(k): str(v) for k, v in dict(data.get("pairs", {})).items()})
    for key, template in prompts.items():
        check_template(template, f"{file}: prompt {key!r}")
    return prompts


def check_pair(path: str | Path, source: str, target: str) -> None:
    """Refuse a user's prompts file that would leave `source` → `target` on the generic prompt
    without saying so: it has `[pairs]`, none of them this direction (a misspelt key), and no
    `default` of its own. Also checks every template (`load_prompts`)."""
    load_prompts(path)
    file, data = _read_prompts_toml(path)
    pairs, key = dict(data.get("pairs", {})), f"{source}->{target}"
    if pairs and key not in pairs and "default" not in data:
        raise SteerError(
            f"--prompts {file} has no [pairs] entry {key!r} and no default, so the generic prompt would be used; "
            f"its pairs are {', '.join(pairs)} — fix the key's spelling, or add {key!r} or a default"
        )


def load_openings(path: str | Path | None = None) -> dict[str, str]:
    """Reply openings keyed `"source->target"` (plus `"default"`) from the prompts TOML's
    `[openings]` table; no table means no opening. They may use {source} and {target}."""
    file, data = _read_prompts_toml(path)
    openings = {str(k): str(v) for k, v in dict(data.get("openings", {})).items()}
    for key, opening in openings.items():
        check_opening(opening, f"{file}: opening {key!r}")
    return openings


def check_opening(opening: str, where: str) -> None:
    """A reply opening may use {source} and {target} only, each plain, and may not contain a line
    break (the answer line must start inside it)."""
    fields = _plain_fields(opening, where, "opening")
    unknown = sorted(fields - {"source", "target"})
    if unknown:
        raise SteerError(f"{where} uses the unknown field {{{unknown[0]}}}; an opening may use {{source}}, {{target}}")
    if "\n" in opening:
        raise SteerError(f"{where} contains a line break; an opening must stay on the answer's line")


def reply_opening(source: str, target: str, settings: TransferSettings, openings: dict[str, str] | None = None) -> str:
    """The reply opening for this direction: `settings.opening` ("" for none), else the pair's
    packaged opening, else the packaged default, else none — filled with the style names."""
    if settings.opening is not None:
        opening = settings.opening
    else:
        openings = openings if openings is not None else load_openings()
        opening = openings.get(f"{source}->{target}", openings.get("default", ""))
    return opening.format(source=source, target=target)


def prompt_template(source: str, target: str, settings: TransferSettings, prompts: dict[str, str] | None = None) -> str:
    """The template for this direction: `--prompt`, else the pair's, else the default."""
    if settings.prompt is not None:
        return settings.prompt
    prompts = prompts if prompts is not None else load_prompts()
    return prompts.get(f"{source}->{target}", prompts["default"])


EXAMPLES_HEADER = "Some {target} sentences, for reference:\n"


def examples_block(examples: Sequence[str], target: str) -> str:
    """The few-shot block put before the instruction: a header and one example per line ("" for none)."""
    if not examples:
        return ""
    lines = "".join(f"- {' '.join(e.split())}\n" for e in examples)
    return EXAMPLES_HEADER.format(target=target) + lines + "\n"


def render_prompt(
    tokenizer: Any,
    template: str,
    text: str,
    source: str,
    target: str,
    opening: str = "",
    examples: Sequence[str] = (),
) -> str:
    """Fill the template and wrap it in the tokenizer's chat template when it has one; the reply
    `opening` (already filled) starts the assistant's turn; `examples` (texts of the target style)
    go before the instruction."""
    message = examples_block(examples, target) + template.format(text=text, source=source, target=target)
    if getattr(tokenizer, "chat_template", None):
        turn = tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
        )
        return turn + opening
    return f"{message}\n\nRewritten text:" + (f" {opening}" if opening else "")
