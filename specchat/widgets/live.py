"""The live area: the unfinished end of the reply being written, under the chat, out of its scroll.

A growing reply inside the scrolled chat makes it scroll every frame, and Textual then paints every
visible line of the chat again. Here the reply's finished blocks go into the chat, each drawn once,
and only its last block, in this area, changes from frame to frame.

Once the chat is full, the block keeps a fixed height (`lines`), so new lines change neither its
size nor the chat's: a frame repaints the block without a layout (redraw.py), and Textual's second
layout, which follows any widget whose size a layout changed, does not come either.
"""

from __future__ import annotations

from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

BLOCK_LINES = 24  # the most lines of a reply the area shows: its block moves into the chat when full
FEWEST_LINES = 4


class LiveArea(Vertical):
    """Holds one reply's last block while it streams (ReplyView's blocks[-1]); hidden otherwise."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.display = False
        self.lines = BLOCK_LINES
        self.chat: VerticalScroll | None = None
        self.block: Static | None = None
        self.held = False

    def start(self, chat: VerticalScroll, block: Static, scrolls: bool = False) -> int:
        """Show `block` here for a new reply; the lines a block may take before it moves up: no
        more than half the chat's height, so the chat above still shows where the reply began.
        `scrolls`: the chat is about to scroll (your message fills it): the block is held at once."""
        self.remove_children()  # the last reply's block, left here when it ended (see stop)
        self.chat, self.block, self.held = chat, block, False
        self.lines = max(FEWEST_LINES, min(BLOCK_LINES, chat.scrollable_content_region.height // 2))
        self.line_up()
        self.mount(block)
        self.display = True
        self.follow(scrolls=scrolls)
        return self.lines

    def follow(self, block_moved: bool = False, scrolls: bool = False) -> None:
        """After a frame's lines: once the chat scrolls (or a block moved up into it), hold the
        block's full height, so that growing lines no longer shrink the chat a line at a time
        (each time Textual would paint the whole chat again). Held from the start (`scrolls`),
        the reply's first lines change neither its size nor the chat's."""
        if self.held or self.block is None or not (block_moved or scrolls or self.chat.max_scroll_y > 0):
            return
        self.held = True
        self.block.styles.min_height = self.lines
        self.line_up()

    def line_up(self) -> None:
        """As wide as a reply in the chat, whose scrollbar (when it shows one) takes a column."""
        self.styles.padding = (0, 1 + (self.chat.show_vertical_scrollbar if self.chat else 1), 0, 1)

    def stop(self) -> None:
        """The reply is over (its last block was copied into it): hide the area. Its block is
        removed when the next reply starts: a removal now would cost the finished reply's frame
        a second refresh before its last token counts as seen."""
        self.block, self.held = None, False
        self.display = False
