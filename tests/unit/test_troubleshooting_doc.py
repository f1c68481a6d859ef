"""docs/troubleshooting.md quotes only messages the code really emits.

The doc's convention: a fenced block whose info string is `netattach-message` holds
one message a line, as netattach (or its shim) words it, with `{name}` for each
variable part. Every such line must be found in ONE string of src/ (a plain or f-string
literal, adjacent literals and `+` chains joined; docstrings do not count): its literal
pieces exactly and in order, and each `{placeholder}` where that string has a variable
part (an f-string's `{...}`, a printf `%s`/`%d`/`%.1f` of a log call, or an operand of
`+` that is not a literal). A placeholder may stand for several variable parts and the
text between them ("{pod}" for `pod {namespace}/{name}`), but never for literal text
alone: a placeholder where the code has words fails, and so do words where the code
has a variable. The quote may be part of the string (a message the code prefixes with
the pod and network is quoted from where its own string starts).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "troubleshooting.md"
SOURCES = ROOT / "src"

BLOCK = re.compile(r"^```netattach-message[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
PLACEHOLDER = re.compile(r"\{[^{}\n]*\}")
SLOT = "\x00"
"""A variable part of a source string, in its template."""
PRINTF = re.compile(r"%[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[sdirfgxXeEc]")
MIN_LITERAL = 8
"""Literal characters a quoted message needs at least: a quote made of little more than
placeholders would match almost any string."""


def quoted_messages(text: str) -> list[str]:
    """The lines of every `netattach-message` block of `text`, in order."""
    return [line.strip() for block in BLOCK.findall(text)
            for line in block.splitlines() if line.strip()]


def _template(node: ast.AST) -> str | None:
    """The template of a string expression: its literal text, SLOT for each variable
    part; None when `node` is no string expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return PRINTF.sub(SLOT, node.value.replace("%%", "%"))
    if isinstance(node, ast.JoinedStr):
        return "".join(PRINTF.sub(SLOT, v.value) if isinstance(v, ast.Constant) else SLOT
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        if left is None and right is None:
            return None
        return (SLOT if left is None else left) + (SLOT if right is None else right)
    return None


def templates_of(source: str) -> list[str]:
    """The template of every string expression of a module's `source`, docstrings and
    other bare string statements left out."""
    tree = ast.parse(source)
    bare = {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if id(node) in bare:
            continue
        template = _template(node)
        if template is not None and template.strip(SLOT):
            out.append(template)
    return out


def source_templates() -> list[str]:
    return [t for path in sorted(SOURCES.rglob("*.py"))
            for t in templates_of(path.read_text(encoding="utf-8"))]


def pattern(message: str) -> re.Pattern[str]:
    """The regex a message's template must contain: its literal pieces exactly, and for
    each placeholder a run of the template that starts and ends with a variable part."""
    pieces = PLACEHOLDER.split(message)
    return re.compile(f"{SLOT}(?:.*?{SLOT})?".join(re.escape(p) for p in pieces), re.S)


def found(message: str, templates: list[str]) -> bool:
    regex = pattern(message)
    return any(regex.search(t) for t in templates)


def problems(messages: list[str], templates: list[str]) -> list[str]:
    out = []
    for message in messages:
        literal = "".join(PLACEHOLDER.split(message))
        if "{" in literal or "}" in literal:
            out.append(f"unbalanced braces: {message}")
        elif len(literal.strip()) < MIN_LITERAL:
            out.append(f"fewer than {MIN_LITERAL} literal characters: {message}")
        elif not found(message, templates):
            out.append(f"not in src/: {message}")
    return out


def test_every_quoted_message_is_in_the_source():
    messages = quoted_messages(DOC.read_text(encoding="utf-8"))
    assert len(messages) >= 60, len(messages)
    assert problems(messages, source_templates()) == []


def test_each_section_quotes_messages():
    """install, the probes, ContainerCreating, DEL, the thick daemon, DRA claims,
    hot-plug refusals, RBAC 403s: each `## ` section quotes at least one message."""
    sections = re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)[1:]
    titles = [s.splitlines()[0] for s in sections if quoted_messages(s)]
    for topic in ("install", "probe", "ContainerCreating", "DEL", "daemon", "DRA",
                  "hot-plug", "403"):
        assert any(topic.lower() in t.lower() for t in titles), (topic, titles)


SAMPLE = '''
"""A docstring: pod {pod} exploded quietly."""
import logging
log = logging.getLogger("x")
def f(pod, why, command, n):
    """pod {pod}: only in a docstring, never emitted"""
    log.warning("pod %s: hot-plug refused: %s", pod, why)
    raise ValueError(f"{pod}: {command} not run: {why}"
                     f" (waited {n:g} s)")
    return "the first part, " + why + " and the rest"
'''


def test_the_rule_is_exact():
    templates = templates_of(SAMPLE)
    assert found("pod {pod}: hot-plug refused: {reason}", templates)
    assert found("{pod}: {command} not run: {why} (waited {n} s)", templates)
    assert found("{pod}: {command and why} (waited {n} s)", templates)  # several parts
    assert found("{command} not run: {why}", templates)  # a part of the string
    assert found("the first part, {why} and the rest", templates)  # a `+` chain
    assert not found("pod {pod}: hot-plug refused because {reason}", templates)  # words
    assert not found("{pod}: ADD not run: {why}", templates)  # words for a variable
    assert not found("{pod}: {command} {what}: {why}", templates)  # a variable for words
    assert not found("pod {pod} exploded quietly", templates)  # a docstring
    assert not found("pod {pod}: only in a docstring, never emitted", templates)


def test_the_checks_fail_on_bad_quotes():
    templates = templates_of(SAMPLE)
    assert problems(["{pod}: {x} {y}", "pod {pod: hot-plug refused: {reason}",
                     "pod {pod}: hot-plug refused: {reason}"], templates) == [
        "fewer than 8 literal characters: {pod}: {x} {y}",
        "unbalanced braces: pod {pod: hot-plug refused: {reason}"]
    text = "```netattach-message\nfirst {a} line\n\nsecond line\n```\n```sh\nnot a quote\n```\n"
    assert quoted_messages(text) == ["first {a} line", "second line"]


def test_the_readme_links_it():
    assert "[docs/troubleshooting.md](docs/troubleshooting.md)" in \
        (ROOT / "README.md").read_text(encoding="utf-8")
