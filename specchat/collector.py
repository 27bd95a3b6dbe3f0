"""The collector's full passes wait while a reply streams.

A full pass walks every object the collector tracks that is not frozen (the model and the
libraries are, since load: see SpecChat.model_ready): the app's widgets and their caches, some
tens of thousands of objects, 15 to 35 ms on a busy 2-core machine, once or twice a reply of a
few seconds. Taken while a reply streams, it stalls a frame, or the engine's host loop (whichever
thread allocates at that moment). The young generations, where most of a frame's cyclic garbage
dies, are still collected as usual; a full pass comes after HELD young passes instead of 10
(some 30 s of streaming on that machine, whose cyclic garbage, some 4,000 objects a second, waits
that long at most), and as usual once the reply is over.
"""

from __future__ import annotations

import gc

HELD = 200  # young passes between two full passes while a reply streams (Python's default: 10)


class FullPasses:
    """Held: the collector makes its full passes 20 times less often."""

    def __init__(self) -> None:
        self.saved: tuple[int, ...] | None = None

    def hold(self) -> None:
        if self.saved is None:
            self.saved = gc.get_threshold()
            gc.set_threshold(self.saved[0], self.saved[1], HELD)

    def release(self) -> None:
        if self.saved is not None:
            gc.set_threshold(*self.saved)
            self.saved = None


def settle() -> None:
    """What is loaded so far (a model, its tokenizer, the libraries) lives as long as the process:
    collected once, then left out of the collector's full passes, which would otherwise walk all
    of it (some 100 ms a pass with torch and transformers loaded, on a 2-core machine) at whatever
    step they happen to fall on."""
    gc.collect()
    gc.freeze()
