"""CUDA graphs of the DFlash drafter's pass: context extension, block, lm_head, argmax, as one replay.

A step's pass takes the states of the n tokens the target just made final (n = accepted + 1,
so 1..16) and the anchor, the last verified token. Its inputs live in two static buffers:

    inputs [ block ids (B): anchor, mask x (B-1) | start | page table (every page of the pool) ]
    states [256, len(state_layers) * H]: the new tokens' target states, copied on the device

`inputs` is filled by one host-to-device copy; the states never leave the device. The graph of
n extends the context at positions start..start+n-1, then runs the block at start+n..; its
outputs (the block's logits and greedy drafts) stay on the device. Graphs are captured on first
use, one per n (0 for a pass with no new states), into the target's graph memory pool.

More than 16 new states (a prompt, or a drafter that sat steps out) are taken in first by
graphs that only extend the context, of CATCH_UP_SIZES states each, as many as it takes; the
pass's own graph takes the last 1..16. Taken in op by op, from the host, a catch-up cost some
0.75 ms whatever its length (the H200, tenth run); a replay costs the kernels alone.
"""

from __future__ import annotations

import torch

from engine.limits import MAX_STEP
from engine.runtime.step_graphs import capture

# The lengths of the context-only graphs, largest first: a catch-up of n states replays the
# largest that fits until none is left (n's binary digits: a catch-up before a pass, a multiple of
# 16 up to HOLD, the most a proposer holds back, takes at most 4 replays; a prompt, once a reply,
# a few more of 256).
CATCH_UP_SIZES = (256, 128, 64, 32, 16, 8, 4, 2, 1)


def catch_up_sizes(n: int) -> list[int]:
    """The context-only replays that take in n states, in order."""
    sizes = []
    for size in CATCH_UP_SIZES:
        while n >= size:
            sizes.append(size)
            n -= size
    return sizes


