"""A finished reply drawn as Markdown, each character still in the style of the token it came from.

The layout (markdown_layout.py) says where each shown character sits in the reply's text; the
reply's pieces say which token, of which origin, covers each offset. A character gets its origin's
style, then the Markdown's own (whose colour wins: a heading's, highlighted code's), then its origin's
tint, so the origin reads from the tint and the underline / bold / italic cue inside code too.
"""

from __future__ import annotations

from bisect import bisect_right

from textual.content import Content

from specchat.markdown_layout import layout
from specchat.widgets.origins import CURSOR, STYLES, TINTS

REFUSED_BREAK = "⏎"  # as the raw view shows a refused line break: on one line


def markdown(
    pieces: list[tuple[str, str]], teaching: bool, inspecting: bool = False, cursor: int | None = None
) -> Content:
    """The reply's (text, origin) pieces as Markdown. While `inspecting`, every character is a click on
    its piece (named by its index in `pieces`) and the `cursor` piece is marked. In the teaching view
    a refused draft shows right after the text before it, as in the raw view."""
    starts, kept, refused = [], [], []  # kept pieces' offsets and (origin, index); refused at an offset
    at = 0
    for index, (text, kind) in enumerate(pieces):
        if kind == "refused":
            refused.append((at, text.replace("\n", REFUSED_BREAK), index))
        else:
            starts.append(at)
            kept.append((kind, index))
            at += len(text)
    source = "".join(text for text, kind in pieces if kind != "refused")

    spans: list[tuple[str, str, int | None]] = []  # (text, style, piece index)

    def refused_before(offset: int) -> None:
        while refused and refused[0][0] <= offset:
            _, text, index = refused.pop(0)
            if teaching:
                spans.append((text, STYLES["refused"], index))

    for run in layout(source):
        if run.at is None:
            spans.append((run.text, run.style, None))
            continue
        offset, end = run.at, run.at + len(run.text)
        while offset < end:  # a run covers one or more tokens
            refused_before(offset)
            j = bisect_right(starts, offset) - 1
            stop = min(end, starts[j + 1]) if j + 1 < len(starts) else end
            kind, index = kept[j]
            style = " ".join(s for s in (STYLES[kind], run.style, TINTS[kind]) if s)
            spans.append((source[offset:stop], style, index))
            offset = stop
    refused_before(len(source))
    return assembled(spans, inspecting, cursor)


def assembled(spans: list[tuple[str, str, int | None]], inspecting: bool, cursor: int | None) -> Content:
    """One Content of the spans, neighbours of one style joined (and of one piece, while inspecting)."""
    parts: list[tuple[str, str]] = []
    last = None
    for text, style, index in spans:
        if inspecting and index is not None:
            style = " ".join(
                s for s in (style, CURSOR if index == cursor else "", f"@click=pick({index})") if s
            )
        key = (style, index if inspecting else None)
        if parts and key == last:
            parts[-1] = (parts[-1][0] + text, style)
        else:
            parts.append((text, style))
        last = key
    return Content.assemble(*parts)
