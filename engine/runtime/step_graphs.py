"""CUDA graphs of a model's steps: decode (1 token) and verify (2..16 tokens), and a draft chain.

A step's inputs live in one static device buffer, filled by one host-to-device copy:

    [ ids (16) | start | chain counter | page table (every page of the pool) ]

The graph of a T-token step reads ids[:T], derives positions and the context length from
`start`, finds K/V through the page table, and ends with sampling, so its outputs (tokens,
logits, tapped states) stay on the device until the caller reads the tokens. Graphs are
captured on first use, per (length, sampling settings, noise stream), into one memory pool.
Sampling settings are baked into a graph: a few settings' graphs are kept, the oldest dropped.
Sharing the pool means a graph's outputs may sit where a graph captured before it keeps its
intermediates, so any replay (a chain's too) may overwrite the outputs of the step before it:
callers copy out what they still need before the model's next step or chain.

The chain graph is one one-token step that takes its input token from the previous replay's
sample (chain_ids[counter]) and advances start and counter itself, so k - 1 draft steps (or a
run of plain decoding steps) are replays with nothing between them on the host. With hidden-state
taps (a DFlash drafter attached) each replay also keeps its token's states, so a run of plain
steps still hands the drafter every token's states.
"""

from __future__ import annotations

import gc
from collections import OrderedDict

import torch

from engine.limits import MAX_STEP
from engine.runtime.sampling import GREEDY, TOKEN, SamplingParams, sample
from engine.runtime.step_io import StepContext, StepOutput

START = 16  # index of the step's first position in the input buffer (after 16 ids)
COUNTER = 17
PAGES = 18  # the page table starts here
KEPT_SETTINGS = 3  # sampled settings whose graphs are kept (greedy ones always are)


def settings_key(sampling: SamplingParams):
    if sampling.greedy:
        return "greedy"
    return (sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed)


