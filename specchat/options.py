"""Turn command-line options into what the engine takes: a model, proposers, sampling settings."""

from __future__ import annotations

import sys
from collections.abc import Callable

from engine import (
    AUTO,
    MAX_K,
    AutoProposer,
    EngineError,
    LoadedProposer,
    ProposerOptions,
    SamplingParams,
    check_k,
    load_model,
    load_proposer,
    offered,
    proposer_specs,
)
from specchat.collector import settle

Progress = Callable[[str], None]  # where loading reports what it is doing (specchat/progress.py)


def sampling_from(args) -> SamplingParams:
    return SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        max_tokens=args.max_tokens,
    )


def load_target(args, progress: Progress):
    if args.max_context is not None and args.max_context < 32:
        raise EngineError(f"--max-context must be at least 32, got {args.max_context}")
    model = load_model(args.model, device=args.device, dtype=args.dtype, max_context=args.max_context,
                       progress=progress, eager=getattr(args, "eager", False),
                       batch_invariant=getattr(args, "batch_invariant", False))
    settle()
    return model


def sources(args) -> dict[str, str | None]:
    """The value given for each proposer need (option -> value or None)."""
    return {s.need.option: getattr(args, s.need.option.replace("-", "_"), None) for s in proposer_specs() if s.need}


def proposer_options(args, progress: Progress) -> ProposerOptions:
    return ProposerOptions(
        {k: v for k, v in sources(args).items() if v}, sample_drafts=bool(getattr(args, "sample_drafts", False)),
        eager=bool(getattr(args, "eager", False)), progress=progress,
    )


def chosen_proposer(args) -> str | None:
    """The proposer the options name: --proposer, --speculate (n-gram), or the one whose need is given."""
    given = [name for name, value in sources(args).items() if value]
    if getattr(args, "speculate", None) is not None:
        given = ["ngram", *given]
    if getattr(args, "proposer", None):
        return args.proposer
    if len(given) > 1:
        raise EngineError(f"choose one proposer with --proposer (the options name {', '.join(given)})")
    return given[0] if given else None


def load_chosen(args, target, progress: Progress) -> LoadedProposer | None:
    name = chosen_proposer(args)
    return None if name is None else load_proposer(name, target, proposer_options(args, progress))


def check_k_flags(args) -> None:
    """--speculate and -k refused before anything loads: out of range, or both given."""
    speculate = getattr(args, "speculate", None)
    if speculate is not None and args.k is not None:
        raise EngineError("give k once: --speculate K sets n-gram's k, -k the draft's or drafter's")
    if speculate is not None:
        flag_k("--speculate", speculate)
    if args.k is not None:
        flag_k("-k", args.k)


def proposer_from(args, target, progress: Progress):
    """The proposer the options ask for (None: plain decoding), with k from --speculate or -k."""
    check_k_flags(args)
    if chosen_proposer(args) == AUTO:
        k = AUTO if args.k is None else args.k
        options = proposer_options(args, progress)
        members = [load_proposer(spec.name, target, options) for spec in offered(sources(args))]
        return AutoProposer([m.make(k if k == AUTO else min(check_k(k), m.max_k)) for m in members])
    loaded = load_chosen(args, target, progress)
    if loaded is None:  # plain decoding: say so of the flags that only a drafter reads
        unused = [flag for flag, given in (("-k", args.k is not None), ("--sample-drafts", args.sample_drafts))
                  if given]
        if unused:
            warn(f"{' and '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect without a proposer: "
                 "decoding plainly (--speculate K, --proposer NAME, --draft or --dflash)")
        return None
    flag, k = ("--speculate", args.speculate) if getattr(args, "speculate", None) is not None else ("-k", args.k)
    why = f"what {loaded.label} can draft" if loaded.max_k < MAX_K else ""
    return loaded.make(None if k is None else flag_k(flag, k, loaded.max_k, why))


def flag_k(flag: str, k: int, max_k: int = MAX_K, why: str = "") -> int:
    """k as the engine takes it, or one error line that names the flag that gave it."""
    try:
        return check_k(k, max_k, why)
    except EngineError as err:
        raise EngineError(f"{flag}: {err}") from None


def warn(message: str) -> None:
    print(f"specchat: {message}", file=sys.stderr, flush=True)