class DrafterGraphs:
    def __init__(self, drafter, mempool):
        self.drafter = drafter
        pool = drafter.pool
        device = drafter.fc.weight.device
        b = drafter.block_size
        self.start_index, self.pages_index = b, b + 1
        # the last page is never handed out: capture warm-ups write their K/V there
        self.scratch_page = pool.free.pop()
        self.host = torch.zeros(b + 1 + pool.num_pages, dtype=torch.long).pin_memory()
        self.host_view = self.host.numpy()
        self.inputs = torch.zeros(self.host.shape, dtype=torch.long, device=device)
        self.ids = self.inputs[:b]
        self.start = self.inputs[b : b + 1]
        self.page_table = self.inputs[b + 1 :]
        width = len(drafter.state_layers) * drafter.config.shape.hidden_size
        rows = max(MAX_STEP, CATCH_UP_SIZES[0])
        self.states = torch.zeros(rows, width, dtype=drafter.fc.weight.dtype, device=device)
        self.offsets = torch.arange(rows, device=device)
        # new states a pass drafted ahead takes in (run_ahead), set on the device
        self.count = torch.ones(1, dtype=torch.long, device=device)
        self.loaded = torch.cuda.Event()
        self.mempool = mempool
        self.graphs: dict[int, tuple] = {}

    @torch.inference_mode()
    def run(
        self, states: list[torch.Tensor], anchor: int | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Extend the context by `states` (in order), draft the block after `anchor` (a token id or
        a [1] device tensor): (logits [B-1, V], drafts [B-1]), the graph's static outputs (read
        them before the next pass)."""
        drafter, seq = self.drafter, self.drafter.seq
        n = sum(s.shape[0] for s in states)
        if n > MAX_STEP:  # the pass takes the last 1..16, context-only graphs the rest first
            if isinstance(anchor, torch.Tensor):  # it may sit in memory those replays reuse
                anchor = anchor.clone()
            pending = torch.cat(states)
            head = n - (n % MAX_STEP or MAX_STEP)
            self.extend(pending[:head])
            states, n = [pending[head:]], n - head
        graph, outputs = self._graph(n)
        start = seq.length
        seq.append(n + drafter.block_size)  # pages for the new states and the block
        self._load(seq.pages, start, anchor)
        row = 0
        for s in states:  # device to device, behind the target's step that wrote them
            self.states[row : row + s.shape[0]].copy_(s)
            row += s.shape[0]
        graph.replay()
        seq.truncate(start + n)  # the block's K/V are not context
        return outputs

    @torch.inference_mode()
    def run_ahead(self, states: torch.Tensor, accepted: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """The pass of DFlashDrafter.draft_ahead as one replay: the count of new states and the
        anchor come from the device, so the host queues it behind the verify step without reading
        that step. The graph takes in a whole step's worth of rows (MAX_STEP) and starts the
        block at start + accepted + 1. The drafts [B-1], a copy (the graph's own output sits in
        the target's memory pool, which the verify step replayed next may reuse)."""
        drafter, seq = self.drafter, self.drafter.seq
        graph, (logits, drafts) = self._graph("ahead")
        start = seq.length
        seq.append(MAX_STEP + drafter.block_size)  # settle() gives back what the context does not keep
        self._load(seq.pages, start, anchor)
        self.count.copy_(accepted.view(1) + 1)
        self.states[: states.shape[0]].copy_(states)
        graph.replay()
        # read from the logits before the verify step replayed next may reuse their memory
        drafter.ahead_sure = drafter.sure_of(logits)
        return drafts.clone()

    @torch.inference_mode()
    def extend(self, states: torch.Tensor) -> None:
        """Take states [n, ...] into the context, drafting nothing: context-only replays."""
        seq, row = self.drafter.seq, 0
        for size in catch_up_sizes(states.shape[0]):
            graph, _ = self._graph(("context", size))
            start = seq.length
            seq.append(size)
            self._load(seq.pages, start)
            self.states[:size].copy_(states[row : row + size])
            graph.replay()
            row += size

    def _load(self, pages: list[int], start: int, anchor: int | torch.Tensor | None = None) -> None:
        """One host-to-device copy of the pass's inputs (the anchor too, unless it is on the device
        or there is none: a context-only replay)."""
        self.loaded.synchronize()  # the previous copy has left the pinned buffer
        h = self.host_view
        h[: self.start_index] = self.drafter.mask_token_id
        on_device = isinstance(anchor, torch.Tensor)
        if anchor is not None and not on_device:
            h[0] = anchor
        h[self.start_index] = start
        h[self.pages_index : self.pages_index + len(pages)] = pages
        self.inputs.copy_(self.host, non_blocking=True)
        self.loaded.record()
        if on_device:
            self.ids[:1].copy_(anchor.view(-1)[-1:])

    def warm_up(self) -> int:
        """Capture the pass for every count of new states (0..MAX_STEP) and the context-only
        graphs now; how many were new."""
        keys = [*range(MAX_STEP + 1), "ahead", *(("context", size) for size in CATCH_UP_SIZES)]
        new = [key for key in keys if key not in self.graphs]
        for key in new:
            self._graph(key)
        return len(new)

    def _graph(self, key: int | str | tuple[str, int]):
        """The pass taking in n new states (key n), the pass drafted ahead ("ahead": the count on
        the device), or the context-only graph of n (("context", n))."""
        if key not in self.graphs:
            self.graphs[key] = self._capture(lambda: self._body(key))
        return self.graphs[key]

    def _body(self, key: int | str | tuple[str, int]):
        drafter = self.drafter
        if key == "ahead":  # rows past the count are overwritten by the block (draft_ahead)
            drafter._extend(self.states[:MAX_STEP], self.start + self.offsets[:MAX_STEP], self.page_table)
            logits = drafter._fused_block(self.ids, self.start + self.count, self.page_table)
            return logits, drafter.drafts_of(logits)
        context_only = isinstance(key, tuple)
        n = key[1] if context_only else key
        if n:
            drafter._extend(self.states[:n], self.start + self.offsets[:n], self.page_table)
        if context_only:
            return None
        logits = drafter._fused_block(self.ids, self.start + n, self.page_table)
        return logits, drafter.drafts_of(logits)

    def _capture(self, body):
        """Warm up (compiles the kernels) and capture `body`, both on scratch inputs: start 0 and
        every page the scratch page, so nothing the live context owns is written."""
        h = self.host_view
        self.loaded.synchronize()
        h[:] = 0
        h[self.pages_index :] = self.scratch_page
        self.inputs.copy_(self.host)
        self.count.fill_(1)  # the pass drafted ahead writes within the scratch page too
        return capture(body, self.mempool)
