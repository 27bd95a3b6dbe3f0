"""Hidden states of tokens already in a sequence's cache, for a DFlash drafter switched in
mid-reply, or one that let the target stop keeping them while it sat out.

The target's states of past tokens were not kept, so they are computed again: the tokens run
in chunks, each attending to the sequence's cached K/V before it. A chunk's own K/V go to
scratch pages, so the sequence's cache is left exactly as it was. On the triton backend a chunk
runs through the fused layers (a few hundred launches, where op by op it takes thousands): their
page table is the sequence's pages before the chunk, then scratch pages, the page the chunk
starts inside copied to scratch first, so no write lands in the sequence's own pages. With the
model's CUDA graphs, a chunk is instead replays of its step graphs, 16 tokens each, over that
same page table (`StepGraphs.states`): some 1.5 ms a replay on the H200's Coder-1.5B shape, 0.095
ms a token, where a pass op by op is bound by its host's launches (0.16 ms a token at 256 and 512).
"""

from __future__ import annotations

import torch

from engine.errors import EngineError
from engine.limits import MAX_STEP
from engine.runtime.kv_cache import SeqCache, page_slots
from engine.runtime.step_io import StepContext

CHUNK = 256
# Tokens a chunk runs through step graphs, at most: every chunk, since replays were the quicker at
# every length measured (H200, Qwen2.5-1.5B shape: 2.9 ms for 32 tokens, 12.2 for 128, where op
# by op 256 took 41 and 512 took 80; bench/gpu/dflash_costs.py, eighteenth run).
GRAPHED = CHUNK
# A chunk run op by op costs some 20 plain steps of the target, bound by its host's launches:
# 26-33 ms for 32-128 tokens, 62 for 512 on the H200's Coder-1.5B (sixteenth run).
EAGER_STEPS = 20


def replayed(model, n: int) -> bool:
    """Whether a chunk of n tokens runs as replays of the model's step graphs."""
    return model.backend == "triton" and model.graphs is not None and n <= GRAPHED


def recompute_seconds(model, tokens: int, step_cost) -> float:
    """A first guess of what computing `tokens` states again costs, chunk by chunk as
    context_states runs them: a step graph's replay (step_cost(MAX_STEP)) per MAX_STEP tokens of a
    graphed chunk, EAGER_STEPS plain steps for one run op by op. step_cost: seconds of a step of n."""
    seconds = 0.0
    while tokens > 0:
        n = min(CHUNK, tokens)
        if replayed(model, n):
            seconds += -(-n // MAX_STEP) * step_cost(MAX_STEP)
        else:
            seconds += EAGER_STEPS * step_cost(1)
        tokens -= n
    return seconds


@torch.inference_mode()
def context_states(model, seq: SeqCache, ids: list[int], first: int = 0,
                   layers: tuple[int, ...] | None = None) -> torch.Tensor:
    """The states at `layers` (default model.state_layers) [len(ids), n * H] of ids, the tokens
    of seq from position `first` on."""
    assert first + len(ids) <= seq.length, (first, len(ids), seq.length)
    run = run_paged if model.backend == "triton" else run_chunk
    ps = model.pool.page_size
    scratch = model.new_sequence()
    out, done = [], 0
    try:
        while done < len(ids):
            # a chunk fits the free pages (the scratch's own given back first); on the triton
            # backend the scratch also holds the head of the page the chunk starts inside
            scratch.truncate(0)
            start = first + done
            room = model.pool.num_free * ps - (start % ps if run is run_paged else 0)
            n = min(CHUNK, room, len(ids) - done)
            if n <= 0:
                raise EngineError(
                    "KV cache full: no room to read the context's hidden states for DFlash "
                    "(start a new chat or raise --max-context)"
                )
            how = run_graphed if replayed(model, n) else run
            out.append(how(model, seq, scratch, ids[done : done + n], start,
                           model.state_layers if layers is None else layers))
            done += n
    finally:
        scratch.release()
    return torch.cat(out)


def run_chunk(model, seq: SeqCache, scratch: SeqCache, ids: list[int], start: int,
              layers: tuple[int, ...]) -> torch.Tensor:
    """The chunk at `start` op by op, its K/V in the (empty) scratch's own slots."""
    scratch.append(len(ids))
    own = scratch.slots(0, len(ids))
    slots = torch.cat([seq.slots(0, start), own]).to(model.device)
    ctx = StepContext(model.pool, own.to(model.device), slots)
    positions = torch.arange(start, start + len(ids), device=model.device)
    tokens = torch.tensor(ids, dtype=torch.long, device=model.device)
    _, states = model.decoder(tokens, positions, ctx, state_layers=layers)
    return states


def run_paged(model, seq: SeqCache, scratch: SeqCache, ids: list[int], start: int,
              layers: tuple[int, ...]) -> torch.Tensor:
    """run_chunk through the fused layers: a step of len(ids) tokens at `start` whose page table
    reads the sequence's pages before it and writes the (empty) scratch's pages only."""
    pool, ps, t = model.pool, model.pool.page_size, len(ids)
    pages = scratch_table(model, seq, scratch, start, t)
    slots = None
    if t > MAX_STEP:  # longer steps gather their context by slot (Model.context)
        slots = page_slots(pages, 0, start + t, ps).to(model.device)
    device = model.device
    ctx = StepContext(pool, None, slots, True, "triton", torch.tensor(pages, dtype=torch.long, device=device),
                      torch.tensor([start], dtype=torch.long, device=device), model.invariant_chunk)
    positions = torch.arange(start, start + t, device=device)
    tokens = torch.tensor(ids, dtype=torch.long, device=device)
    _, states = model.decoder(tokens, positions, ctx, state_layers=layers)
    return states


def run_graphed(model, seq: SeqCache, scratch: SeqCache, ids: list[int], start: int,
                layers: tuple[int, ...]) -> torch.Tensor:
    """run_paged as replays of the model's step graphs, MAX_STEP tokens each, over its page table:
    each replay reads the K/V the ones before it wrote to the scratch pages."""
    pages = scratch_table(model, seq, scratch, start, len(ids))
    return torch.cat([model.graphs.states(pages, start + i, ids[i : i + MAX_STEP], layers)
                      for i in range(0, len(ids), MAX_STEP)])


def scratch_table(model, seq: SeqCache, scratch: SeqCache, start: int, t: int) -> list[int]:
    """The page table of a chunk of t tokens at `start`: the sequence's pages wholly before it,
    then the (empty) scratch's, holding a copy of the head of the page the chunk starts inside."""
    pool, ps = model.pool, model.pool.page_size
    whole = start // ps  # the sequence's pages wholly before the chunk
    scratch.append(start % ps + t)  # the head of the page the chunk starts inside, then the chunk
    if start % ps:
        src, dst = seq.pages[whole] * ps, scratch.pages[0] * ps
        pool.k[:, dst : dst + ps] = pool.k[:, src : src + ps]
        pool.v[:, dst : dst + ps] = pool.v[:, src : src + ps]
    return seq.pages[:whole] + scratch.pages
