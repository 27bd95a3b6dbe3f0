"""The live area: while a reply streams, its full blocks sit in the chat and only its last block,
under the chat, changes; when the reply ends, the whole reply is in the chat as one."""

from __future__ import annotations

import threading
import time

from specchat.app import make_app
from specchat.bench.paced import PacedSession
from specchat.settings import Settings
from specchat.widgets.reply import Block
from tests.pilot import chat, pilot_test, reply, say, until


class HeldSession(PacedSession):
    """Paced replies of code whose engine thread stops after each step count in `holds` until the
    test lets it go on (`go`), so a test can look at the screen mid-reply."""

    def __init__(self, holds: list[int]) -> None:
        super().__init__(tokens=1500, step_tokens=6, tok_s=1e6)
        self.holds, self.go = holds, threading.Semaphore(0)
        self.holding = 0  # the hold the engine thread waits at (0: none)
        self.emitted = None  # the last step it made

    def stream(self, ids, sampling, proposer):
        gen = super().stream(ids, sampling, proposer)
        emit, count = gen._emit, [0]

        def held(step):
            count[0] += 1
            if count[0] in self.holds:
                self.holding = count[0]
                self.go.acquire(timeout=10)
                self.holding = 0
            self.emitted = emit(step)
            return self.emitted

        gen._emit = held
        return gen


async def started(pilot, session: HeldSession) -> None:
    """Send a message and let its reply begin on screen (the session holds at its third step):
    the steps that follow then reach a reply in place, which blocks can be added to."""
    await say(pilot, "go")
    await held(pilot, session, 3)
    session.go.release()


async def held(pilot, session: HeldSession, at: int) -> None:
    """Let the app show every step the engine made before it stopped at the hold `at`."""
    history = pilot.app.stats.history
    await until(pilot, lambda: session.holding == at and history and history[-1] is session.emitted, f"hold {at}")
    await pilot.pause()


def lines(app) -> str:
    return "\n".join(block.content.plain for block in reply(app).blocks)


@pilot_test
async def test_full_blocks_go_into_the_chat_and_the_last_stays_under_it_until_the_reply_ends():
    session = HeldSession(holds=[3, 60, 120])
    app = make_app(session, Settings(proposer="n-gram", k=5, markdown=False), save=False)
    async with chat(app) as pilot:
        await started(pilot, session)
        await held(pilot, session, 60)
        session.go.release()
        await held(pilot, session, 120)  # two frames at least, each filling blocks
        view = reply(app)
        assert len(view.blocks) > 2 and app.live.display
        assert all(block.parent is view for block in view.blocks[:-1])
        assert view.blocks[-1].parent is app.live
        assert lines(app) == view.text  # the blocks' seams hold the reply's line breaks
        assert view.blocks[-1].outer_size.height == app.live.lines  # held: new lines keep the chat's height
        session.go.release()
        await until(pilot, lambda: app.gen is None and view.status, "the reply")
        assert all(block.parent is view for block in view.blocks) and not app.live.display
        assert lines(app) == view.text


@pilot_test
async def test_a_reader_scrolled_up_stays_where_they_are_while_blocks_move_into_the_chat():
    session = HeldSession(holds=[3, 100, 200])
    app = make_app(session, Settings(proposer="n-gram", k=5, markdown=False), save=False)
    async with chat(app) as pilot:
        await started(pilot, session)
        await held(pilot, session, 100)
        assert app.chat.max_scroll_y > 2  # blocks have gone up into the chat: it scrolls
        app.chat.release_anchor()  # as the mouse wheel and the scroll keys do
        app.chat.scroll_to(y=2, animate=False, immediate=True)
        await pilot.pause()
        blocks = len(reply(app).blocks)
        session.go.release()
        await held(pilot, session, 200)
        assert len(reply(app).blocks) > blocks  # more blocks moved up into the chat meanwhile
        assert app.chat.scroll_y == 2
        session.go.release()


