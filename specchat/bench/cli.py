"""`specchat bench` (the results table, side by side with transformers) and `specchat compare`
(every proposer at a few k on the user's own prompt)."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
from pathlib import Path

import torch

from engine import (
    AUTO,
    RANDOM_DRAFTER,
    EngineError,
    SamplingParams,
    check_k,
    load_proposer,
    offered,
)
from specchat.bench import report
from specchat.bench.prompts import Prompt, load_prompts, prompt_from_file
from specchat.bench.runs import Case, best_k, execute, methods, our_jobs, planned_runs
from specchat.options import load_target, proposer_options, sources
from specchat.progress import message_progress, run_progress

__all__ = ["bench", "compare"]

def load_models(args):
    """The target and every proposer the options offer, loaded once (each makes its rows' proposers)."""
    with message_progress() as progress:
        target = load_target(args, progress)
        options = proposer_options(args, progress)
        return target, [load_proposer(spec.name, target, options) for spec in offered(sources(args))]


def check_settings(args) -> None:
    for k in args.k + (getattr(args, "peer_k", None) or []):
        check_k(k)
    if args.max_new_tokens < 2:
        raise EngineError(
            f"--max-tokens must be at least 2 (decode speed needs a decode step), "
            f"got {args.max_new_tokens}"
        )
    if args.repeats < 1 or args.warmup < 0:
        raise EngineError("--repeats must be at least 1 and --warmup at least 0")


def sampling_params(args, sampled: bool):
    if not sampled:
        return SamplingParams(max_tokens=args.max_new_tokens, seed=args.seed)
    return SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_tokens=args.max_new_tokens,
    )


def samplings(args) -> dict:
    out = {"greedy": sampling_params(args, False)}
    if args.sampled:
        out["sampled"] = sampling_params(args, True)
    return out


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run with n CPU threads (None: torch's choice), then restore the count."""
    if n is not None and n < 1:
        raise EngineError(f"--threads must be at least 1, got {n}")
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_jobs(jobs, args) -> list[dict]:
    with run_progress(planned_runs(jobs, args.warmup, args.repeats)) as tick:
        return execute(jobs, args.warmup, args.repeats, tick)


def bench(args, argv: list[str] | None = None) -> int:
    """The seed's results table for one target, ours and transformers' in the same run."""
    out = Path(args.out)
    if out.exists() and not out.is_dir():  # found before a long run, not after it
        raise EngineError(f"--out {args.out}: a file is there, not a folder")
    if args.from_json:
        results = report.merge([report.read_json(Path(f)) for f in args.from_json])
    else:
        with torch_threads(args.threads):
            results = measure(args, argv)
    print(report.markdown(results), end="")  # the table first: a folder that cannot be written loses no figures
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not args.from_json or len(args.from_json) > 1:
            report.write_json(results, out / "bench.json")
            print(f"figures: {out / 'bench.json'}", file=sys.stderr)
        why = report.write_chart(results, out / "bench.png")
    except OSError as err:
        raise EngineError(f"cannot write to {out}: {err.strerror}") from None
    print(why or f"chart: {out / 'bench.png'}", file=sys.stderr)
    return 0


def measure(args, argv: list[str] | None) -> dict:
    check_settings(args)
    prompts = load_prompts(args.prompts)
    target, loaded = load_models(args)
    modes = samplings(args)
    cases = [
        Case(p, name, s, target.encode_chat([{"role": "user", "content": p.text}]))
        for p in prompts
        for name, s in modes.items()
    ]
    method_list = methods(args.k, loaded)
    peer = None
    if not args.no_peers:
        from specchat.bench.peers import TransformersPeer  # loads transformers' models: only when asked

        with message_progress() as progress:
            progress(f"loading {args.model} in transformers")
            peer = TransformersPeer(
                args.model, target.device, target.dtype, target.stop_ids(), args.draft, repeats=args.repeats
            )
    jobs = []
    for case in cases:  # ours and theirs side by side, so drift during the run hits both
        jobs += our_jobs(target, [case], method_list)
        jobs += peer.jobs([case], args.peer_k or [k for k in args.k if k != AUTO]) if peer else []
    command = "specchat " + shlex.join(sys.argv[1:] if argv is None else argv)
    environment = report.environment(target.device, target.dtype, command)  # dated at the start
    rows = run_jobs(jobs, args)
    add_texts(rows, target.tokenizer)
    return {
        "schema": report.SCHEMA,
        "environment": environment,
        "settings": {
            "model": args.model,
            "draft": args.draft,
            "dflash": args.dflash,
            "labels": {p.name: p.label for p in loaded},
            "ks": args.k,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "max_new_tokens": args.max_new_tokens,
            "peers": peer is not None,
            "samplings": {name: sampling_dict(s) for name, s in modes.items()},
        },
        "prompts": [
            {
                "name": p.name,
                "title": p.title,
                "digest": p.digest,
                "tokens": next(len(c.ids) for c in cases if c.prompt is p),
            }
            for p in prompts
        ],
        "notes": notes(args),
        "rows": rows,
        "best": best_k(rows),
    }


def sampling_dict(s) -> dict:
    return dataclasses.asdict(s)


def add_texts(rows: list[dict], tokenizer) -> None:
    """The reply text of each plain row, and of every row whose text is not plain's."""
    if tokenizer is None:
        return
    for r in rows:
        if r["method"] == "plain" or r["same_text"] is False:
            r["text"] = tokenizer.decode(r["tokens"])


def notes(args) -> list[str]:
    out = []
    if args.draft and args.draft == args.model:
        out.append(
            "The draft model is the target itself: its rows show the cost of drafting and that the "
            "output is unchanged, not a useful speedup."
        )
    if args.dflash == RANDOM_DRAFTER:
        out.append(
            "DFlash rows use a drafter with random weights: they show the path runs and what a drafter "
            "pass costs, not how well a trained drafter drafts."
        )
    return out


def compare(args) -> int:
    """Every available proposer at a few k on the user's prompt: one table, best k marked."""
    check_settings(args)
    prompt = Prompt("prompt", "your prompt", args.prompt) if args.prompt else prompt_from_file(args.prompt_file)
    target, loaded = load_models(args)
    if args.raw:
        ids = target.tokenizer.encode(prompt.text) if target.tokenizer is not None else []
    else:
        ids = target.encode_chat([{"role": "user", "content": prompt.text}])
    sampled = args.temperature > 0
    case = Case(prompt, "sampled" if sampled else "greedy", sampling_params(args, sampled), ids)
    with torch_threads(args.threads):
        rows = run_jobs(our_jobs(target, [case], methods(args.k, loaded)), args)
    print(report.compare_table(rows, len(ids)))
    return 0
