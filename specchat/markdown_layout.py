"""A reply's Markdown laid out as styled runs of text, each run knowing where in the reply it came from.

A small line-based reading of the Markdown a model writes: ATX headings, bullet and numbered lists,
block quotes, rules, fenced code (highlighted by Pygments) and, inside a line, **strong**, *emphasis*
and `code`. The layout keeps every shown character's offset in the reply's text, so whoever draws it
can give each character the style of the token it came from (markdown_view.py). Markers that the
layout hides (`#`, `**`, a code fence) are simply not shown; what it adds (a bullet, a code block's
bar) has no offset.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from pygments.lexers import get_lexer_by_name
from pygments.token import Token
from pygments.util import ClassNotFound


class Run(NamedTuple):
    text: str
    style: str  # the Markdown's own style: a colour, bold, italic
    at: int | None  # the offset of text[0] in the reply; None for what the layout adds


HEADINGS = ("bold $text-accent", "bold $text-primary")  # level 1; level 2 and deeper
INLINE_CODE = "$text-secondary"
QUIET = "$text-muted"  # bullets, bars, rules: the layout's own marks
CODE_BAR = "▎ "

# Code colours only: underline, bold and italic stay free to tell a token's origin inside code.
CODE_COLOURS = {
    Token.Comment: "$text-muted",
    Token.Keyword: "$text-accent",
    Token.Keyword.Namespace: "$text-error",
    Token.Operator.Word: "$text-accent",
    Token.Name.Builtin: "$text-accent",
    Token.Name.Function: "$text-primary",
    Token.Name.Class: "$text-primary",
    Token.Name.Decorator: "$text-primary",
    Token.Literal.String: "$text-success",
    Token.Literal.Number: "$text-warning",
}

FENCE = re.compile(r" {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)")
HEADING = re.compile(r" {0,3}(#{1,6}) +")
BULLET = re.compile(r"( *)([-*+]) +")
NUMBERED = re.compile(r"( *)(\d{1,9}[.)]) +")
QUOTE = re.compile(r" {0,3}> ?")
RULE = re.compile(r" {0,3}([-*_])( *\1){2,} *$")
INLINE = re.compile(
    r"`(?P<code>[^`]+)`"
    r"|\*\*(?P<strong>\S(?:.*?\S)?)\*\*"
    r"|__(?P<strong2>\S(?:.*?\S)?)__"
    r"|\*(?P<em>[^*\s](?:[^*]*?[^*\s])?)\*"
    r"|(?<!\w)_(?P<em2>[^_\s](?:[^_]*?[^_\s])?)_(?!\w)"
)
INLINE_STYLES = {"code": INLINE_CODE, "strong": "bold", "strong2": "bold", "em": "italic", "em2": "italic"}


def layout(text: str) -> list[Run]:
    """The runs that show `text` as Markdown, in the order of the text."""
    runs: list[Run] = []
    lines = [line for line in re.split(r"(?<=\n)", text) if line]  # "\n" only: models write no other breaks
    at, i = 0, 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            i, at = code_block(lines, i, at, fence, runs)
            continue
        block_line(line, at, runs)
        at += len(line)
        i += 1
    return runs


def code_block(lines: list[str], i: int, at: int, fence: re.Match, runs: list[Run]) -> tuple[int, int]:
    """The fenced block opened at lines[i]: its language as a label, its code highlighted behind a bar,
    both fences hidden. An unclosed fence (a reply cut short) runs to the end. Returns the line and
    offset after the block."""
    language = fence.group(2)
    runs.append(Run(CODE_BAR, QUIET, None))
    runs.append(Run(language, QUIET, at + fence.start(2)) if language else Run("code", QUIET, None))
    runs.append(Run("\n", "", None))
    at += len(lines[i])
    end = i + 1
    closing = re.compile(rf" {{0,3}}{fence.group(1)[0]}{{{len(fence.group(1))},}}\s*$")
    while end < len(lines) and not closing.match(lines[end]):
        end += 1
    code = "".join(lines[i + 1 : end])
    highlighted(code, language, at, runs)
    at += len(code)
    if end < len(lines):
        at += len(lines[end])
        end += 1
    return end, at


def highlighted(code: str, language: str, at: int, runs: list[Run]) -> None:
    """`code` (whole lines) in its language's colours, each line behind the code bar."""
    try:
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False) if language else None
    except ClassNotFound:
        lexer = None
    tokens = lexer.get_tokens_unprocessed(code) if lexer else [(0, Token.Text, code)]
    line_start = True
    for start, kind, value in tokens:
        for part in re.split(r"(?<=\n)", value):  # a token may span lines: the bar starts each
            if not part:
                continue
            if line_start:
                runs.append(Run(CODE_BAR, QUIET, None))
            runs.append(Run(part, code_colour(kind), at + start))
            start += len(part)
            line_start = part.endswith("\n")


def code_colour(kind) -> str:
    """The colour of a Pygments token type: its own, or its nearest parent's."""
    while kind not in CODE_COLOURS and kind.parent is not None:
        kind = kind.parent
    return CODE_COLOURS.get(kind, "")


def block_line(line: str, at: int, runs: list[Run]) -> None:
    """One line outside code: its block marker shown as the layout's own, then its inline Markdown."""
    if RULE.match(line):
        runs.append(Run("─" * 24, QUIET, None))
        runs += newline(line, at)
        return
    style = ""
    if heading := HEADING.match(line):
        style, start = HEADINGS[len(heading.group(1)) > 1], heading.end()
    elif bullet := BULLET.match(line):
        runs.append(Run(bullet.group(1) + "• ", QUIET, None))
        start = bullet.end()
    elif numbered := NUMBERED.match(line):
        runs.append(Run(line[: numbered.end(2)], "bold", at))
        runs.append(Run(" ", "", None))
        start = numbered.end()
    elif quote := QUOTE.match(line):
        runs.append(Run("▌ ", QUIET, None))
        style, start = "italic", quote.end()
    else:
        start = 0
    body = line.rstrip("\r\n")
    inline(body[start:], at + start, style, runs)
    runs += newline(line, at)


def newline(line: str, at: int) -> list[Run]:
    """The line's break (a "\r\n" shown as its "\n"), if it has one."""
    return [Run("\n", "", at + len(line) - 1)] if line.endswith("\n") else []


def inline(text: str, at: int, style: str, runs: list[Run]) -> None:
    """`text` with its code spans, strong and emphasis styled and their markers hidden."""
    done = 0
    for match in INLINE.finditer(text):
        if match.start() > done:
            runs.append(Run(text[done : match.start()], style, at + done))
        kind = match.lastgroup
        inner = f"{style} {INLINE_STYLES[kind]}".strip()
        if kind == "code":
            runs.append(Run(match.group(kind), inner, at + match.start(kind)))
        else:
            inline(match.group(kind), at + match.start(kind), inner, runs)
        done = match.end()
    if done < len(text):
        runs.append(Run(text[done:], style, at + done))
