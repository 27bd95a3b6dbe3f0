"""Turn command-line options into what the engine takes: a model, a proposer, sampling settings."""

from __future__ import annotations

import sys

from engine import DraftProposer, EngineError, NgramProposer, SamplingParams, load_model
from engine.proposers.base import check_k


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
    if args.max_context is not None and args.max_context < 32:
        raise EngineError(f"--max-context must be at least 32, got {args.max_context}")
    return load_model(args.model, device=args.device, dtype=args.dtype, max_context=args.max_context,
                      progress=progress, eager=getattr(args, "eager", False),
                      batch_invariant=getattr(args, "batch_invariant", False))


def proposer_from(args, target, progress=progress_line):
    """The proposer the options ask for (None: plain decoding)."""
    chosen = [name for name in ("speculate", "draft", "dflash") if getattr(args, name, None) is not None]
    if len(chosen) > 1:
        raise EngineError(f"choose one of --speculate, --draft, --dflash (got {', '.join(chosen)})")
    if args.speculate is not None:
        if args.k is not None:
            raise EngineError("give k once: --speculate K sets n-gram's k, -k the draft's or drafter's")
        return NgramProposer(k=flag_k("--speculate", args.speculate))
    if not chosen:  # plain decoding: say so of the flags that only a drafter reads
        unused = [flag for flag, given in (("-k", args.k is not None), ("--sample-drafts", args.sample_drafts))
                  if given]
        if unused:
            warn(f"{' and '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect without --draft or "
                 "--dflash: decoding plainly (n-gram drafting is --speculate K)")
        return None
    k = flag_k("-k", args.k if args.k is not None else 4)
    if args.draft:
        draft = load_model(args.draft, device=str(target.device), dtype=target.dtype,
                           max_context=target.max_context, progress=progress, eager=target.eager)
        return DraftProposer(draft, k=k, sample=args.sample_drafts)
    if getattr(args, "dflash", None):
        from engine.proposers.dflash import DFlashProposer, load_drafter

        drafter = load_drafter(args.dflash, target)
        return DFlashProposer(drafter, k=flag_k("-k", args.k if args.k is not None else drafter.block_size - 1))
    return None


def flag_k(flag: str, k: int) -> int:
    try:
        return check_k(k)
    except EngineError as err:
        raise EngineError(f"{flag}: {err}") from None


def warn(message: str) -> None:
    print(f"specchat: {message}", file=sys.stderr, flush=True)