class StepGraphs:
    def __init__(self, model):
        self.model = model
        device = model.device
        pool = model.pool
        # the last page is never handed out: capture warm-ups write their K/V there
        self.scratch_page = pool.free.pop()
        self.host = torch.zeros(PAGES + pool.num_pages, dtype=torch.long).pin_memory()
        self.host_view = self.host.numpy()
        self.inputs = torch.zeros(self.host.shape, dtype=torch.long, device=device)
        self.ids = self.inputs[:MAX_STEP]
        self.start = self.inputs[START : START + 1]
        self.counter = self.inputs[COUNTER : COUNTER + 1]
        self.page_table = self.inputs[PAGES:]
        self.offsets = torch.arange(MAX_STEP, device=device)
        self.chain_ids = torch.zeros(MAX_STEP + 1, dtype=torch.long, device=device)
        self.chain_logits = torch.zeros(MAX_STEP, model.config.vocab_size, dtype=torch.float32, device=device)
        self.chain_states: dict[tuple[int, ...], torch.Tensor] = {}  # per set of taps: [MAX_STEP, n * H]
        self.loaded = torch.cuda.Event()
        self.mempool = torch.cuda.graph_pool_handle()
        self.graphs: dict = {}
        self.settings: OrderedDict = OrderedDict()  # sampled settings in use, oldest first
        self.last = None  # the graph of the latest step (the step bench replays it)

    def step(self, seq, ids, sampling: SamplingParams, last_only: bool, noise: int):
        t = len(ids)
        self.model.check_room(seq, t)
        graph, (tokens, logits, states) = self._graph(("step", t, tuple(self.model.state_layers)),
                                                        sampling, noise)
        start = seq.length
        seq.append(t)
        self._load(seq.pages, start, ids)
        graph.replay()
        self.last = graph
        if last_only:
            tokens, logits = tokens[-1:], logits[-1:]
        return StepOutput(tokens, logits, states)

    def chain(self, seq, first: torch.Tensor, n: int, sampling: SamplingParams, noise: int):
        self.model.check_room(seq, n)
        layers = tuple(self.model.state_layers)
        graph, _ = self._graph(("chain", layers), sampling, noise)
        start = seq.length
        seq.append(n)
        self._load(seq.pages, start, None)
        self.chain_ids[:1].copy_(first.view(-1)[-1:])
        for _ in range(n):
            graph.replay()
        states = self.chain_states[layers][:n] if layers else None
        return StepOutput(self.chain_ids[1 : n + 1], self.chain_logits[:n], states)

    def states(self, pages: list[int], start: int, ids: list[int], layers: tuple[int, ...]) -> torch.Tensor:
        """The states at `layers` [len(ids), n * H] of a step of ids (1..MAX_STEP tokens) at `start`
        over the page table `pages`, by one replay of that step's graph; its K/V land in those pages
        and no sequence grows (context_states: the pages past the sequence's own are scratch ones).
        Any sampling settings' graph does, its tokens unread (the noise is a hash of the position:
        a replay moves no generator), so the reply's own graphs serve; greedy's is captured if none."""
        shape = ("step", len(ids), tuple(layers))
        key = next((key for key in self.graphs if key[:3] == shape), None)
        graph, (_, _, states) = self.graphs[key] if key is not None else self._graph(shape, GREEDY, TOKEN)
        self._load(pages, start, ids)
        graph.replay()
        return states.clone()  # the graph's buffer: the next replay writes it

    def warm_up(
        self, sampling: SamplingParams, noise: int, state_layers: tuple[int, ...] = (), progress=None
    ) -> int:
        """Capture now every graph a reply with these settings can replay: steps of 1..MAX_STEP
        tokens (decode, verify, a draft model's catch-up) and the decode chain. Returns how many
        were new (the rest were captured before). `progress("capturing CUDA graphs 3/17")` after each."""
        layers = tuple(state_layers)
        shapes = [("step", t, layers) for t in range(1, MAX_STEP + 1)] + [("chain", layers)]
        new = [s for s in shapes if (*s, settings_key(sampling), noise) not in self.graphs]
        for done, shape in enumerate(new, 1):
            self._graph(shape, sampling, noise)
            if progress is not None:
                progress(f"capturing CUDA graphs {done}/{len(new)}")
        return len(new)

    def _load(self, pages: list[int], start: int, ids) -> None:
        """One host-to-device copy of the step's inputs (ids too, unless they are on the device)."""
        self.loaded.synchronize()  # the previous copy has left the pinned buffer
        h = self.host_view
        on_device = isinstance(ids, torch.Tensor) and ids.device.type == "cuda"
        if ids is not None and not on_device:
            h[: len(ids)] = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        h[START] = start
        h[COUNTER] = 0
        h[PAGES : PAGES + len(pages)] = pages
        self.inputs.copy_(self.host, non_blocking=True)
        self.loaded.record()
        if on_device:
            self.ids[: len(ids)].copy_(ids)

    def _graph(self, shape: tuple, sampling: SamplingParams, noise: int):
        key = (*shape, settings_key(sampling), noise)
        if key not in self.graphs:
            self._keep(settings_key(sampling))
            body = self._chain_body if shape[0] == "chain" else self._step_body
            self.graphs[key] = self._capture(lambda: body(shape, sampling, noise))
        return self.graphs[key]

    def _keep(self, settings) -> None:
        if settings == "greedy":
            return
        self.settings[settings] = None
        self.settings.move_to_end(settings)
        while len(self.settings) > KEPT_SETTINGS:
            old, _ = self.settings.popitem(last=False)
            for key in [k for k in self.graphs if k[-2] == old]:
                del self.graphs[key]

    def _context(self) -> StepContext:
        model = self.model
        return StepContext(model.pool, None, None, True, "triton", self.page_table, self.start,
                           model.invariant_chunk)

    def _step_body(self, shape, sampling, noise):
        _, t, state_layers = shape
        decoder = self.model.decoder
        positions = self.start + self.offsets[:t]
        out = decoder(self.ids[:t], positions, self._context(), state_layers=state_layers)
        hidden, states = out if state_layers else (out, None)
        logits = decoder.logits(hidden)
        return sample(logits, positions + 1, sampling, noise), logits, states

    def _chain_body(self, shape, sampling, noise):
        _, state_layers = shape
        decoder = self.model.decoder
        positions = self.start + self.offsets[:1]
        ids = self.chain_ids.index_select(0, self.counter)
        out = decoder(ids, positions, self._context(), state_layers=state_layers)
        hidden, states = out if state_layers else (out, None)
        logits = decoder.logits(hidden)
        token = sample(logits, positions + 1, sampling, noise)
        self.chain_ids.index_copy_(0, self.counter + 1, token)
        self.chain_logits.index_copy_(0, self.counter, logits)
        if states is not None:
            # made by the warm-up run that precedes the capture, outside the graph pool: only the
            # next chain with these taps writes it
            kept = self.chain_states.get(state_layers)
            if kept is None:
                kept = self.chain_states[state_layers] = states.new_zeros(MAX_STEP, states.shape[-1])
            kept.index_copy_(0, self.counter, states)
        self.start.add_(1)
        self.counter.add_(1)
        return None, None, None

    def _capture(self, body):
        """Warm up (compiles the kernels) and capture `body`, both on scratch inputs: start 0 and
        every page the scratch page, so nothing a live sequence owns is written."""
        h = self.host_view
        self.loaded.synchronize()
        h[:] = 0
        h[PAGES:] = self.scratch_page
        self.inputs.copy_(self.host)
        return capture(body, self.mempool)


def capture(body, mempool):
    """(graph, outputs): `body` run once on a side stream (compiles kernels, settles the
    allocator), then captured into `mempool`. Its inputs must already hold scratch values.

    The garbage collector is held off during the capture: an object dropped in a reference
    cycle (a drafter switched away from, with its pinned input buffer, events and graphs) is
    freed whenever the collector runs, freeing it makes CUDA calls, and a call that is not
    allowed while a capture is under way invalidates the capture. No collection is forced
    before it: a full collection in a process as large as the chat app's would cost time at
    each first use of a step length."""
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    collecting = gc.isenabled()
    gc.disable()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=mempool):
            outputs = body()
    finally:
        if collecting:
            gc.enable()
    return graph, outputs
