"""While the model loads, the chat shows the loader's steps, with a real bar while they count (the
graph capture's "capturing CUDA graphs n/total")."""

from __future__ import annotations

import threading

from textual.widgets import ProgressBar

from specchat.app import make_app
from specchat.settings import Settings
from specchat.widgets.loading import Loading
from tests.pilot import pilot_test, ready, until
from tests.scripted import ScriptedSession

GRAPHS = 4


class SlowWarmUp(ScriptedSession):
    """Loads, then captures GRAPHS graphs, each when the test lets it."""

    def __init__(self):
        super().__init__()
        self.captured = threading.Semaphore(0)

    def load(self, progress) -> str:
        progress("reading the script")
        progress("compiling kernels and capturing CUDA graphs (once per start)")
        for done in range(1, GRAPHS + 1):
            self.captured.acquire()
            progress(f"capturing CUDA graphs {done}/{GRAPHS}")
        return super().load(progress)


def bar(app) -> ProgressBar:
    return app.query_one(Loading).query_one(ProgressBar)


@pilot_test
async def test_the_loading_screen_fills_a_bar_as_the_warm_up_captures_graphs():
    session = SlowWarmUp()
    app = make_app(session, Settings(), save=False)
    async with app.run_test() as pilot:
        await until(pilot, lambda: "capturing" in str(app.query_one("#loading-text").render()), "the warm-up")
        assert not bar(app).display  # no count yet: words only
        session.captured.release(2)
        await until(pilot, lambda: bar(app).progress == 2, "two graphs")
        assert bar(app).display and bar(app).total == GRAPHS
        assert str(app.query_one("#loading-text").render()) == f"capturing CUDA graphs 2/{GRAPHS}"
        session.captured.release(GRAPHS - 2)
        await ready(pilot)
        await until(pilot, lambda: not app.query(Loading), "the loading screen to go once the model is ready")


class CapturingModel:
    """Stands for a model on a GPU: its warm-up captures three graphs and says so."""

    graphs = True  # not None: there are graphs to capture

    def warm_up(self, sampling, progress=None):
        for done in range(1, 4):
            progress(f"capturing CUDA graphs {done}/3")


def test_the_chat_session_passes_the_warm_ups_progress_on_to_the_screen_then_rehearses_a_reply(monkeypatch):
    rehearsed = []
    monkeypatch.setattr("specchat.session.rehearse", lambda *args: rehearsed.append(args))
    session = ScriptedSession()
    session.model = CapturingModel()
    told = []
    session.warm_up(None, told.append)
    assert told[1:] == ["capturing CUDA graphs 1/3", "capturing CUDA graphs 2/3", "capturing CUDA graphs 3/3",
                        "rehearsing a reply"]
    assert rehearsed == [(session.model, None, session.sampling)]
