"""Tokens per step (tau) of trained DFlash drafters at k = 15, greedy, on the bench's edit and
explanation prompts, on held-out prompts (code the drafter never trained on) and, with
--held-out-long, on held-out prompts of long code (contexts as long as the bench's), beside a
random-weight drafter of the same shape. A drafter that drafts over a vocabulary of its own
(draft_vocab.json) is measured a second time without it, as z-lab's loaders, vLLM and SGLang
read its files (their argmax runs over every row of lm_head). Prints one table; writes it as
JSON with --json.

    python bench/gpu/dflash_tau.py qwen2.5-coder-1.5b DRAFTER_DIR [DRAFTER_DIR ...] \
        --held-out eval.jsonl [--held-out-long eval-long.jsonl] --max-tokens 256 --json tau.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from engine import load_drafter, load_model, measure_tau, write_random_drafter
from specchat.bench.prompts import builtin_prompts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("drafters", nargs="+")
    p.add_argument("--held-out", required=True, help="prompts JSONL from `specchat dflash-prompts --held-out`")
    p.add_argument("--held-out-count", type=int, default=16)
    p.add_argument("--held-out-long", default=None,
                   help="prompts JSONL from `specchat dflash-prompts --held-out --long-only --long-chars N`")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    target = load_model(args.model, max_context=4096)
    builtin = builtin_prompts()
    sets = {name: [target.encode_chat([{"role": "user", "content": builtin[name].text}])] for name in ("edit", "explain")}
    sets["held-out"] = encoded(target, args.held_out)[: args.held_out_count]
    if args.held_out_long:
        sets["held-out long"] = encoded(target, args.held_out_long)
        lengths = sorted(len(ids) for ids in sets["held-out long"])
        print(f"held-out long: {len(lengths)} prompts of {lengths[0]}-{lengths[-1]} tokens "
              f"(median {lengths[len(lengths) // 2]})")
    layers = json.loads((Path(args.drafters[0]) / "config.json").read_text())["num_hidden_layers"]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        random_dir = write_random_drafter(Path(tmp) / "random", target, num_layers=layers)
        for name, folder in [("random", str(random_dir)), *drafter_rows(args.drafters, Path(tmp))]:
            drafter = load_drafter(folder, target)
            rows[name] = {s: measure_tau(target, drafter, ids, args.max_tokens, k=15) for s, ids in sets.items()}
            del drafter
            torch.cuda.empty_cache()
    print(f"\ntau (tokens per step, bonus included) at k = 15, greedy, {args.max_tokens} new tokens, {args.model}")
    print(f"{'drafter':<60}" + "".join(f"{s:>15}" for s in sets))
    for name, row in rows.items():
        print(f"{name[-60:]:<60}" + "".join(f"{row[s]:>15.2f}" for s in sets))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "max_tokens": args.max_tokens, "tau": rows},
                                              indent=2))


def encoded(target, path: str) -> list[list[int]]:
    """The prompts of a `dflash-prompts` file, through the target's chat template."""
    lines = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    return [target.encode_chat(x["messages"]) for x in lines]


def drafter_rows(drafters: list[str], tmp: Path) -> list[tuple[str, str]]:
    """(row name, folder) of each drafter and, for one with a vocabulary of its own, a folder of
    its z-lab files alone (linked), named "... as served elsewhere"."""
    rows = []
    for i, d in enumerate(drafters):
        rows.append((d, d))
        if (Path(d) / "draft_vocab.json").is_file():
            bare = tmp / f"bare-{i}"
            bare.mkdir()
            for f in Path(d).iterdir():
                if f.is_file() and f.name != "draft_vocab.json":
                    (bare / f.name).symlink_to(f.resolve())
            rows.append((f"{Path(d).name}, whole vocabulary (as served elsewhere)", str(bare)))
    return rows


if __name__ == "__main__":
    main()
