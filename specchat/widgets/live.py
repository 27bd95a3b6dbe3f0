"""The live area: the unfinished end of the reply being written, under the chat, out of its scroll.

A growing reply inside the scrolled chat makes it scroll every frame, and Textual then paints every
visible line of the chat again. Here the reply's finished blocks go into the chat, each drawn once,
and only its last block, in this area of (soon) fixed height, changes from frame to frame.
"""

from __future__ import annotations

from textual.containers import Vertical, VerticalScroll

BLOCK_LINES = 24  # the most lines of a reply the area shows: its block moves into the chat when full
FEWEST_LINES = 4


class LiveArea(Vertical):
    """Holds one reply's last block while it streams (the reply's `live_block`); hidden otherwise."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.display = False
        self.lines = BLOCK_LINES
        self.chat: VerticalScroll | None = None

    def start(self, chat: VerticalScroll) -> int:
        """Show the area for a new reply; the lines a block of it may take before it moves up.

        No more than half the chat's height, so the chat above still shows where the reply began.
        If the chat is scrolled already, the area takes its full height now: growing would shrink
        the chat line by line, and each time Textual would paint it all again."""
        self.chat = chat
        self.lines = max(FEWEST_LINES, min(BLOCK_LINES, chat.scrollable_content_region.height // 2))
        self.styles.min_height = self.lines if chat.max_scroll_y > 0 else None
        self.line_up()
        self.display = True
        return self.lines

    def hold_height(self) -> None:
        """A full block moved into the chat: keep the height it had, so the chat keeps its own."""
        self.styles.min_height = self.lines
        self.line_up()

    def line_up(self) -> None:
        """As wide as a reply in the chat, whose scrollbar (when it shows one) takes a column."""
        self.styles.padding = (0, 1 + (self.chat.show_vertical_scrollbar if self.chat else 1), 0, 1)

    def stop(self) -> None:
        """The reply is over (its last block was copied into it): empty and hide the area."""
        self.remove_children()
        self.styles.min_height = None
        self.display = False
