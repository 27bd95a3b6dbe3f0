"""The bench's conversation as the adaptive policy meets it, traced once on the CPU: each turn's
greedy reply and, at every position of it, how many of a DFlash drafter's drafts the target keeps.

Each turn is generated as bench/gpu/adaptive.py generates it (the history re-encoded each turn,
up to --max-new-tokens a reply; greedy, so the drafter's proposals leave the text plain
decoding's). Then one pass of the target over the turn's whole context gives its states at every
token, and the drafter takes them in one by one, drafting its block after each reply position
as it would serving: the drafts that match the reply's next tokens are those a verify step keeps.
bench/cpu/policy_trace.py replays the policy over these traces with the H200's step costs.

    PYTHONPATH=. python bench/cpu/conversation_trace.py GGUF DRAFTER --out trace.json [--replies TRACE]

--replies takes the turns' prompts and replies from an earlier trace and traces another drafter
over them: greedy replies are the target's whatever drafts it verified.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import torch

from engine import SamplingParams, load_model
from engine.speculation.loop import generate
from engine.speculation.proposers.dflash.files import load_drafter
from engine.speculation.proposers.dflash.proposer import DFlashProposer
from engine.speculation.proposers.dflash.training.forward import target_states
from specchat.bench.conversation import load_turns


def kept_runs(drafter, states: torch.Tensor, ids: list[int], start: int, end: int | None = None,
              drafted: list[list[int]] | None = None, sure: list[list[float]] | None = None) -> list[int]:
    """For each position p from start - 1 to end - 2 (the last of ids by default): how many of the
    drafter's drafts after ids[p] equal ids[p + 1:] (states: the target's for every token of ids);
    the drafts themselves appended to `drafted` if given, and the drafter's probability of each
    to `sure`."""
    drafter.clear()
    drafter.take_in(states[: start - 1])
    runs = []
    for p in range(start - 1, (end or len(ids)) - 1):
        new = [states[p - 1 : p]] if p >= start else []
        if sure is None:
            drafts = drafter.draft(new, ids[p]).tolist()
        else:
            probs, picked = torch.softmax(drafter.draft(new, ids[p], logits=True).float(), dim=-1).max(dim=-1)
            drafts = picked.tolist()
            sure.append([round(x, 3) for x in probs.tolist()])
        if drafted is not None:
            drafted.append(drafts)
        run = 0
        while run < len(drafts) and p + 1 + run < len(ids) and drafts[run] == ids[p + 1 + run]:
            run += 1
        runs.append(run)
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="the target (a GGUF file, pack or folder)")
    p.add_argument("drafter", help="a trained DFlash drafter's folder")
    p.add_argument("--out", required=True)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--turns", type=int, default=None, help="the first N turns only")
    p.add_argument("--replies", default=None, help="an earlier trace whose prompts and replies to trace")
    p.add_argument("--conversation", default=None, help="another conversation's file (the bench's by default)")
    p.add_argument("--prompt-tail", type=int, default=0,
                   help="also what the drafter keeps over the prompt's last N positions (its own text, before the reply)")
    args = p.parse_args()
    torch.set_grad_enabled(False)
    target = load_model(args.model, max_context=8192)
    drafter = load_drafter(args.drafter, target)
    stop = target.stop_ids()
    sampling = SamplingParams(max_tokens=args.max_new_tokens)
    history, traced = [], []
    earlier = read_trace(args.replies)["turns"] if args.replies else None
    turns = load_turns(Path(args.conversation)) if args.conversation else load_turns()
    for n, turn in enumerate((earlier or turns)[: args.turns]):
        t0 = time.perf_counter()
        if earlier is not None:
            ids, reply = earlier[n]["prompt"], earlier[n]["reply"]
        else:
            history.append({"role": "user", "content": turn})
            ids = target.encode_chat(history)
            result = generate(target, ids, sampling, stop_ids=stop,
                              speculative=DFlashProposer(drafter, k=drafter.block_size - 1))
            reply = list(result.tokens)
            history.append({"role": "assistant", "content": target.tokenizer.decode(reply)})
        t1 = time.perf_counter()
        whole = ids + reply
        target.state_layers = drafter.state_layers
        states = target_states(target, whole)
        drafted: list[list[int]] = []
        sure: list[list[float]] = []
        runs = kept_runs(drafter, states, whole, len(ids), drafted=drafted, sure=sure)
        # the drafts themselves and the drafter's probability of each, for what a policy may read
        # of them (whether the n-gram proposer's copy agrees with the drafter: policy_trace.py)
        traced.append({"prompt": ids, "reply": reply, "dflash": runs, "dflash_drafts": drafted,
                       "dflash_sure": sure})
        if args.prompt_tail:
            first = max(2, len(ids) - args.prompt_tail)
            traced[-1]["prompt_dflash"] = kept_runs(drafter, states, whole, first, len(ids))
        target.state_layers = ()
        mean = sum(min(r, 15) + 1 for r in runs) / max(len(runs), 1)
        print(f"turn {n + 1}: prompt {len(ids)} tokens, reply {len(reply)}, drafts kept a position "
              f"{sum(runs) / max(len(runs), 1):.2f} (k 15, from every position: {mean:.2f} tokens a step); "
              f"{t1 - t0:.0f} s to reply, {time.perf_counter() - t1:.0f} s to trace", file=sys.stderr)
        with (gzip.open if args.out.endswith(".gz") else open)(args.out, "wt") as f:
            json.dump({"model": args.model, "drafter": args.drafter, "block": drafter.block_size, "known": drafter.measured,
                       "max_new_tokens": args.max_new_tokens, "turns": traced}, f)


def read_trace(path: str) -> dict:
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        return json.load(f)


if __name__ == "__main__":
    main()
