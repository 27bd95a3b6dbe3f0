"""Turn command-line options into what the engine takes: a model, a proposer, sampling settings."""

from __future__ import annotations

import sys

from engine import DraftProposer, EngineError, NgramProposer, SamplingParams, load_model
from engine.speculation.proposers.base import check_k


def progress_line(message: str) -> None:
    """On a terminal each message replaces the last on one stderr line; in a log, one line each."""
    if sys.stderr.isatty():
        print(f"\r\x1b[K{message}", end="", file=sys.stderr, flush=True)
    else:
        print(message, file=sys.stderr, flush=True)


def sampling_from(args) -> SamplingParams:
    return SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        max_tokens=args.max_tokens,
    )


def load_target(args, progress=progress_line):
    if args.max_context < 32:
        raise EngineError(f"--max-context must be at least 32, got {args.max_context}")
    return load_model(args.model, device=args.device, dtype=args.dtype, max_context=args.max_context,
                      progress=progress, eager=getattr(args, "eager", False),
                      batch_invariant=getattr(args, "batch_invariant", False))


def proposer_from(args, target, progress=progress_line):
    """The proposer the options ask for (None: plain decoding)."""
    chosen = [name for name in ("speculate", "draft", "dflash") if getattr(args, name, None)]
    if len(chosen) > 1:
        raise EngineError(f"choose one of --speculate, --draft, --dflash (got {', '.join(chosen)})")
    if args.speculate:
        return NgramProposer(k=check_k(args.speculate))
    k = check_k(args.k if args.k is not None else 4)
    if args.draft:
        draft = load_model(args.draft, device=str(target.device), dtype=target.dtype,
                           max_context=target.max_context, progress=progress, eager=target.eager)
        return DraftProposer(draft, k=k, sample=args.sample_drafts)
    if getattr(args, "dflash", None):
        from engine.speculation.proposers.dflash.proposer import DFlashProposer, load_drafter

        drafter = load_drafter(args.dflash, target)
        return DFlashProposer(drafter, k=check_k(args.k if args.k is not None else drafter.block_size - 1))
    return None
