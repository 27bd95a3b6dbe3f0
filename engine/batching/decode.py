"""Batched decoding: many prompts, decode steps over a batch of sequences, in runs of a few steps.

    results = generate_batch(model, prompts, SamplingParams(temperature=0.7), stop_ids, batch_size=64)

The loop is continuous batching: up to `batch_size` sequences run together; a sequence that
ends (a stop id, its token budget, the context) gives its KV pages back at once and a waiting
prompt is prefilled into its place, so the batch stays full while prompts remain. The host
looks at the batch once per run of up to RUN_STEPS steps (engine/batching/rows.py): it admits
and retires sequences between runs, never inside one.

Each sequence samples with its own seed (by default the sampling seed + its index) and the
counter-based noise of each token's position, so its tokens are those `generate` gives it alone
with that seed (with speculative=None): they do not depend on the batch around it. Sequences of
one run share the other sampling settings.

The batch's KV cache is a page pool of its own, sized for `batch_size` sequences of the longest
prompt plus the token budget and a run; the model's own pool, which the chat uses, is left alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from engine.batching.graphs import BatchGraphs
from engine.batching.rows import Finished, Rows
from engine.batching.steps import EagerRuns
from engine.batching.times import BatchTimes
from engine.errors import EngineError
from engine.runtime.kv_cache import PagePool, SeqCache
from engine.runtime.sampling import SamplingParams, sample
from engine.runtime.step_io import BatchLayout, PaddedPrompts, StepContext

PREFILL_TOKENS = 8192  # prompt tokens packed into one prefill forward
RUN_STEPS = 8  # decode steps per host wait: the host reads tokens back once per run


class BatchDecoder:
    """A model's batched decoding: the page pool for `batch_size` sequences of up to
    `max_length` positions, and on CUDA the decode runs' graphs (kept between runs).

    Decoding goes in runs of up to `run_steps` steps with no host work between them; a
    sequence that ends inside a run keeps its tokens up to its end, and the steps it ran past
    it are dropped (each sequence still gets exactly its own batch-1 tokens)."""

    def __init__(self, model, batch_size: int, max_length: int, run_steps: int = RUN_STEPS):
        if batch_size < 1:
            raise EngineError(f"batch size must be at least 1, got {batch_size}")
        if run_steps < 1:
            raise EngineError(f"steps per run must be at least 1, got {run_steps}")
        self.model = model
        self.batch_size = batch_size
        self.max_length = max_length
        self.run_steps = run_steps
        cfg = model.config
        page_size = model.pool.page_size
        # a sequence may run up to run_steps - 1 steps past its end before the host sees it
        self.max_pages = -(-(max_length + run_steps) // page_size)
        graphed = model.graphs is not None
        self.pool = PagePool(cfg.num_layers, batch_size * self.max_pages + graphed, page_size, cfg.num_kv_heads,
                             cfg.head_dim, model.dtype, model.device)
        if graphed:
            self.runs = BatchGraphs(model, self.pool, batch_size, self.max_pages, run_steps)
        else:
            self.runs = EagerRuns(model, self.pool)

    @torch.inference_mode()
    def run(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        stop_ids: Sequence[int] = (),
        seeds: Sequence[int] | None = None,
        on_finish: Callable[[Finished], None] | None = None,
        times: BatchTimes | None = None,
    ) -> list[Finished]:
        """Every prompt's reply, in the prompts' order; `on_finish` hears each as it ends;
        `times` (if given) adds up where the time went."""
        self.times = times if times is not None else BatchTimes()
        seeds = list(seeds) if seeds is not None else [sampling.seed + i for i in range(len(prompts))]
        if len(seeds) != len(prompts):
            raise EngineError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        for i, prompt in enumerate(prompts):
            self._check(i, prompt, sampling)
        done: dict[int, Finished] = {}
        waiting = deque(range(len(prompts)))
        rows = Rows(self.batch_size, self.max_pages, sampling.max_tokens + self.run_steps, stop_ids)
        while waiting or rows.count:
            admitted = [waiting.popleft() for _ in range(min(len(waiting), self.batch_size - rows.count))]
            self._prefill(rows, prompts, admitted, seeds, sampling)
            self._retire(rows, done, on_finish)
            if rows.count:
                self._decode(rows, min(self.run_steps, rows.steps_left()), sampling)
                self._retire(rows, done, on_finish)
        return [done[i] for i in range(len(prompts))]

    def _check(self, i: int, prompt: Sequence[int], sampling: SamplingParams) -> None:
        if not prompt:
            raise EngineError(f"prompt {i} is empty")
        if len(prompt) + 1 > self.model.max_context:
            raise EngineError(f"prompt {i} has {len(prompt)} tokens: over this model's "
                              f"{self.model.max_context}-token context")
        if min(len(prompt) + sampling.max_tokens, self.model.max_context) > self.max_length:
            raise EngineError(f"prompt {i} and its {sampling.max_tokens} new tokens need more than the "
                              f"{self.max_length} positions this batch's cache holds per sequence")

    def _prefill(self, rows: Rows, prompts, admitted: list[int], seeds: list[int], sampling) -> None:
        """Run the admitted prompts, packed a few thousand tokens at a time, and sample each
        one's first token into a new row."""
        chunk, tokens = [], 0
        for i in admitted:
            if chunk and tokens + len(prompts[i]) > PREFILL_TOKENS:
                self._prefill_chunk(rows, prompts, chunk, seeds, sampling)
                chunk, tokens = [], 0
            chunk.append(i)
            tokens += len(prompts[i])
        if chunk:
            self._prefill_chunk(rows, prompts, chunk, seeds, sampling)

    def _prefill_chunk(self, rows: Rows, prompts, chunk: list[int], seeds: list[int], sampling) -> None:
        model = self.model
        device = model.device
        counts = [len(prompts[i]) for i in chunk]
        caches = [SeqCache(self.pool) for _ in chunk]
        for cache, n in zip(caches, counts):
            cache.append(n)
        with self.times.prefill(sum(counts)):
            ids = torch.tensor([t for i in chunk for t in prompts[i]], dtype=torch.long, device=device)
            positions = torch.cat([torch.arange(n) for n in counts]).to(device)
            hidden = model.decoder(ids, positions, self._prefill_context(caches, counts))
            last = torch.tensor(counts, device=device).cumsum(0) - 1
            logits = model.decoder.logits(hidden[last])
            # the token after the prompt's last position p is drawn with the noise of p + 1
            firsts = sample(logits, torch.tensor(counts, device=device), sampling,
                            seeds=torch.tensor([seeds[i] for i in chunk], device=device)).tolist()
        for i, cache, n, first in zip(chunk, caches, counts, firsts, strict=True):
            # a sequence ends by length at its budget, or when its latest token has no position left
            limit = min(sampling.max_tokens, model.max_context + 1 - n)
            rows.add(i, seeds[i], cache, first, limit)

    def _prefill_context(self, caches: list[SeqCache], counts: list[int]) -> StepContext:
        """Where the packed prompts write their K/V and find their context (themselves)."""
        device, pool = self.model.device, self.pool
        contexts = [c.slots(0, c.length).to(device) for c in caches]
        padded = None
        # one attention call over the prompts padded to the longest, unless padding would more
        # than double the work (a long prompt among short ones: then one call per prompt)
        if len(counts) > 1 and len(counts) * max(counts) <= 2 * sum(counts):
            padded = PaddedPrompts.of(counts, torch.cat(contexts))
        layout = BatchLayout(None, counts, contexts, padded)
        if self.model.backend == "torch":
            return StepContext(pool, torch.cat(contexts), None, batch=layout)
        table = torch.zeros(len(caches), max(len(c.pages) for c in caches), dtype=torch.long)
        for b, c in enumerate(caches):
            table[b, : len(c.pages)] = torch.tensor(c.pages)
        layout.rows = torch.repeat_interleave(torch.arange(len(caches)), torch.tensor(counts)).to(device)
        first = torch.zeros(len(caches), dtype=torch.long)
        return StepContext(pool, None, None, True, "triton", table.to(device), first.to(device), batch=layout)

    def _decode(self, rows: Rows, n: int, sampling) -> None:
        """A run of n steps: every row's latest token, at its position, samples the next, n times."""
        ids, positions, seeds, table = rows.start_run(n)
        with self.times.decode(rows.count, n):
            tokens = self.runs.run(ids, positions, seeds, table, n, sampling)
        rows.take(tokens)

    def _retire(self, rows: Rows, done: dict, on_finish) -> None:
        """Sequences that ended give their pages back; the rest keep running."""
        for finished in rows.retire():
            done[finished.index] = finished
            self.times.ended(len(finished.tokens))
            if on_finish is not None:
                on_finish(finished)


def generate_batch(
    model,
    prompts: Sequence[Sequence[int]],
    sampling: SamplingParams | None = None,
    stop_ids: Sequence[int] = (),
    max_tokens: int | None = None,
    batch_size: int = 64,
    seeds: Sequence[int] | None = None,
    on_finish: Callable[[Finished], None] | None = None,
    times: BatchTimes | None = None,
) -> list[Finished]:
    """Every prompt's reply (token ids, why it ended), in order. max_tokens overrides the
    sampling's; seeds give each prompt its own (default: sampling.seed + the prompt's index);
    `times` adds up where the time went (prefill, decode runs, the host between them)."""
    sampling = sampling or SamplingParams()
    if max_tokens is not None:
        sampling = replace(sampling, max_tokens=max_tokens)
    if not prompts:
        return []
    longest = max(len(p) for p in prompts)
    max_length = min(longest + sampling.max_tokens, model.max_context)
    decoder = BatchDecoder(model, min(batch_size, len(prompts)), max_length)
    return decoder.run(prompts, sampling, stop_ids, seeds, on_finish, times)
