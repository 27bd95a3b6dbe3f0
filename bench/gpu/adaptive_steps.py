"""Where k "auto" spends its steps on the GPU: per verify length, and on the host between steps.

For the bench's edit and explanation prompts (greedy), n-gram and the draft model at fixed k = 15
and at k auto, and proposer auto: tok/s, tokens per step, the k each step took, the verify time
per step length (auto's 2.4 ms a step against fixed k's 1.8 ms in the first run), how many steps
were probes, the policy's own time per choice on this host (choose + record), and the propose
time of proposals in a run against those after sitting out (a draft model's catch-up). Every
graph is captured before the clock starts, as the bench now does.

--conversation: the bench's conversation instead (n-gram k 15 and k auto, the model drafter at k
auto, proposer auto), turn by turn: each turn's decode time, and for each setting where its steps
went (plain, each proposer's drafting steps and probes, their tokens and seconds) and what its
proposals after sitting out cost, to find what proposer auto pays over n-gram k auto on it.
--dflash DIR: a trained DFlash drafter as a proposer (--draft "": no draft model).

    python bench/gpu/adaptive_steps.py [--model qwen2.5-coder-1.5b] [--draft qwen2.5-coder-0.5b] [--dflash DIR]
        [--conversation]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter, defaultdict

import torch

from engine import AUTO, AutoProposer, Generation, ProposerOptions, SamplingParams, load_model, load_proposer
from engine.speculation.adaptive import AdaptivePolicy
from specchat.bench.conversation import load_turns
from specchat.bench.prompts import load_prompts


class TimedPolicy(AdaptivePolicy):
    """The policy, its host time per choice kept, and each drafting step's propose time with how
    far behind its proposer was (a draft model catching up after sitting out)."""

    def __init__(self, model):
        super().__init__(model)
        self.host_seconds: list[float] = []  # (the policy's own `seconds` is the reply's, faded)
        self.proposals: list[tuple[int, int, float]] = []  # (tokens behind, k, propose seconds)

    def choose(self, proposers, context, limit):
        t0 = time.perf_counter()
        choice = super().choose(proposers, context, limit)
        self.host_seconds.append(time.perf_counter() - t0)
        return choice

    def record(self, choice, step, proposers):
        t0 = time.perf_counter()
        super().record(choice, step, proposers)
        self.host_seconds[-1] += time.perf_counter() - t0
        if step.drafts:
            self.proposals.append((choice.behind, step.k, step.propose_s))


def run(model, ids, sampling, proposer):
    """One reply, timed from after the prefill (the proposer primed off the clock)."""
    model.warm_up(sampling)
    proposer.warm_up(model, sampling)
    policy = TimedPolicy(model)
    gen = Generation(model, ids, sampling, model.stop_ids(), speculative=proposer, policy=policy)
    steps = iter(gen)
    first = next(steps)
    proposer.prime([*ids, *first.tokens])
    start = time.perf_counter()
    done = list(steps)
    return time.perf_counter() - start, done, policy


def report(name, seconds, steps, policy) -> None:
    policy_s = policy.host_seconds
    tokens = sum(len(s.tokens) for s in steps)
    ks = Counter(s.k for s in steps)
    by_length = defaultdict(list)
    for s in steps:
        by_length[len(s.drafts) + 1].append(s.verify_s)
    print(f"\n### {name}: {tokens / seconds:.1f} tok/s, {tokens / len(steps):.2f} tokens/step, {len(steps)} steps, "
          f"{sum(s.probe for s in steps)} probes")
    if policy_s:
        print(f"policy on the host: median {statistics.median(policy_s) * 1e6:.1f} µs, "
              f"mean {statistics.fmean(policy_s) * 1e6:.1f} µs per choice")
    print("k taken: " + ", ".join(f"{k}: {n}" for k, n in sorted(ks.items())))
    print("| verify length | steps | median ms | mean ms | max ms |")
    print("|---|---|---|---|---|")
    for n, times in sorted(by_length.items()):
        print(f"| {n} | {len(times)} | {statistics.median(times) * 1e3:.2f} | {statistics.fmean(times) * 1e3:.2f} | "
              f"{max(times) * 1e3:.2f} |")
    report_catch_ups(policy.proposals)


def report_catch_ups(proposals) -> None:
    """Propose time of proposals in a run of drafting steps against those after sitting out
    (tokens behind: 2-16, one graph step of catch-up; more, several or one op by op)."""
    if not proposals:
        return
    print("| proposal | steps | median k | median tokens behind | median propose ms | max ms |")
    print("|---|---|---|---|---|---|")
    for label, low, high in (("in a run", 0, 1), ("back, 2-16 behind", 2, 16), ("back, 17+ behind", 17, 1 << 30)):
        rows = [p for p in proposals if low <= p[0] <= high]
        if rows:
            print(f"| {label} | {len(rows)} | {statistics.median(r[1] for r in rows):.0f} | "
                  f"{statistics.median(r[0] for r in rows):.0f} | {statistics.median(r[2] for r in rows) * 1e3:.2f} | "
                  f"{max(r[2] for r in rows) * 1e3:.2f} |")


def spent(steps) -> dict[str, list[float]]:
    """Steps, tokens and seconds (propose + verify) by who drafted, probes apart."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for s in steps:
        row = out[s.proposer + (" probe" if s.probe else "")]
        row[0] += 1
        row[1] += len(s.tokens)
        row[2] += s.propose_s + s.verify_s
    return out


