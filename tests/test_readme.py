"""README.md and docs/usage.md stay short, readable and true to the CLI and the Makefile's demo.

Offline and fast, no model: the README is at most 200 lines, no prose paragraph is over 120 words
and no table cell over 60; its setup block is `make demo` and `make test`; its quick start is the
Makefile's `demo:` recipe; and every `steer …` line in either document's code blocks either is a
demo command or names a real `steer` subcommand with options that command declares. The Python
examples call `steer.rewrite` and `steer.apply` only with parameters those functions accept.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"
MAKEFILE = ROOT / "Makefile"
STEERING = ROOT / "steer" / "generation" / "attach.py"
SERVICE = ROOT / "steer" / "rewriting" / "service.py"

MAX_README_LINES = 200
MAX_PARAGRAPH_WORDS = 120
MAX_CELL_WORDS = 60
# The README's sections, in order (level-2 headings).
README_SECTIONS = ["Setup", "Quick start", "How it works", "Python API", "Serve", "How good it is", "Documentation"]
DOCS_LINKED = ["usage", "architecture", "results", "decisions", "performance", "reliability", "serve"]

FENCE = re.compile(r"^\s*(```|~~~)")
OPTION = re.compile(r"^--?[A-Za-z][\w-]*")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced code block: its info string (`python`, `bash`, or empty), its lines, the heading above it."""

    info: str
    lines: list[str]
    heading: str


def split_markdown(text: str) -> tuple[list[CodeBlock], list[str]]:
    """The fenced code blocks, and every other line (code blocks blanked out, so paragraphs split there)."""
    blocks: list[CodeBlock] = []
    prose: list[str] = []
    heading = ""
    current: list[str] | None = None
    info = ""
    for line in text.splitlines():
        if current is None:
            if FENCE.match(line):
                current, info = [], line.strip().lstrip("`~").strip()
                prose.append("")
                continue
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            prose.append(line)
        elif FENCE.match(line):
            blocks.append(CodeBlock(info, current, heading))
            current = None
            prose.append("")
        else:
            current.append(line)
    assert current is None, "an unclosed code fence"
    return blocks, prose


def paragraphs(prose: list[str]) -> list[str]:
    """Blank-line separated prose blocks, leaving out headings and tables."""
    out: list[str] = []
    chunk: list[str] = []
    for line in [*prose, ""]:
        stripped = line.strip()
        if not stripped:
            if chunk:
                out.append(" ".join(chunk))
            chunk = []
        elif not stripped.startswith(("|", "#")):
            chunk.append(stripped)
    return out


def table_cells(prose: list[str]) -> list[str]:
    """Every cell of every Markdown table (an escaped `\\|` stays inside its cell)."""
    cells: list[str] = []
    for line in prose:
        stripped = line.strip()
        if stripped.startswith("|"):
            row = re.split(r"(?<!\\)\|", stripped.strip("|"))
            cells.extend(cell.strip() for cell in row if not re.fullmatch(r"\s*:?-+:?\s*", cell))
    return cells


def words(text: str) -> int:
    return len(text.split())


def joined_lines(lines: list[str]) -> list[str]:
    """Lines with backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def normalise(command: str) -> str:
    """One command as comparable text: the `.venv/bin/` prefix dropped, whitespace collapsed."""
    command = re.sub(r"(^|\s)\.venv/bin/(?=steer\b)", r"\1", command.strip())
    return " ".join(command.split())


def steer_commands(lines: list[str]) -> list[str]:
    """The `steer …` commands of some code lines: comments cut, pipes split, `.venv/bin/` and
    `accelerate launch … -m steer` read as `steer`."""
    found: list[str] = []
    for line in joined_lines(lines):
        code = re.sub(r"(^|\s)#.*$", "", line)
        for segment in code.split(" | "):
            segment = normalise(segment)
            segment = re.sub(r"^accelerate launch .*?-m steer ", "steer ", segment)
            if segment.startswith("steer "):
                found.append(segment)
    return found


def makefile_variables(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+)\s*[:?]?=\s*(.*?)\s*$", text, flags=re.MULTILINE))


def demo_commands() -> list[str]:
    """The `steer` commands of the Makefile's `demo:` recipe, with its variables filled in."""
    text = MAKEFILE.read_text(encoding="utf-8")
    variables = makefile_variables(text)
    recipe: list[str] = []
    in_demo = False
    for line in text.splitlines():
        if re.match(r"^demo\s*:", line):
            in_demo = True
            continue
        if in_demo:
            if not line.startswith("\t"):
                break
            recipe.append(line[1:])
    assert recipe, "the Makefile has no demo: recipe"

    def fill(match: re.Match[str]) -> str:
        return variables[match.group(1)]

    filled = [re.sub(r"\$\(([A-Z_]+)\)", fill, line) for line in recipe]
    return steer_commands([line for line in filled if not line.lstrip().startswith("#")])


