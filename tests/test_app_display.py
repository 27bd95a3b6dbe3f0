"""The display path: steps that come faster than frames all reach the screen, each token in its style."""

from __future__ import annotations

import gc

from specchat.app import make_app
from specchat.bench.paced import PacedSession
from specchat.collector import HELD
from specchat.feed import token_kinds
from specchat.frames import FramePacer
from specchat.settings import Settings
from specchat.widgets.origins import STYLES
from specchat.widgets.reply import styled
from tests.pilot import ask, chat, pilot_test, reply


class RecordingSession(PacedSession):
    """Paced replies that keep every step they emitted, to compare with what the screen shows."""

    def stream(self, ids, sampling, proposer):
        gen = super().stream(ids, sampling, proposer)
        self.steps = []
        emit = gen._emit
        gen._emit = lambda step: self.steps.append(step) or emit(step)
        return gen


@pilot_test
async def test_a_burst_of_steps_faster_than_frames_ends_with_every_token_shown_in_its_style():
    # 600 tokens of code in 6-token steps at a million tokens a second: the whole reply is written
    # in a few frames' time, and its many lines fill several blocks
    session = RecordingSession(tokens=599, step_tokens=6, tok_s=1e6)
    app = make_app(session, Settings(proposer="n-gram", k=5, teaching=True), save=False)
    async with chat(app) as pilot:
        await ask(pilot, "go")
        view = reply(app)
        emitted = [(session.decode([t]), kind) for s in session.steps for t, kind in zip(s.tokens, token_kinds(s))]
        assert [p for p in view.pieces if p[1] != "refused"] == [p for p in emitted if p[0]]
        assert {kind for _, kind in view.pieces} == {"plain", "accepted", "bonus", "correction", "refused"}
        assert len(view.blocks) > 2  # so the blocks' seams are tested below
        shown = [block.content for block in view.blocks]
        assert "\n".join(content.plain for content in shown) == "".join(text for text, _ in view.pieces)
        at = 0
        for content in shown:  # every character is drawn in the style of the token it came from
            styles = [""] * len(content.plain)
            for span in content.spans:
                styles[span.start : span.end] = [str(span.style)] * (span.end - span.start)
            assert styles == [kind_at(view.pieces, at + i) for i in range(len(content.plain))]
            at += len(content.plain) + 1  # the line break between two blocks


def kind_at(pieces: list[tuple[str, str]], offset: int) -> str:
    """The style of the piece that holds character `offset` of the reply."""
    for text, kind in pieces:
        if offset < len(text):
            return STYLES[kind]
        offset -= len(text)
    raise IndexError(offset)


def test_frames_are_spaced_to_keep_the_app_to_its_share_of_the_time():
    cpu = iter([0.0, 0.001, 0.041])  # drawing took 1 ms, then 40 ms
    pacer = FramePacer(share=0.25, fastest=1 / 60, cpu_clock=lambda: next(cpu))
    assert pacer.next_frame_s() == 1 / 60  # cheap frames: as often as a terminal shows them
    assert abs(pacer.next_frame_s() - 0.16) < 1e-9  # 40 ms of drawing: the next frame 160 ms on


def test_a_run_of_tokens_of_one_origin_is_one_span_of_the_reply():
    pieces = [(" a", "accepted"), (" b", "accepted"), (" c", "bonus"), (" d", "accepted"), (" x", "refused"),
              (" e", "correction"), (" f", "plain"), (" g", "plain")]
    content = styled(pieces, teaching=False)
    assert content.plain == " a b c d e f g"  # refused drafts only in the teaching view
    assert [content.plain[s.start : s.end] for s in content.spans] == [" a b", " c", " d", " e"]  # plain: no style
    teaching = styled(pieces, teaching=True)
    assert [teaching.plain[s.start : s.end] for s in teaching.spans][-2:] == [" x", " e"]


@pilot_test
async def test_the_collectors_full_passes_are_held_off_while_a_reply_streams_and_only_then():
    before = gc.get_threshold()
    session = RecordingSession(tokens=599, step_tokens=6, tok_s=1e6)
    app = make_app(session, Settings(proposer="n-gram", k=5), save=False)
    held = []
    show_steps = app.show_steps

    def recorded(**kw):
        held.append(gc.get_threshold()[2])
        show_steps(**kw)

    app.show_steps = recorded
    async with chat(app) as pilot:
        await ask(pilot, "go")
        assert held and set(held) == {HELD}
        assert gc.get_threshold() == before
