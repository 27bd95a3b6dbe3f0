"""Batched decoding: many prompts, one decode step over a batch of sequences at a time.

    results = generate_batch(model, prompts, SamplingParams(temperature=0.7), stop_ids, batch_size=64)

The loop is continuous batching: up to `batch_size` sequences run together; a sequence that
ends (a stop id, its token budget, the context) gives its KV pages back at once and a waiting
prompt is prefilled into its place, so the batch stays full while prompts remain.

Each sequence samples with its own seed (by default the sampling seed + its index) and the
counter-based noise of each token's position, so its tokens are those `generate` gives it alone
with that seed (with speculative=None): they do not depend on the batch around it. Sequences of
one run share the other sampling settings.

The batch's KV cache is a page pool of its own, sized for `batch_size` sequences of the longest
prompt plus the token budget; the model's own pool, which the chat uses, is left alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from engine.batching.graphs import BatchGraphs
from engine.errors import EngineError
from engine.runtime.kv_cache import PagePool, SeqCache
from engine.runtime.sampling import SamplingParams, sample_rows
from engine.runtime.step_io import BatchLayout, StepContext

PREFILL_TOKENS = 8192  # prompt tokens packed into one prefill forward


@dataclass
class Finished:
    index: int  # the prompt's place in the list given
    tokens: list[int]  # the reply, a stop id that ended it included
    reason: str  # "stop" or "length" (its token budget, or the model's context)


@dataclass
class Running:
    index: int
    prompt_length: int
    seed: int
    cache: SeqCache
    tokens: list[int] = field(default_factory=list)


class BatchDecoder:
    """A model's batched decoding: the page pool for `batch_size` sequences of up to
    `max_length` positions, and on CUDA the decode steps' graphs (kept between runs)."""

    def __init__(self, model, batch_size: int, max_length: int):
        if batch_size < 1:
            raise EngineError(f"batch size must be at least 1, got {batch_size}")
        self.model = model
        self.batch_size = batch_size
        self.max_length = max_length
        cfg = model.config
        page_size = model.pool.page_size
        pages = batch_size * -(-max_length // page_size)
        graphed = model.graphs is not None
        self.pool = PagePool(cfg.num_layers, pages + graphed, page_size, cfg.num_kv_heads, cfg.head_dim,
                             model.dtype, model.device)
        self.graphs = None
        if graphed:
            self.graphs = BatchGraphs(model, self.pool, batch_size, -(-max_length // page_size))

    @torch.inference_mode()
    def run(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        stop_ids: Sequence[int] = (),
        seeds: Sequence[int] | None = None,
        on_finish: Callable[[Finished], None] | None = None,
    ) -> list[Finished]:
        """Every prompt's reply, in the prompts' order; `on_finish` hears each as it ends."""
        seeds = list(seeds) if seeds is not None else [sampling.seed + i for i in range(len(prompts))]
        if len(seeds) != len(prompts):
            raise EngineError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        for i, prompt in enumerate(prompts):
            self._check(i, prompt, sampling)
        stop = set(stop_ids)
        done: dict[int, Finished] = {}
        waiting, running = deque(range(len(prompts))), []
        while waiting or running:
            admitted = [waiting.popleft() for _ in range(min(len(waiting), self.batch_size - len(running)))]
            running += self._prefill(prompts, admitted, seeds, sampling)
            running = self._retire(running, sampling, stop, done, on_finish)
            if running:
                self._decode(running, sampling)
                running = self._retire(running, sampling, stop, done, on_finish)
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

    def _prefill(self, prompts, admitted: list[int], seeds: list[int], sampling) -> list[Running]:
        """Run the admitted prompts, packed a few thousand tokens at a time, and sample each
        one's first token."""
        started, chunk, tokens = [], [], 0
        for i in admitted:
            if chunk and tokens + len(prompts[i]) > PREFILL_TOKENS:
                started += self._prefill_chunk(prompts, chunk, seeds, sampling)
                chunk, tokens = [], 0
            chunk.append(i)
            tokens += len(prompts[i])
        if chunk:
            started += self._prefill_chunk(prompts, chunk, seeds, sampling)
        return started

    def _prefill_chunk(self, prompts, chunk: list[int], seeds: list[int], sampling) -> list[Running]:
        model = self.model
        seqs = [Running(i, len(prompts[i]), seeds[i], SeqCache(self.pool)) for i in chunk]
        counts = [s.prompt_length for s in seqs]
        for s in seqs:
            s.cache.append(s.prompt_length)
        ids = torch.tensor([t for i in chunk for t in prompts[i]], dtype=torch.long, device=model.device)
        hidden = model.decoder(ids, self._positions(seqs, counts), self._context(seqs, counts))
        last = torch.tensor(counts, device=model.device).cumsum(0) - 1
        logits = model.decoder.logits(hidden[last])
        tokens = self._sample(logits, seqs, sampling).tolist()
        for s, token in zip(seqs, tokens, strict=True):
            s.tokens.append(token)
        return seqs

    def _decode(self, running: list[Running], sampling) -> None:
        """One step: every running sequence's latest token, at its position, samples the next."""
        for s in running:
            s.cache.append(1)
        if self.graphs is not None:
            tokens = self.graphs.step(running, sampling)
        else:
            model = self.model
            counts = [1] * len(running)
            ids = torch.tensor([s.tokens[-1] for s in running], device=model.device)
            logits = model.decoder.logits(model.decoder(ids, self._positions(running, counts),
                                                        self._context(running, counts)))
            tokens = self._sample(logits, running, sampling)
        for s, token in zip(running, tokens.tolist(), strict=True):
            s.tokens.append(token)

    def _retire(self, running: list[Running], sampling, stop: set[int], done, on_finish) -> list[Running]:
        """Sequences that ended give their pages back; the rest keep running."""
        kept = []
        for s in running:
            reason = None
            if s.tokens[-1] in stop:
                reason = "stop"
            elif len(s.tokens) >= sampling.max_tokens or s.prompt_length + len(s.tokens) > self.model.max_context:
                reason = "length"  # the budget, or the context: the latest token could not be run
            if reason is None:
                kept.append(s)
                continue
            s.cache.release()
            done[s.index] = Finished(s.index, s.tokens, reason)
            if on_finish is not None:
                on_finish(done[s.index])
        return kept

    def _sample(self, logits: torch.Tensor, seqs: list[Running], sampling) -> torch.Tensor:
        # the token after the latest position p of each sequence is drawn with the noise of p + 1
        device = logits.device
        positions = torch.tensor([s.cache.length for s in seqs], device=device)
        return sample_rows(logits, positions, sampling, torch.tensor([s.seed for s in seqs], device=device))

    def _positions(self, seqs: list[Running], counts: list[int]) -> torch.Tensor:
        return torch.cat([torch.arange(s.cache.length - n, s.cache.length) for s, n in zip(seqs, counts)]
                         ).to(self.model.device)

    def _context(self, seqs: list[Running], counts: list[int]) -> StepContext:
        """Where a step of counts[b] tokens at the end of each sequence b writes and reads K/V."""
        device, pool = self.model.device, self.pool
        decode = all(n == 1 for n in counts)
        if self.model.backend == "torch":
            contexts = [s.cache.slots(0, s.cache.length).to(device) for s in seqs]
            slot_mapping = torch.cat([c[c.shape[0] - n :] for c, n in zip(contexts, counts)])
            return StepContext(pool, slot_mapping, None, batch=BatchLayout(None, counts, contexts))
        table = torch.zeros(len(seqs), max(len(s.cache.pages) for s in seqs), dtype=torch.long)
        for b, s in enumerate(seqs):
            table[b, : len(s.cache.pages)] = torch.tensor(s.cache.pages)
        rows = torch.repeat_interleave(torch.arange(len(seqs)), torch.tensor(counts))
        first = torch.tensor([s.cache.length - n for s, n in zip(seqs, counts)])
        contexts = None if decode else [s.cache.slots(0, s.cache.length).to(device) for s in seqs]
        return StepContext(pool, None, None, True, "triton", table.to(device), first.to(device),
                           batch=BatchLayout(rows.to(device), counts, contexts))


def generate_batch(
    model,
    prompts: Sequence[Sequence[int]],
    sampling: SamplingParams | None = None,
    stop_ids: Sequence[int] = (),
    max_tokens: int | None = None,
    batch_size: int = 64,
    seeds: Sequence[int] | None = None,
    on_finish: Callable[[Finished], None] | None = None,
) -> list[Finished]:
    """Every prompt's reply (token ids, why it ended), in order. max_tokens overrides the
    sampling's; seeds give each prompt its own (default: sampling.seed + the prompt's index)."""
    sampling = sampling or SamplingParams()
    if max_tokens is not None:
        sampling = replace(sampling, max_tokens=max_tokens)
    if not prompts:
        return []
    longest = max(len(p) for p in prompts)
    max_length = min(longest + sampling.max_tokens, model.max_context)
    decoder = BatchDecoder(model, min(batch_size, len(prompts)), max_length)
    return decoder.run(prompts, sampling, stop_ids, seeds, on_finish)