def cli_options() -> dict[str, set[str]]:
    """Each `steer` subcommand → every option string it declares (both sides of a `--x/--no-x` flag)."""
    from steer.cli import cli

    out: dict[str, set[str]] = {}
    for name, command in cli.commands.items():
        names = {"--help", "-h"}
        for param in command.params:
            names.update(getattr(param, "opts", []))
            names.update(getattr(param, "secondary_opts", []))
        out[name] = {n for n in names if n.startswith("-")}
    return out


def used_options(command: str) -> list[str]:
    """The option names a command line passes (`--x=1` → `--x`; `[--json]` → `--json`)."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    options = []
    for token in tokens:
        match = OPTION.match(token.strip("[]"))
        if match:
            options.append(match.group(0))
    return options


def check_command(command: str, options: dict[str, set[str]]) -> list[str]:
    """What is wrong with one `steer …` line, if anything."""
    parts = command.split()
    if len(parts) < 2 or parts[1] not in options:
        return [f"{command!r}: no subcommand {parts[1:2]} (steer has {sorted(options)})"]
    declared = options[parts[1]]
    return [
        f"{command!r}: `steer {parts[1]}` has no option {opt}" for opt in used_options(command) if opt not in declared
    ]


@pytest.fixture(scope="module")
def readme() -> tuple[list[CodeBlock], list[str], str]:
    text = README.read_text(encoding="utf-8")
    blocks, prose = split_markdown(text)
    return blocks, prose, text


@pytest.fixture(scope="module")
def usage() -> tuple[list[CodeBlock], list[str], str]:
    text = USAGE.read_text(encoding="utf-8")
    blocks, prose = split_markdown(text)
    return blocks, prose, text


@pytest.fixture(scope="module")
def options() -> dict[str, set[str]]:
    return cli_options()


def test_readme_is_short(readme: tuple[list[CodeBlock], list[str], str]) -> None:
    lines = readme[2].splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}"


@pytest.mark.parametrize("doc", ["readme", "usage"])
def test_no_long_paragraph_or_cell(doc: str, request: pytest.FixtureRequest) -> None:
    _, prose, _ = request.getfixturevalue(doc)
    long_paragraphs = [p[:80] + "…" for p in paragraphs(prose) if words(p) > MAX_PARAGRAPH_WORDS]
    long_cells = [c[:80] + "…" for c in table_cells(prose) if words(c) > MAX_CELL_WORDS]
    assert not long_paragraphs, f"paragraphs over {MAX_PARAGRAPH_WORDS} words: {long_paragraphs}"
    assert not long_cells, f"table cells over {MAX_CELL_WORDS} words: {long_cells}"


def test_readme_sections_in_order(readme: tuple[list[CodeBlock], list[str], str]) -> None:
    headings = re.findall(r"^## (.+?)\s*$", readme[2], flags=re.MULTILINE)
    assert headings == README_SECTIONS


def test_setup_block_is_make_demo_and_make_test(readme: tuple[list[CodeBlock], list[str], str]) -> None:
    setup = [block for block in readme[0] if block.heading == "Setup"]
    assert setup, "no code block under ## Setup"
    commands = [line.strip() for line in setup[0].lines if line.strip()]
    assert "make demo" in commands and "make test" in commands
    assert commands == ["make demo", "make test"], f"the setup block should be exactly two commands: {commands}"


def test_quick_start_is_the_demo_recipe(readme: tuple[list[CodeBlock], list[str], str]) -> None:
    quick = [cmd for block in readme[0] if block.heading == "Quick start" for cmd in steer_commands(block.lines)]
    assert quick == demo_commands(), "the quick start should list exactly the `steer` commands `make demo` runs"


def test_readme_steer_lines_are_demo_commands_or_valid(
    readme: tuple[list[CodeBlock], list[str], str], options: dict[str, set[str]]
) -> None:
    demo = set(demo_commands())
    commands = [cmd for block in readme[0] for cmd in steer_commands(block.lines)]
    assert commands, "README.md shows no steer command"
    problems = [p for cmd in commands if cmd not in demo for p in check_command(cmd, options)]
    assert not problems, "\n".join(problems)


def test_demo_commands_use_real_options(options: dict[str, set[str]]) -> None:
    problems = [p for cmd in demo_commands() for p in check_command(cmd, options)]
    assert not problems, "\n".join(problems)


def test_usage_steer_lines_use_real_options(
    usage: tuple[list[CodeBlock], list[str], str], options: dict[str, set[str]]
) -> None:
    commands = [cmd for block in usage[0] for cmd in steer_commands(block.lines)]
    assert len(commands) >= 10, f"docs/usage.md shows only {len(commands)} steer commands"
    problems = [p for cmd in commands for p in check_command(cmd, options)]
    assert not problems, "\n".join(problems)


def test_readme_links_the_docs(readme: tuple[list[CodeBlock], list[str], str]) -> None:
    for name in DOCS_LINKED:
        assert f"(docs/{name}.md" in readme[2], f"README.md does not link docs/{name}.md"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_and_anchors_resolve(
    readme: tuple[list[CodeBlock], list[str], str], usage: tuple[list[CodeBlock], list[str], str]
) -> None:
    anchors = {
        path: {slug(h) for h in re.findall(r"^#+ (.+?)\s*$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)}
        for path in (README, USAGE)
    }
    for doc, path in ((readme[2], README), (usage[2], USAGE)):
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", doc):
            if target.startswith("http"):
                continue
            linked = (path.parent / target).resolve() if target else path
            assert linked.exists(), f"{path.name} links a missing file: {target}"
            if anchor and linked in anchors:
                assert anchor in anchors[linked], f"{path.name} links a missing anchor: {target}#{anchor}"


def test_readme_has_no_history(readme: tuple[list[CodeBlock], list[str], str]) -> None:
    prose = " ".join(paragraphs(readme[1]))
    for pattern in (r"\bwas\b[^.;]*\bbefore\b", r"\bbefore that\b", r"\bno longer\b", r"\bchangelog\b"):
        assert not re.search(pattern, prose, flags=re.IGNORECASE), f"README.md reads like history: {pattern}"


def signature_names() -> dict[str, set[str]]:
    """Parameter names of `rewrite` and `apply` (from the source, without importing torch), each
    with the `TransferSettings` fields its `**` keywords take."""
    from steer.settings import TransferSettings

    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in (STEERING, SERVICE)]
    settings_fields = {f.name for f in fields(TransferSettings)}
    out: dict[str, set[str]] = {}
    for node in (node for tree in trees for node in tree.body):
        if isinstance(node, ast.FunctionDef) and node.name in ("rewrite", "apply"):
            args = node.args
            names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
            out[node.name] = names | (settings_fields if args.kwarg else set())
    assert set(out) == {"rewrite", "apply"}
    return out


@pytest.mark.parametrize("doc", ["readme", "usage"])
def test_python_examples_match_the_signatures(doc: str, request: pytest.FixtureRequest) -> None:
    blocks, _, _ = request.getfixturevalue(doc)
    accepted = signature_names()
    python = [block for block in blocks if block.info == "python"]
    assert python, f"{doc} has no python example"
    calls = 0
    for block in python:
        tree = ast.parse("\n".join(block.lines))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "steer" and node.func.attr in accepted:
                calls += 1
                positional = len(node.args)
                assert positional <= 4, f"steer.{node.func.attr} takes 4 positional arguments, given {positional}"
                unknown = {k.arg for k in node.keywords} - accepted[node.func.attr]
                assert not unknown, f"steer.{node.func.attr} has no parameter {sorted(unknown)}"
    if doc == "readme":
        assert calls >= 2, "the README shows steer.rewrite and steer.apply"
