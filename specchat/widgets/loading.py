"""What the chat shows while the model loads: the loader's latest step, and a real bar while its
steps count (graph capture says "capturing CUDA graphs 3/17")."""

from __future__ import annotations

from textual.containers import Horizontal, Vertical
from textual.widgets import Label, LoadingIndicator, ProgressBar

from specchat.progress import fraction


class Loading(Vertical):
    """A spinner and the loader's latest progress line; a bar while its messages count ("3/17")."""

    def compose(self):
        with Horizontal():
            yield LoadingIndicator()
            yield Label("loading the model…", id="loading-text")
        bar = ProgressBar(id="loading-bar", show_eta=False)
        bar.display = False
        yield bar

    def say(self, text: str) -> None:
        self.query_one("#loading-text", Label).update(text)
        counted = fraction(text)
        bar = self.query_one("#loading-bar", ProgressBar)
        bar.display = counted is not None
        if counted is not None:
            bar.update(progress=counted[0], total=counted[1])
