"""A reply whose every token shows where it came from: its blocks of lines, and while it streams
the one in the live area under the chat."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter

from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.visual import VisualType
from textual.widgets import Static

from specchat.markdown_view import markdown
from specchat.widgets.live import BLOCK_LINES, LiveArea
from specchat.widgets.origins import CURSOR, STYLES
from specchat.widgets.redraw import redraw

SPARES = 3  # blocks kept mounted and hidden, for the blocks a frame fills (the last two, the rest)


def styled(pieces: list[tuple[str, str]], teaching: bool) -> Content:
    """The pieces in their origins' styles, a run of pieces of one origin as one span: a frame
    re-wraps a block of a few spans (a span per step or so) instead of one per token."""
    shown = (piece for piece in pieces if teaching or piece[1] != "refused")
    return Content.assemble(*(("".join(t for t, _ in run), STYLES[k]) for k, run in groupby(shown, key=itemgetter(1))))


def inspectable(pieces: list[tuple[str, str]], indices: list[int], teaching: bool, cursor: int | None) -> Content:
    """As `styled`, each piece clickable (it names its index in the reply), the cursor's marked."""
    return Content.assemble(*(
        (t, f"{STYLES[k]} {CURSOR if i == cursor else ''} @click=pick({i})".strip())
        for (t, k), i in zip(pieces, indices) if teaching or k != "refused"
    ))


@dataclass
class TokenPicked(Message):
    """A click on a token of a reply while the step inspector is on."""

    reply: ReplyView
    index: int  # the piece's index in reply.pieces


