"""The options of `specchat bench` (table, steps, chat) and `specchat compare`, apart from the
benchmarks themselves, which load torch (or the app): the help answers without them."""

from __future__ import annotations

import argparse

from engine import PRESETS
from specchat.arguments import BATCH_INVARIANT_HELP, add_need_options, add_target_options, k_value

DEFAULT_KS = [1, 2, 4, 7, 10, 15]
COMPARE_KS = [2, 4, 8]


def add_common_arguments(
    p: argparse.ArgumentParser, ks: list[int], max_new_tokens: int, repeats: int
) -> None:
    p.add_argument(
        "--model", default="smollm2-135m", help="target: pack name, HF directory, GGUF file or hub id"
    )
    add_need_options(p)
    add_target_options(p)
    p.add_argument("--sample-drafts", action="store_true",
                   help="the draft model and the DFlash drafter sample their drafts (min(1, p/q) rule): "
                        "sampled rows then follow the model's distribution, not plain sampling's tokens")
    p.add_argument("--batch-invariant", action="store_true", help=BATCH_INVARIANT_HELP)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: torch's choice; 1 keeps a busy machine's cores from stalling steps)",
    )
    p.add_argument("--max-tokens", "--max-new-tokens", dest="max_new_tokens", type=int, default=max_new_tokens,
                   help="new tokens per run (as `run` takes it; --max-new-tokens is the same)")
    p.add_argument("--k", type=k_value, nargs="+", default=ks, metavar="K",
                   help="drafts per step to try; auto: chosen each step (and, with several proposers, "
                   "a row where each step also chooses the proposer)")
    p.add_argument("--repeats", type=int, default=repeats, help="timed runs per row (the median is kept)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before them")


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p, DEFAULT_KS, 128, 3)
    p.add_argument("--prompts", nargs="+", metavar="NAME", help="edit, explain (default both) or text files")
    p.add_argument("--no-peers", action="store_true", help="skip transformers' generate")
    p.add_argument("--peer-k", type=int, nargs="+", metavar="K",
                   help="k values of transformers' rows (default: those of --k; its runs are slow)")
    s = p.add_mutually_exclusive_group()
    s.add_argument(
        "--sampled",
        dest="sampled",
        action="store_true",
        default=True,
        help="greedy and sampled rows (the default)",
    )
    s.add_argument("--greedy-only", dest="sampled", action="store_false", help="greedy rows only")
    p.add_argument("--temperature", type=float, default=0.7, help="of the sampled rows")
    p.add_argument("--top-p", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-results", metavar="DIR", help="where bench.json and bench.png go")
    p.add_argument(
        "--from-json",
        nargs="+",
        metavar="FILE",
        help="no run: the tables and chart of earlier bench.json files (several: merged, e.g. one per prompt)",
    )


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p, COMPARE_KS, 128, 1)
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--prompt", help="the user message to compare on")
    given.add_argument("--prompt-file", help="read the user message from a file")
    p.add_argument("--raw", action="store_true", help="no chat template: the file is the text to continue")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)


def add_steps_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--random", choices=sorted(PRESETS), help="random weights of this shape")
    which.add_argument("--model", help="pack name, HF directory or GGUF file")
    p.add_argument("--contexts", type=int, nargs="+", default=[1024, 8192])
    p.add_argument("--lengths", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--repeats", type=int, default=50, help="timed steps per figure (the median is kept)")
    p.add_argument("--no-transformers", action="store_true", help="skip transformers' forward")
    p.add_argument("--no-eager", action="store_true", help="skip the eager step")
    p.add_argument("--drafter-pass", action="store_true",
                   help="also time a DFlash drafter's pass (random weights; 2 and 5 layers)")
    p.add_argument("--json", metavar="FILE", help="also write the figures here")
    p.add_argument("--batch-invariant", action="store_true",
                   help="time the steps that compute every row alike whatever the step's length")


def parse_pace(text: str) -> tuple[int, float]:
    tokens, _, rate = text.partition(":")
    try:
        pace = int(tokens), float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a pace is STEP_TOKENS:TOK_S, like 4:2000, not {text!r}") from None
    if not 1 <= pace[0] <= 16 or pace[1] <= 0:
        raise argparse.ArgumentTypeError(f"a pace needs 1 to 16 tokens per step and a positive rate: {text!r}")
    return pace


def add_chat_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help="pack name, HF directory, GGUF file or hub id")
    add_need_options(p)
    p.add_argument("--sample-drafts", action="store_true",
                   help="the draft model and the DFlash drafter sample their drafts (min(1, p/q) rule)")
    add_target_options(p)
    p.add_argument("--eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--scripted", action="store_true", help="a paced script instead of a model")
    p.add_argument("--pace", type=parse_pace, nargs="+", default=[(12, 6000.0), (4, 2000.0), (1, 660.0)],
                   metavar="STEPS:TOK_S", help="with --scripted: STEP_TOKENS:TOK_S cases (default 12:6000 4:2000 1:660)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per reply (default: 2000 scripted, 512)")
    p.add_argument("--k", type=int, nargs="+", default=[15, 4], help="k of each proposer's cases (default 15 4)")
    p.add_argument("--prompt-file", help="the user message (default: rename a class throughout textwrap's code)")
    p.add_argument("--repeats", type=int, default=3, help="timed replies per case (the median is shown)")
