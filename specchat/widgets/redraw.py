"""Redrawing a Static without a layout of the whole screen when its height cannot have changed.

`Static.update` asks for a layout, and a layout reflows every widget on the screen and repaints
every one that moved: while a reply streams, most of a frame's cost. A Static whose new content
takes as many lines as the old, none wrapped, only needs its own lines painted again; so does one
held at a minimum height (live.py) by both the old content and the new.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.content import Content
from textual.css.scalar import Unit
from textual.widgets import Static


def unwrapped_lines(content: Content, width: int) -> int | None:
    """How many lines `content` takes at `width` if none of them wraps; None if one may."""
    lines = content.plain.split("\n")
    if all(cell_len(line) <= width and "\t" not in line for line in lines):  # a tab's width varies
        return len(lines)
    return None


def floor_lines(static: Static) -> int:
    """The lines `static` shows whatever its content: its min-height in cells, less its gutter."""
    floor = static.styles.min_height
    if floor is None or floor.unit != Unit.CELLS:
        return 0
    return int(floor.value) - static.styles.gutter.height


def redraw(static: Static, content: Content) -> None:
    """Show `content` in `static`: nothing to do if it is what is shown; a repaint alone if it
    takes the lines the old content took (or both fit in its minimum height); else an update
    with a layout."""
    old = static.content
    if not isinstance(old, Content):
        static.update(content)
        return
    if old.plain == content.plain and old.spans == content.spans:
        return
    width = static.content_size.width  # 0 until the first layout: then it always lays out
    before, after = unwrapped_lines(old, width), unwrapped_lines(content, width)
    same = bool(width) and before not in (None, 0) and after is not None and (
        before == after or max(before, after) <= floor_lines(static)
    )
    static.update(content, layout=not same)
