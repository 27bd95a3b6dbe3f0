"""Runs of plain steps, read back without stalling the device.

A run's tokens come back to the host through pinned memory, copied in stream order right after
the run: the host waits for that run alone, not for work queued behind it. So with no proposer
the generation queues the next run before it reads the one before (`Generation.run_ahead`, on
CUDA), and so within the plain steps the adaptive policy asked for at once: while the host shows
a run's tokens and sets up the next, the device is already running it, where it would otherwise
stand idle between runs.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from engine.runtime.step_io import StepOutput


class QueuedRun:
    """n one-token steps queued on the device (`Model.chain`'s output) and the copy of their
    tokens to the host."""

    def __init__(self, out: StepOutput, n: int, start=None):
        """start: a CUDA event the device passed just before the run (the run before's `copied`
        for one queued ahead), so `seconds` is the run's own time on the device."""
        self.out, self.n, self.start = out, n, start
        tokens = out.tokens
        self.copied = None
        if tokens.device.type == "cuda":
            # the chain's tokens sit in a graph buffer the next run overwrites: copied out now
            self.host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            self.host.copy_(tokens, non_blocking=True)
            self.copied = torch.cuda.Event(enable_timing=True)
            self.copied.record()
        else:
            self.host = tokens

    def keep_states(self) -> None:
        """The run's target states copied out of the chain's buffers, which the next run queued
        overwrites before the host reads these (a device copy, in stream order)."""
        if self.out.states is not None:
            self.out = replace(self.out, states=self.out.states.clone())

    @property
    def last(self) -> torch.Tensor:
        """The run's last token, on the device: the next run's input, read there in stream order."""
        return self.out.tokens[-1:]

    def seconds(self) -> float | None:
        """The run's time on the device, once read (None off CUDA)."""
        if self.start is None or self.copied is None:
            return None
        return self.start.elapsed_time(self.copied) / 1e3

    def tokens(self) -> list[int]:
        """The run's tokens, once the device has got past it."""
        if self.copied is not None:
            self.copied.synchronize()
        return self.host.tolist()
