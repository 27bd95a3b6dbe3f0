"""Hidden states of tokens already in a sequence's cache, for a DFlash drafter switched in
mid-reply, or one that let the target stop keeping them while it sat out.

The target's states of past tokens were not kept, so they are computed again: the tokens run
in chunks, each attending to the sequence's cached K/V before it. A chunk's own K/V go to
scratch pages, so the sequence's cache is left exactly as it was. On the triton backend a chunk
runs through the fused layers (a few hundred launches, where op by op it takes thousands): their
page table is the sequence's pages before the chunk, then scratch pages, the page the chunk
starts inside copied to scratch first, so no write lands in the sequence's own pages.
"""

from __future__ import annotations

import torch

from engine.errors import EngineError
from engine.limits import MAX_STEP
from engine.runtime.kv_cache import SeqCache, page_slots
from engine.runtime.step_io import StepContext

CHUNK = 256


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
            out.append(run(model, seq, scratch, ids[done : done + n], start,
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
    whole = start // ps  # the sequence's pages wholly before the chunk
    scratch.append(start % ps + t)  # the head of the page the chunk starts inside, then the chunk
    if start % ps:
        src, dst = seq.pages[whole] * ps, scratch.pages[0] * ps
        pool.k[:, dst : dst + ps] = pool.k[:, src : src + ps]
        pool.v[:, dst : dst + ps] = pool.v[:, src : src + ps]
    pages = seq.pages[:whole] + scratch.pages
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
