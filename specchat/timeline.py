"""Where one reply's time went, from Enter to its last token on the screen.

The status line says how long the user waited; this says what for: the app's own work before the
engine starts, the engine's prefill and steps, the wait from its last step to the app handling
the reply's end, and the paint of that end; with the app thread's CPU time and the frames drawn
meanwhile. `specchat bench chat` prints it per case, so a gap between the engine's time and the
screen's can be named. A few clock reads per reply, kept for every reply.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# (label, from mark, to mark), in the order they happen
SPANS = (
    ("Enter to engine start", "enter", "engine began"),
    ("prefill", "engine began", "first step"),
    ("steps", "first step", "last step"),
    ("last step to the app's turn", "last step", "end handled"),
    ("end painted", "end handled", "seen"),
)


@dataclass
class ReplyTimeline:
    marks: dict[str, float] = field(default_factory=dict)  # name: time.perf_counter()
    app_cpu_s: float = 0.0  # the app thread's CPU time from Enter to seen
    frames: int = 0  # frames that showed new steps
    _cpu_at: float = 0.0

    @classmethod
    def begin(cls) -> ReplyTimeline:
        line = cls(_cpu_at=time.thread_time())
        line.mark("enter")
        return line

    def mark(self, name: str, at: float | None = None) -> None:
        self.marks[name] = time.perf_counter() if at is None else at

    def end(self) -> None:
        """On the app thread, when the reply's last token is on the screen."""
        self.mark("seen")
        self.app_cpu_s = time.thread_time() - self._cpu_at

    def spans(self) -> dict[str, float]:
        """Seconds of each span whose two marks were made (a failed reply lacks some)."""
        m = self.marks
        return {label: m[b] - m[a] for label, a, b in SPANS if a in m and b in m}