@pilot_test
async def test_a_click_on_a_token_in_the_live_area_finds_its_step():
    session = HeldSession(holds=[3, 120])
    app = make_app(session, Settings(proposer="n-gram", k=5, markdown=False), save=False)
    async with chat(app) as pilot:
        await pilot.press("f4")
        await started(pilot, session)
        await held(pilot, session, 120)
        view = reply(app)
        await pilot.click(view.blocks[-1], offset=(8, 1))  # past the bar and the padding, on the second line (the first may be empty)
        await pilot.pause()
        assert view.cursor in view.block_indices[-1]
        assert app.inspected is view
        session.go.release()


@pilot_test
async def test_a_reply_counts_as_on_screen_once_the_live_area_has_painted_its_last_tokens(monkeypatch):
    # The reply closes (into the chat, as Markdown) only after its last tokens were painted where
    # they streamed; the rate the user saw is timed from that paint, not from the tokens' arrival.
    session = PacedSession(tokens=400, step_tokens=6, tok_s=1e6)
    app = make_app(session, Settings(proposer="n-gram", k=5), save=False)
    paints = []  # (when, the block, what it showed, whether in the live area)
    paint = Block.render_lines

    def recorded(block, crop):
        lines = paint(block, crop)
        paints.append((time.perf_counter(), block, block.content.plain, block.parent is app.live))
        return lines

    monkeypatch.setattr(Block, "render_lines", recorded)
    async with chat(app) as pilot:
        await say(pilot, "go")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply")
        view = reply(app)
        last = view.blocks[-1].content.plain  # the live block's text, gone into the chat
        assert last and len(view.blocks) > 2 and view.markdown_block.display
        seen = app.stats.started + app.stats.seen_s
        live = [when for when, _, text, in_live in paints if in_live and text == last]
        assert live, "the last tokens were never painted in the live area"
        assert live[0] <= seen
        # and the lines right above them, the chat's last block then
        assert min(when for when, block, _, _ in paints if block is view.blocks[-2]) <= seen


@pilot_test
async def test_a_reply_is_painted_once_its_last_block_and_the_one_above_it_are():
    app = make_app(PacedSession(tokens=10, step_tokens=1, tok_s=1e6), Settings(markdown=False), save=False)
    async with chat(app) as pilot:
        view = app.chat.add_reply(False, False, app.live)
        await pilot.pause()
        assert view.painted()  # nothing to show yet but its "…"
        view.add([("one\ntwo", "plain")])
        assert not view.painted()
        await until(pilot, lambda: view.painted(), "the paint")
        # a frame that fills the block mounts it in the chat, right above the live block, which
        # goes on with the rest: both are the end of the reply on screen
        view.add([("\nline" * view.block_lines + " end", "plain")])
        above, last = view.blocks[-2:]
        assert above.parent is view and last.parent is app.live and not view.painted()
        await until(pilot, lambda: view.painted(), "the paint")
        assert above.painted and last.painted
        above.painted = False  # as if the reader had scrolled the chat away from the end
        assert view.painted(above=False) and not view.painted()
        # a line break that fills the block leaves the live block empty: the reply's last text is
        # then in the block gone up
        view.add([("\nline" * (view.block_lines - 1) + "\n", "plain")])
        assert view.block_pieces[-1] == [] and view.blocks[-2].parent is view
        assert not view.painted(above=False)
        await until(pilot, lambda: view.painted(above=False), "the paint")
        assert view.blocks[-2].painted


@pilot_test
async def test_a_message_that_fills_the_chat_holds_the_live_block_before_the_first_step():
    # held at once, the reply's first lines repaint the block alone (no layout, no chat redrawn);
    # a short message leaves it to grow under the message, as before
    session = HeldSession(holds=[1])
    app = make_app(session, Settings(proposer="n-gram", k=5, markdown=False), save=False)
    async with chat(app) as pilot:
        await say(pilot, "hi")
        await until(pilot, lambda: session.holding == 1, "the hold")
        assert not app.live.held and not app.chat.show_vertical_scrollbar
        session.go.release()
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply")
        app.action_new_chat()
        await pilot.pause()
        await say(pilot, "\n".join(f"line {i}" for i in range(app.chat.size.height)))
        await until(pilot, lambda: session.holding == 1, "the hold")
        assert app.live.held and app.chat.show_vertical_scrollbar
        assert app.live.block.styles.min_height.value == app.live.lines
        session.go.release()