def conversation(model, settings, sampling) -> None:
    """Each setting over the bench's conversation, turn by turn (a warm-up reply first)."""
    turns = load_turns()
    times: dict[str, list[float]] = {}
    for name, make in settings:
        proposer = make()
        history = []
        run(model, model.encode_chat([{"role": "user", "content": turns[0]}]), sampling, proposer)
        times[name], total, proposals = [], defaultdict(lambda: [0, 0, 0.0]), []
        for turn in turns:
            history.append({"role": "user", "content": turn})
            seconds, steps, policy = run(model, model.encode_chat(history), sampling, proposer)
            proposals += policy.proposals
            tokens = [t for s in steps for t in s.tokens]
            history.append({"role": "assistant", "content": model.tokenizer.decode(tokens)})
            times[name].append(seconds)
            for who, row in spent(steps).items():
                total[who] = [a + b for a, b in zip(total[who], row, strict=True)]
        print(f"\n### {name}: {sum(times[name]):.3f} s over {len(turns)} turns")
        print("| steps of | steps | tokens | seconds | tokens a ms |")
        print("|---|---|---|---|---|")
        for who, (n, t, sec) in sorted(total.items()):
            print(f"| {who} | {n} | {t} | {sec:.3f} | {t / sec / 1e3:.2f} |")
        report_catch_ups(proposals)
    names = list(times)
    print("\n| turn | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for i in range(len(turns)):
        print(f"| {i + 1} | " + " | ".join(f"{times[n][i] * 1e3:.1f} ms" for n in names) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b", help='a draft model ("" for none)')
    p.add_argument("--dflash", default=None, help="a trained DFlash drafter's directory")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--conversation", action="store_true", help="the bench's conversation, turn by turn")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs CUDA")
    model = load_model(args.model)
    sources = {"draft": args.draft} if args.draft else {}
    if args.dflash:
        sources["dflash"] = args.dflash
    options = ProposerOptions(sources)
    loaded = [load_proposer(name, model, options) for name in ("ngram", *sources)]
    settings = [(f"{p.name} k={k}", lambda p=p, k=k: p.make(k)) for p in loaded for k in (15, AUTO)]
    settings.append(("auto / auto", lambda: AutoProposer([p.make(AUTO) for p in loaded])))
    sampling = SamplingParams(max_tokens=args.max_new_tokens)
    if args.conversation:
        drop = {f"{p.name} k=15" for p in loaded[1:]}  # a model drafter at k 15: no contender there
        conversation(model, [(n, m) for n, m in settings if n not in drop], sampling)
        return
    for prompt in load_prompts(["edit", "explain"]):
        ids = model.encode_chat([{"role": "user", "content": prompt.text}])
        print(f"\n## {prompt.title} (greedy, {args.max_new_tokens} new tokens)")
        for name, make in settings:
            run(model, ids, sampling, make())  # warm-up: first-use costs off the figures
            report(name, *run(model, ids, sampling, make()))


if __name__ == "__main__":
    main()
