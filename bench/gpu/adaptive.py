"""k and proposer "auto" against fixed settings on the GPU (issue 17's figures).

1. The bench's edit and explanation prompts, greedy and sampled: n-gram and the draft model at
   fixed k and at k auto, and proposer auto with k auto (specchat bench, auto rows beside the
   fixed ones), then auto's speed over the best fixed k of the same proposer.
2. The bench's conversation (specchat/bench/conversation.json): total decode time of every fixed
   (proposer, k), each proposer at k auto, and auto / auto, over all turns; the median of
   --conversation-repeats rounds (a single pass of some 0.6 s moved 5-10 % between runs), and
   the rate in tokens a second beside it (bf16 near-ties let settings write replies of other
   lengths); then turn by turn, with the ceiling of a proposer chosen per turn (every turn at
   its fastest fixed setting), which says how much proposer auto could gain with these proposers.

    python bench/gpu/adaptive.py [--model qwen2.5-coder-1.5b] [--draft qwen2.5-coder-0.5b] [--dflash DIR]

--dflash adds a trained DFlash drafter: its fixed and k auto rows, and a member of proposer auto;
--draft "" leaves the draft model out.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from engine import AUTO, AutoProposer, ProposerOptions, SamplingParams, load_model, load_proposer
from specchat.__main__ import main as specchat
from specchat.bench.conversation import load_turns
from specchat.bench.runs import timed_generate

KS = [1, 2, 4, 7, 15]


def bench_prompts(args) -> None:
    out = Path(tempfile.mkdtemp())
    for prompt in ("edit", "explain"):
        argv = ["bench", "--model", args.model, *proposer_flags(args), "--prompts", prompt, "--no-peers",
                "--k", *map(str, KS), "auto", "--repeats", str(args.repeats), "--warmup", "1",
                "--max-new-tokens", str(args.max_new_tokens), "--out", str(out / prompt)]
        if specchat(argv) != 0:
            sys.exit(f"bench of {prompt} failed")
    rows = [r for p in ("edit", "explain") for r in json.loads((out / p / "bench.json").read_text())["rows"]]
    print("\n## auto against the best fixed k (same run)\n")
    print("| prompt | sampling | proposer | best fixed k | its tok/s | auto tok/s | auto / best | spread of runs, "
          "best / auto | same text |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted({(r["prompt"], r["sampling"]) for r in rows}):
        here = [r for r in rows if (r["prompt"], r["sampling"]) == key]
        best_any = max((r for r in here if r["k"] != AUTO and r["method"] != "plain"), key=lambda r: r["tok_s"])
        for method in ("ngram", "draft", "dflash", "auto"):
            auto = next((r for r in here if r["method"] == method and r["k"] == AUTO), None)
            fixed = [r for r in here if r["method"] == method and r["k"] != AUTO] or [best_any]
            best = max(fixed, key=lambda r: r["tok_s"])
            if auto is None:
                continue
            who = f"{best['method']} k={best['k']}"
            print(f"| {key[0]} | {key[1]} | {method} | {who} | {best['tok_s']:.1f} | {auto['tok_s']:.1f} | "
                  f"{auto['tok_s'] / best['tok_s']:.3f} | {spread(best):.0%} / {spread(auto):.0%} | "
                  f"{auto['same_text']} |")


def proposer_flags(args) -> list[str]:
    return (["--draft", args.draft] if args.draft else []) + (["--dflash", args.dflash] if args.dflash else [])


def spread(row: dict) -> float:
    """How far a row's runs lie apart: (fastest - slowest) / median speed."""
    rates = sorted(row["tok_s_runs"])
    return (rates[-1] - rates[0]) / rates[len(rates) // 2]


def conversation(args) -> None:
    target = load_model(args.model, max_context=8192)
    options = ProposerOptions({k: v for k, v in (("draft", args.draft), ("dflash", args.dflash)) if v})
    names = ["ngram"] + (["draft"] if args.draft else []) + (["dflash"] if args.dflash else [])
    loaded = [load_proposer(name, target, options) for name in names]
    settings = [("plain", lambda: None)]
    for each in loaded:
        settings += [(f"{each.name} k={k}", lambda p=each, k=k: p.make(k)) for k in [*KS, AUTO]]
    settings.append(("auto / auto", lambda: AutoProposer([each.make(AUTO) for each in loaded])))
    turns = load_turns()
    sampling = SamplingParams(max_tokens=args.max_new_tokens)
    stop = target.stop_ids()
    # every setting once a round, rounds one after another: a drift of the machine's speed
    # spreads over all settings instead of landing on the last ones; each setting's median kept
    runs: dict[str, list[tuple[float, int, list]]] = {name: [] for name, _ in settings}
    for round_ in range(args.conversation_repeats):
        for name, make in settings:
            per_turn = one_conversation(target, make(), turns, sampling, stop)
            decode_s, tokens = sum(s for s, _ in per_turn), sum(n for _, n in per_turn)
            runs[name].append((decode_s, tokens, per_turn))
            print(f"round {round_ + 1}: {name:14} {decode_s:7.3f} s  {tokens:5d} tokens  "
                  f"{tokens / decode_s:7.1f} tok/s", file=sys.stderr)
    medians = {name: middle(r) for name, r in runs.items()}
    figures = {name: (s, n) for name, (s, n, _) in medians.items()}
    auto_s, auto_n = figures["auto / auto"]
    print(f"\n## the conversation ({len(turns)} turns, greedy, up to {args.max_new_tokens} tokens a reply, "
          f"median of {args.conversation_repeats})\n")
    print("| setting | decode s | tokens | tok/s | spread of runs | auto / auto is faster by | by tok/s |")
    print("|---|---|---|---|---|---|---|")
    for name, (s, n) in figures.items():
        times = [t for t, _, _ in runs[name]]
        print(f"| {name} | {s:.3f} | {n} | {n / s:.1f} | {(max(times) - min(times)) / s:.0%} | "
              f"{s / auto_s:.3f}x | {(auto_n / auto_s) / (n / s):.3f}x |")
    fixed = {n: v for n, v in figures.items() if "auto" not in n}
    best = min(fixed, key=lambda n: fixed[n][0])
    rate = (auto_n / auto_s) / (fixed[best][1] / fixed[best][0])
    print(f"\nbest fixed setting: {best}; auto / auto over it: {fixed[best][0] / auto_s:.3f}x by decode time, "
          f"{rate:.3f}x by tokens a second (target >= 1.10)")
    turn_by_turn(medians, turns, best)


def middle(runs: list[tuple[float, int, list]]) -> tuple[float, int, list]:
    """The median run by decode time; of an even number, the mean of the middle two, turn by turn
    (the upper one alone, as this took before, counted the slower of two rounds: against the
    settings whose rounds spread most)."""
    ordered = sorted(runs, key=lambda run: run[0])
    pair = ordered[(len(ordered) - 1) // 2 : len(ordered) // 2 + 1]
    if len(pair) == 1:
        return pair[0]
    (s1, n1, t1), (s2, n2, t2) = pair
    turns = [((a + c) / 2, (b + d) / 2) for (a, b), (c, d) in zip(t1, t2, strict=True)]
    return (s1 + s2) / 2, round((n1 + n2) / 2), turns


def turn_by_turn(medians: dict, turns: list[str], best: str) -> None:
    """Each turn's ms a token under the fixed settings' median runs and auto / auto's, and the
    ceiling a proposer choice per turn could reach: every turn at its fastest fixed setting."""
    fixed = [name for name in medians if "auto" not in name]
    print("\n| turn | " + " | ".join(fixed) + " | fastest fixed | auto / auto |")
    print("|---|" + "---|" * (len(fixed) + 2))
    ceiling = 0.0
    for i in range(len(turns)):
        rates = {name: medians[name][2][i] for name in fixed}  # (s, tokens)
        fastest = min(fixed, key=lambda name: rates[name][0] / max(1, rates[name][1]))
        ceiling += rates[fastest][0] / max(1, rates[fastest][1]) * rates[best][1]
        cells = " | ".join(f"{1e3 * s / max(1, n):.3f}" for s, n in rates.values())
        auto_s, auto_n = medians["auto / auto"][2][i]
        print(f"| {i + 1} | {cells} | {fastest} | {1e3 * auto_s / max(1, auto_n):.3f} |")
    print(f"\nms a token per turn. Each turn at its fastest fixed setting (the best fixed setting's tokens): "
          f"{ceiling:.3f} s, {medians[best][0] / ceiling:.3f}x the best fixed setting: the most a proposer "
          "chosen per turn could gain here")


def one_conversation(target, proposer, turns: list[str], sampling: SamplingParams, stop) -> list[tuple[float, int]]:
    """(decode seconds, tokens) of each turn of the conversation with one proposer, whose
    estimates carry from turn to turn as a chat's do; a warm-up reply to the first turn first."""
    history, per_turn = [], []
    ids = target.encode_chat([{"role": "user", "content": turns[0]}])
    timed_generate(target, ids, sampling, stop, proposer)  # warm-up, untimed
    for turn in turns:
        history.append({"role": "user", "content": turn})
        run = timed_generate(target, target.encode_chat(history), sampling, stop, proposer)
        history.append({"role": "assistant", "content": target.tokenizer.decode(run.tokens)})
        per_turn.append((run.decode_s, len(run.tokens) - 1))
    return per_turn


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b", help='a draft model ("" for none)')
    p.add_argument("--dflash", default=None, help="a trained DFlash drafter's directory")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=4, help="timed runs of each bench row (the median is kept)")
    p.add_argument("--conversation-repeats", type=int, default=3,
                   help="rounds of the conversation, every setting once a round (each setting's median kept)")
    p.add_argument("--part", choices=["prompts", "conversation", "both"], default="both")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs CUDA")
    if a.part in ("prompts", "both"):
        bench_prompts(a)
    if a.part in ("conversation", "both"):
        conversation(a)
