"""A reply's timeline: the marks from Enter to the last token on screen, in the order they happen,
so `specchat bench chat` can say where the time on screen went."""

from __future__ import annotations

from specchat.app import make_app
from specchat.bench.paced import PacedSession
from specchat.settings import Settings
from specchat.timeline import SPANS
from tests.pilot import chat, pilot_test, reply, say, until

ORDER = ["enter", "engine began", "first step", "last step", "end handled", "seen"]


@pilot_test
async def test_a_replys_timeline_follows_it_from_enter_to_the_screen():
    # 200 tokens in 4-token steps at 2,000 tok/s: the engine's steps take at least 0.1 s
    app = make_app(PacedSession(tokens=200, step_tokens=4, tok_s=2000), Settings(proposer="n-gram", k=3), save=False)
    async with chat(app) as pilot:
        await say(pilot, "go")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the reply")
        line = app.timeline
        assert list(line.marks) == sorted(line.marks, key=line.marks.get)  # made in the order they happen
        assert sorted(line.marks, key=line.marks.get) == ORDER
        spans = line.spans()
        assert list(spans) == [label for label, _, _ in SPANS]
        assert spans["steps"] >= 0.09
        assert line.marks["seen"] >= app.stats.started + app.stats.seen_s  # the status line's own end
        assert line.frames >= 1 and line.app_cpu_s > 0


@pilot_test
async def test_a_new_reply_starts_a_new_timeline():
    app = make_app(PacedSession(tokens=20, step_tokens=1, tok_s=1e5), Settings(), save=False)
    async with chat(app) as pilot:
        await say(pilot, "one")
        await until(pilot, lambda: app.gen is None and reply(app).status, "the first reply")
        first = app.timeline
        await say(pilot, "two")
        await until(pilot, lambda: app.gen is None and app.timeline is not first and "seen" in app.timeline.marks,
                    "the second reply")
        assert app.timeline.marks["enter"] > first.marks["seen"]
