"""A finished reply drawn as Markdown, each character still in the style of the token it came from.

The layout (markdown_layout.py) says where each shown character sits in the reply's text; the
reply's pieces say which token, of which origin, covers each offset. A character gets its origin's
style, then the Markdown's own (whose colour wins: a heading's, highlighted code's), then its origin's
tint, so the origin reads from the tint and the underline / bold / italic cue inside code too.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterator

from textual.content import Content

from specchat.markdown_layout import layout
from specchat.widgets.origins import CURSOR, STYLES, TINTS

Span = tuple[str, str, int | None]  # text, style, the index of its piece (None: the layout's own)


def markdown(
    pieces: list[tuple[str, str]], teaching: bool, inspecting: bool = False, cursor: int | None = None
) -> Content:
    """The reply's (text, origin) pieces as Markdown. While `inspecting`, every character is a click on
    its piece (named by its index in `pieces`) and the `cursor` piece is marked. In the teaching view
    a refused draft shows right after the text before it, as in the raw view."""
    return assembled(list(origin_spans(pieces, teaching)), inspecting, cursor)


def origin_spans(pieces: list[tuple[str, str]], teaching: bool) -> Iterator[Span]:
    """The Markdown layout of the text the kept pieces make, cut where a token ends, each part in its
    token's origin style; in the teaching view, each refused draft where its drafts were refused."""
    starts, kept, refused = [], [], deque()  # each kept piece's offset and (origin, index); refused ones
    at = 0
    for index, (text, kind) in enumerate(pieces):
        if kind == "refused":
            if teaching:
                refused.append((at, text, index))
        else:
            starts.append(at)
            kept.append((kind, index))
            at += len(text)
    source = "".join(text for text, kind in pieces if kind != "refused")
    for run in layout(source):
        if run.at is None:
            yield run.text, run.style, None
            continue
        offset, end = run.at, run.at + len(run.text)
        while offset < end:  # a run may cover several tokens
            while refused and refused[0][0] <= offset:
                _, text, index = refused.popleft()
                yield text, STYLES["refused"], index
            j = bisect_right(starts, offset) - 1
            stop = min(end, starts[j + 1]) if j + 1 < len(starts) else end
            kind, index = kept[j]
            yield source[offset:stop], " ".join(s for s in (STYLES[kind], run.style, TINTS[kind]) if s), index
            offset = stop
    for _, text, index in refused:
        yield text, STYLES["refused"], index


def assembled(spans: list[Span], inspecting: bool, cursor: int | None) -> Content:
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
