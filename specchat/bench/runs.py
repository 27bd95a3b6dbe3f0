"""The speculative-decoding bench: plain decoding and every proposer over a k sweep, on the same
prompts, timed the same way, in one run.

A job is one configuration (engine, prompt, sampling, method, k); it runs `warmup` untimed and
`repeats` timed generations, and its row holds the median. Decode speed counts the tokens after
the first over the wall time from the moment both the target and the proposer have read the
prompt (prefill) to the last token, so every cost of a speculative step (propose, verify, accept,
the proposer's bookkeeping) is in it. Speedups and ours / theirs ratios are divided out of those
measured rates, never copied from anywhere else.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine import (
    AUTO,
    MAX_K,
    AutoProposer,
    LoadedProposer,
    Metrics,
    Proposer,
    SamplingParams,
    check_k,
    proposer_specs,
    stream,
)
from specchat.bench.prompts import Prompt
from specchat.collector import FullPasses

SPECCHAT, TRANSFORMERS = "specchat", "transformers"
PEER_METHODS = ["draft-heuristic"]  # transformers' rows with no proposer of ours beside them


def method_order() -> list[str]:
    """Rows in this order: plain, every registered proposer cheapest first, then peers' own."""
    return ["plain", *(s.name for s in proposer_specs()), AutoProposer.name, *PEER_METHODS]


def k_rank(k: int | str) -> int:
    """Rows of fixed k in order, then k = "auto"."""
    return MAX_K + 1 if k == AUTO else k


@dataclass
class Run:
    """One timed generation."""

    tokens: list[int]  # every emitted token, the prefill's first one included
    decode_s: float  # wall time of the steps after the prefill
    prefill_s: float  # the target's
    metrics: Metrics | None = None  # ours only: transformers' generate reports no steps
    draft_prefill_s: float = 0.0  # a draft model (or drafter) reading the prompt, when it has one


@dataclass
class Case:
    """One prompt under one sampling setting: the ids every engine runs."""

    prompt: Prompt
    sampling_name: str  # "greedy" or "sampled"
    sampling: SamplingParams
    ids: list[int]


@dataclass
class Method:
    """How one row of ours drafts: `make()` builds a fresh proposer (None: plain decoding)."""

    name: str  # plain, ngram, draft, dflash, auto
    k: int | str  # drafts per step, or "auto"
    label: str
    make: Callable[[], Proposer | None]


@dataclass
class Job:
    engine: str
    case: Case
    method: str
    k: int | str
    label: str
    deterministic: bool  # its text must equal plain decoding's, sampled or not
    run: Callable[[], Run]


def methods(ks: list[int | str], loaded: list[LoadedProposer]) -> list[Method]:
    """Plain decoding, then every loaded proposer at every k it can draft (k past a proposer's
    max_k, e.g. a DFlash drafter's block, is skipped); with k "auto" among ks and several
    proposers loaded, also proposer "auto" over all of them."""
    ks = [check_k(k) for k in ks]
    out = [Method("plain", 0, "plain", lambda: None)]
    for proposer in loaded:
        out += [
            Method(proposer.name, k, proposer.label, lambda p=proposer, k=k: p.make(k))
            for k in ks
            if k == AUTO or k <= proposer.max_k
        ]
    if AUTO in ks and len(loaded) > 1:
        out.append(Method(AutoProposer.name, AUTO, "auto: " + ", ".join(p.label for p in loaded),
                          lambda: AutoProposer([p.make(AUTO) for p in loaded])))
    return out