class Block(Static):
    """Some whole lines of a reply (in the reply, or in the live area under the chat).

    It knows whether its content has been painted since it last changed: the reply's end counts
    as on screen once its last blocks have been (ReplyView.painted), not when its text was handed
    over."""

    def __init__(self, *args, reply: ReplyView | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reply = reply
        self.painted = False

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        self.painted = False
        super().update(content, layout=layout)

    def render_lines(self, crop: Region) -> list[Strip]:
        lines = super().render_lines(crop)  # called by the compositor as it paints the screen
        self.painted = True
        return lines

    def action_pick(self, index: int) -> None:
        self.post_message(TokenPicked(self.reply or self.parent, index))


class ReplyView(Vertical):
    """A reply as (text, origin) pieces, each rendered in its origin's style.

    The text is shown in blocks of about BLOCK_LINES whole lines. Only the last block changes
    while tokens arrive, so each frame re-wraps the reply's last lines, not the whole reply.
    Once finished, a reply may show as Markdown instead (`markdown`), in a block of its own.

    Given a live area (live.py), the reply's last block lives there while it streams: each full
    block goes up into the reply, drawn once, and the last one when the reply finishes. The blocks
    that take them are mounted beforehand, hidden (`spares`): shown, they are laid out and painted
    in the same refresh as the live block, not one or two refreshes later, once mounted. Of the
    blocks one frame fills, all but the last two (which cover the chat) go up as one block."""

    def __init__(self, teaching: bool = False, markdown: bool = False, live: LiveArea | None = None) -> None:
        self.live = live
        self.block_lines = BLOCK_LINES
        first = Block(Content.styled("…", "$text-muted"), reply=self)
        self.blocks = [first]
        self.markdown_block = Block(classes="markdown", reply=self)
        self.markdown_block.display = False
        self.status_line = Static(classes="status")
        self.status_line.display = False
        self.spares = [self.hidden_block() for _ in range(SPARES)] if live else []
        super().__init__(*(self.spares if live else self.blocks), self.markdown_block, self.status_line)
        self.markdown = markdown
        self.pieces: list[tuple[str, str]] = []
        self.teaching = teaching
        self.status = ""
        self.block_pieces: list[list[tuple[str, str]]] = [[]]
        self.block_indices: list[list[int]] = [[]]  # each block piece's index in self.pieces
        self.block_breaks = 0  # line breaks in the last block
        self.steps: list = []  # the engine's Step of each piece, for the step inspector
        self.inspecting = False
        self.cursor: int | None = None  # the inspected piece

    def add_steps(self, shown: list) -> None:
        """Append the pieces of ShownSteps (feed.py), remembering each piece's step."""
        for s in shown:
            self.steps += s.origins or [s.step] * len(s.pieces)
        self.add([piece for s in shown for piece in s.pieces])

    def set_cursor(self, inspecting: bool, cursor: int | None) -> None:
        self.inspecting, self.cursor = inspecting, cursor
        for i in range(len(self.blocks)):
            self.show_block(i)
        self.show_view()

    def painted(self, above: bool = True) -> bool:
        """Whether the block that shows the reply's last text has been painted with it, and
        (`above`: the chat shows its end) the block before it: a frame that fills blocks mounts
        them in the chat, the last right above the live block, and a block break may have left
        the live block empty."""
        shown = [i for i in range(len(self.blocks)) if self.block_pieces[i]][-2 if above else -1 :]
        return all(self.blocks[i].painted for i in shown)

    @property
    def text(self) -> str:
        """The reply as the model wrote it (refused drafts left out)."""
        return "".join(text for text, kind in self.pieces if kind != "refused")

    def add(self, pieces: list[tuple[str, str]]) -> None:
        """Append the pieces of one or more steps."""
        first = len(self.pieces)
        self.pieces += pieces
        if self.live is not None and self.is_attached:
            self.add_live(list(enumerate(pieces, first)))
            return
        mounted: list[Block] = []  # the blocks these pieces began, mounted at once
        for index, (text, kind) in enumerate(pieces, first):
            breaks = text.count("\n")
            if breaks and self.block_breaks + breaks >= self.block_lines and self.is_attached:
                # the block ends at this piece's last line break, which the next block's start implies
                head, _, tail = text.rpartition("\n")
                self.append(-1, head, kind, index)
                self.show_block(-1)
                self.start_block()
                mounted.append(self.blocks[-1])
                text, breaks = tail, 0
            self.append(-1, text, kind, index)
            self.block_breaks += breaks
        if mounted:
            self.mount(*mounted, before=self.status_line)
        self.show_block(-1)

    def add_live(self, pieces: list[tuple[int, tuple[str, str]]]) -> None:
        """Append (index, piece) pairs while the last block is in the live area. Each time it
        fills, it ends at the filling piece's last line break (which the next block's start
        implies)."""
        ends, breaks = [], self.block_breaks  # where the blocks these pieces fill end
        for at, (_, (text, _)) in enumerate(pieces):
            n = text.count("\n")
            if n and breaks + n >= self.block_lines:
                ends.append(at)
                breaks = 0  # the piece's text after its last line break has none
            else:
                breaks += n
        start = 0
        for end in ends[-SPARES:]:  # the blocks before these go up as one
            index, (text, kind) = pieces[end]
            head, _, tail = text.rpartition("\n")
            for i, (t, k) in pieces[start:end]:
                self.append(-1, t, k, i)
            self.append(-1, head, kind, index)
            self.start_block()
            pieces[end], start = (index, (tail, kind)), end
        for i, (t, k) in pieces[start:]:
            self.append(-1, t, k, i)
        self.block_breaks = breaks
        if ends:
            new = [self.hidden_block() for _ in range(SPARES - len(self.spares))]
            self.spares += new
            self.mount(*new, before=self.markdown_block)  # for the next frames, mounted meanwhile
            self.live.follow(block_moved=True)
        self.show_block(-1)
        self.live.follow()

    def append(self, block: int, text: str, kind: str, index: int) -> None:
        if text:
            self.block_pieces[block].append((text, kind))
            self.block_indices[block].append(index)

    def start_block(self) -> None:
        """End the last block, which is full, and begin the next: in a live area the full one's
        lines go into the reply (the spare block shows them) and the live block goes on."""
        if self.live is None:
            self.blocks.append(Block(reply=self))
        else:
            self.blocks.insert(-1, self.unhide_spare(self.block_content(-1)))
        self.block_pieces.append([])
        self.block_indices.append([])
        self.block_breaks = 0

    def hidden_block(self) -> Block:
        block = Block(reply=self)
        block.display = False
        return block

    def unhide_spare(self, content: Content) -> Block:
        """A spare block, showing `content` (of auto height, unlike a live block) as the reply's
        blocks show now."""
        block = self.spares.pop(0)
        block.update(content)
        block.display = self.blocks[-1].display
        return block

    def settle(self) -> None:
        """The live block's lines into the reply, as a block of their own that is drawn once."""
        self.blocks[-1] = self.unhide_spare(self.blocks[-1].content)

    def leave_live_area(self) -> None:
        """The reply is over: its last block into the reply, and the live area free."""
        if self.live is None:
            return
        if self.is_attached:
            self.settle()
        self.live.stop()
        self.live = None

    def show_block(self, i: int) -> None:
        redraw(self.blocks[i], self.block_content(i))

    def block_content(self, i: int) -> Content:
        if self.inspecting:
            return inspectable(self.block_pieces[i], self.block_indices[i], self.teaching, self.cursor)
        return styled(self.block_pieces[i], self.teaching)

    def set_teaching(self, teaching: bool) -> None:
        self.teaching = teaching
        if self.pieces:
            for i in range(len(self.blocks)):
                self.show_block(i)
            self.show_view()

    def set_markdown(self, markdown: bool) -> None:
        self.markdown = markdown
        self.show_view()

    def show_view(self) -> None:
        """A finished reply as Markdown when asked for, else (and while it streams) as raw text."""
        as_markdown = self.markdown and bool(self.status) and bool(self.pieces)
        if as_markdown:
            self.markdown_block.update(markdown(self.pieces, self.teaching, self.inspecting, self.cursor))
        self.markdown_block.display = as_markdown
        for block in self.blocks:
            block.display = not as_markdown
        self.blocks[0].display = not as_markdown and (bool(self.pieces) or not self.status)  # or its "…"

    def finish(self, status: str) -> None:
        self.leave_live_area()
        self.status = status
        self.status_line.update(Content.styled(status, "$text-muted italic"))
        self.status_line.display = True
        self.show_view()

    def content(self) -> Content:
        """The whole reply as styled text, the status line included."""
        parts = [styled(self.pieces, self.teaching)]
        if self.status:
            parts.append(Content.styled(("\n" if self.pieces else "") + self.status, "$text-muted italic"))
        return Content.assemble(*parts)
