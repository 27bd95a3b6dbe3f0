"""The options of `specchat bench chat`, apart from the bench itself (which needs the app's packages)."""

from __future__ import annotations

import argparse

from specchat.options import add_need_options, add_target_options


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
    p.add_argument("--sample-drafts", action="store_true", help="the draft model samples its drafts")
    add_target_options(p)
    p.add_argument("--eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--scripted", action="store_true", help="a paced script instead of a model")
    p.add_argument("--pace", type=parse_pace, nargs="+", default=[(12, 6000.0), (4, 2000.0), (1, 660.0)],
                   metavar="STEPS:TOK_S", help="with --scripted: STEP_TOKENS:TOK_S cases (default 12:6000 4:2000 1:660)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per reply (default: 2000 scripted, 512)")
    p.add_argument("--k", type=int, nargs="+", default=[15, 4], help="k of each proposer's cases (default 15 4)")
    p.add_argument("--prompt-file", help="the user message (default: rename a class throughout textwrap's code)")
    p.add_argument("--repeats", type=int, default=3, help="timed replies per case (the median is shown)")