def timed_generate(model, ids: list[int], sampling: SamplingParams, stop_ids, proposer) -> Run:
    """One generation through our loop; the clock starts once the prefill step has returned and
    the proposer has read the prompt."""
    # Every CUDA graph the reply may replay is captured before it, off the clock: a row's warm-up
    # run captures only the step lengths it used, and k "auto" may choose others in a timed run.
    model.warm_up(sampling)
    if proposer is not None:
        proposer.warm_up(model, sampling)
    gen = stream(model, ids, sampling, stop_ids=stop_ids, speculative=proposer)
    steps = iter(gen)
    first = next(steps)
    draft_prefill_s = 0.0
    if proposer is not None and first.finished is None:
        # A draft model's first proposal runs the whole prompt through it (and a DFlash drafter's
        # projects the prompt's target states): that is prefill, so it happens here, off the
        # clock. The proposer keeps what it read; its next proposal starts from there.
        primed = time.perf_counter()
        proposer.prime([*ids, *first.tokens])
        draft_prefill_s = time.perf_counter() - primed
    # the collector's full passes wait while the clock runs, as they do while the chat streams a
    # reply (collector.py); young passes go on
    full_passes = FullPasses()
    full_passes.hold()
    try:
        start = time.perf_counter()
        for _ in steps:
            pass
        end = time.perf_counter()
    finally:
        full_passes.release()
    return Run(list(gen.tokens), end - start, first.prefill_s, gen.metrics, draft_prefill_s)


def samples_drafts(proposer) -> bool:
    """Whether `proposer` (or a member of proposer auto) draws its drafts from its own
    distribution (--sample-drafts): then a sampled reply follows the model's distribution, not
    plain sampling's tokens one for one."""
    if proposer is None:
        return False
    return any(p.sample for p in proposer.members)  # a proposer's members: itself


def our_jobs(model, cases: list[Case], method_list: list[Method]) -> list[Job]:
    stop_ids = model.stop_ids()
    sampling_drafts = {m.label: samples_drafts(m.make()) for m in method_list}
    return [
        Job(
            SPECCHAT,
            case,
            m.name,
            m.k,
            m.label,
            case.sampling.greedy or not sampling_drafts[m.label],  # its text must be plain decoding's
            lambda case=case, m=m: timed_generate(model, case.ids, case.sampling, stop_ids, m.make()),
        )
        for case in cases
        for m in method_list
    ]


def planned_runs(jobs: list[Job], warmup: int, repeats: int) -> int:
    """How many generations `execute` runs: the engines' warm-ups, then every job's runs."""
    return len({job.engine for job in jobs}) + len(jobs) * (warmup + repeats)


def execute(
    jobs: list[Job], warmup: int, repeats: int, tick: Callable[[str], None] = lambda _: None
) -> list[dict]:
    """Run every job (its warm-up runs, then timed repeats) and return one row each, linked.

    Each engine first runs its first job once, untimed, so no row pays for the process's
    first-use costs (allocations, lazy initialisation) even without per-job warm-ups. The timed
    repeats go in rounds, every job once a round: a drift of the machine's speed (clocks, heat,
    another process) then spreads over every row instead of landing on the later ones, which
    matters to ratios of rows a few per cent apart (k auto against the best fixed k)."""
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be >= 1 and warmup >= 0")
    firsts = {}
    for job in jobs:
        firsts.setdefault(job.engine, job)
    for job in firsts.values():
        tick(f"warm-up: {describe(job)}")
        job.run()
    for job in jobs:
        for _ in range(warmup):
            tick(describe(job))
            job.run()
    timed: list[list[Run]] = [[] for _ in jobs]
    for _ in range(repeats):
        for job, runs in zip(jobs, timed, strict=True):
            tick(describe(job))
            runs.append(job.run())
    return link([row(job, runs) for job, runs in zip(jobs, timed, strict=True)])


def describe(job: Job) -> str:
    k = f" k={job.k}" if job.k else ""
    return f"{job.case.prompt.name} {job.case.sampling_name} {job.engine} {job.method}{k}"


