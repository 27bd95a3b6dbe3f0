"""How often a reply being written is drawn: as often as the screen allows, no more often than
leaves the engine thread the rest of the CPU, and of the GIL that its host loop needs.

Drawing a frame in Textual costs a few milliseconds on a fast machine and tens on a busy one
(a growing reply scrolls the chat, which repaints it). The engine's Python waits for the GIL
whenever the app holds it, so the app's share of the time is what slows the engine down; the
pacer measures that share (the app thread's CPU time) and spaces frames to keep it to SHARE.
"""

from __future__ import annotations

import time

FASTEST_S = 1 / 60  # a terminal shows no more
SHARE = 0.25  # of the wall time the app thread may spend while a reply is written
SWITCH_S = 0.0002  # the interpreter's GIL switch interval meanwhile (Python's default is 5 ms): an engine
# step waking from its device wait gets the GIL back from a painting frame within this


class FramePacer:
    def __init__(self, share: float = SHARE, fastest: float = FASTEST_S, cpu_clock=time.thread_time):
        self.share, self.fastest, self.cpu_clock = share, fastest, cpu_clock
        self.cpu = cpu_clock()

    def next_frame_s(self) -> float:
        """Seconds from now to the next frame, given the app thread's CPU time since the last call."""
        cpu, self.cpu = self.cpu, self.cpu_clock()
        return max(self.fastest, (self.cpu - cpu) / self.share)