def row(job: Job, runs: list[Run]) -> dict:
    """The figures of one job: medians over its timed runs. The speed is the median of each run's
    own (its tokens over its time): runs of k "auto" may write replies of different lengths (its
    choices follow the clock, and in bf16 a verify step may round a token another way), and one
    run's tokens over the median time of all would mix them."""
    tokens = runs[-1].tokens
    decode_s = statistics.median(r.decode_s for r in runs)
    decode_tokens = len(tokens) - 1
    rates = [(len(r.tokens) - 1) / r.decode_s if r.decode_s > 0 else 0.0 for r in runs]
    out = {
        "engine": job.engine,
        "prompt": job.case.prompt.name,
        "sampling": job.case.sampling_name,
        "method": job.method,
        "k": job.k,
        "label": job.label,
        "deterministic": job.deterministic,
        "new_tokens": len(tokens),
        "decode_tokens": decode_tokens,
        "decode_s": decode_s,
        "decode_s_runs": [r.decode_s for r in runs],
        "tok_s_runs": rates,
        "tok_s": statistics.median(rates),
        "prefill_ms": 1000 * statistics.median(r.prefill_s for r in runs),
        "draft_prefill_ms": 1000 * statistics.median(r.draft_prefill_s for r in runs),
        "repeats_agree": all(r.tokens == tokens for r in runs),
        "tokens": tokens,
    }
    metrics = [r.metrics for r in runs if r.metrics is not None]
    if metrics:
        m = metrics[-1]
        out.update(
            {
                "steps": m.steps,
                "tokens_per_step": m.mean_acceptance_length,
                "drafted": m.drafted,
                "accepted": m.accepted,
                "acceptance_rate": m.draft_acceptance_rate,
                "propose_ms": 1000 * statistics.median(x.propose_s / max(x.steps, 1) for x in metrics),
                "verify_ms": 1000 * statistics.median(x.verify_s / max(x.steps, 1) for x in metrics),
                "metrics": m.as_dict(),
            }
        )
    return out


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two replies differ (None if they are the same)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def link(rows: list[dict]) -> list[dict]:
    """Set each row's speedup over its engine's plain row (same prompt and sampling), whether
    its tokens equal that plain row's, and, on our rows, the ratio to transformers' same method."""
    index = {(r["engine"], r["prompt"], r["sampling"], r["method"], r["k"]): r for r in rows}
    for r in rows:
        plain = index.get((r["engine"], r["prompt"], r["sampling"], "plain", 0))
        r["speedup"] = r["tok_s"] / plain["tok_s"] if plain and plain["tok_s"] > 0 else None
        r["same_text"] = r["tokens"] == plain["tokens"] if plain else None
        r["first_difference"] = first_difference(r["tokens"], plain["tokens"]) if plain else None
    for r in rows:
        if r["engine"] != SPECCHAT:
            continue
        for suffix in ("", "-heuristic"):
            theirs = index.get((TRANSFORMERS, r["prompt"], r["sampling"], r["method"] + suffix, r["k"]))
            key = "transformers" + suffix.replace("-", "_")
            r[f"{key}_tok_s"] = theirs["tok_s"] if theirs else None
            r[f"ours_over_{key}"] = r["tok_s"] / theirs["tok_s"] if theirs and theirs["tok_s"] > 0 else None
    return rows


def best_k(rows: list[dict]) -> list[dict]:
    """Per engine, prompt, sampling and method: the k with the highest decode speed."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if r["method"] in ("plain", AutoProposer.name) or r["k"] == AUTO:  # best of the fixed settings
            continue
        key = (r["engine"], r["prompt"], r["sampling"], r["method"])
        if key not in best or r["tok_s"] > best[key]["tok_s"]:
            best[key] = r
    return [
        {
            "engine": e,
            "prompt": p,
            "sampling": s,
            "method": m,
            "k": r["k"],
            "tok_s": r["tok_s"],
            "speedup": r["speedup"],
            "tokens_per_step": r.get("tokens_per_step"),
        }
        for (e, p, s, m), r in best.items()
    ]
