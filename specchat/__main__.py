"""specchat command line: chat (default), run, generate, bench, compare, pull, dflash-prompts, train-dflash."""

from __future__ import annotations

import argparse
import sys

from engine import EngineError
from specchat.arguments import (
    add_generate_arguments,
    add_model_arguments,
    add_prompts_arguments,
    add_train_arguments,
)
from specchat.bench.arguments import (
    add_bench_arguments,
    add_chat_arguments,
    add_compare_arguments,
    add_steps_arguments,
)

DEFAULT_MODEL = "smollm2-135m"
BENCHES = ("table", "steps", "chat")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specchat",
        description="Chat with a model through a speculative-decoding engine and watch every draft.",
    )
    sub = p.add_subparsers(dest="command")
    chat = sub.add_parser("chat", help="the chat app (default)")
    add_model_arguments(chat, DEFAULT_MODEL)
    chat.add_argument("--system", default=None, help="system prompt (this run only)")
    chat.add_argument("--resume", action="store_true", help="reopen the last chat")
    # Unset sampling options keep the chat's saved settings; set ones hold for this run only.
    chat.set_defaults(temperature=None, top_k=None, top_p=None, seed=None, max_tokens=None)
    run = sub.add_parser("run", help="one prompt, printed reply and a summary line")
    add_model_arguments(run, DEFAULT_MODEL)
    run.add_argument("--prompt", help="the user message (default: read standard input)")
    run.add_argument("--prompt-file", help="read the user message from a file")
    run.add_argument("--system", default=None)
    run.add_argument("--raw", action="store_true", help="no chat template: the prompt is the text to continue")
    run.add_argument("--stats", metavar="FILE", default=None,
                     help="write the reply's figures (vLLM's metric names) to FILE.json and FILE.csv")
    gen = sub.add_parser("generate", help="replies to a JSONL file of prompts, decoded in batches")
    add_model_arguments(gen, DEFAULT_MODEL, speculation=False)
    add_generate_arguments(gen)
    kinds = sub.add_parser("bench", help="benchmarks: table (the default), steps, chat").add_subparsers(dest="what")
    for parent, name, help, add in (
        (kinds, "table", "the results table: speculative vs plain decoding vs transformers", add_bench_arguments),
        (kinds, "steps", "how long one decode or verify step takes, next to what bounds it", add_steps_arguments),
        (kinds, "chat", "the chat app driven headless: engine alone against the screen", add_chat_arguments),
        (sub, "compare", "every proposer at a few k on your own prompt, one table", add_compare_arguments),
        (sub, "dflash-prompts", "training prompts for a DFlash drafter, from code installed here",
         add_prompts_arguments),
        (sub, "train-dflash", "train a DFlash drafter for a model on its own replies", add_train_arguments),
    ):
        add(parent.add_parser(name, help=help))
    pull = sub.add_parser("pull", help="fetch and assemble an offline model pack ahead of use")
    pull.add_argument("name", nargs="?", default=None, help="pack name (no name: list packs)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    given = list(argv)  # as the user typed it: the bench records this command
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["chat", *argv]
    if argv[0] == "bench" and (len(argv) == 1 or argv[1] not in BENCHES + ("-h", "--help")):
        argv = ["bench", "table", *argv[1:]]  # the table is what `specchat bench` means
    args = parser().parse_args(argv)
    # Each command is imported when it runs: most load torch, which the help and the parser's own
    # errors do without.
    try:
        if args.command == "run":
            from specchat.cli_run import run

            return run(args)
        if args.command == "generate":
            from specchat.cli_generate import generate

            return generate(args)
        if args.command == "dflash-prompts":
            from specchat.cli_train import dflash_prompts

            return dflash_prompts(args)
        if args.command == "train-dflash":
            from specchat.cli_train import train

            return train(args)
        if args.command == "pull":
            from specchat.cli_run import pull

            return pull(args)
        if args.command == "bench" and args.what == "chat":
            from specchat.bench.chat import bench_chat  # the app: textual, only when asked

            return bench_chat(args)
        if args.command == "bench" and args.what == "steps":
            from specchat.bench.steps import bench_steps

            return bench_steps(args)
        if args.command == "bench":
            from specchat.bench.cli import bench

            return bench(args, given)
        if args.command == "compare":
            from specchat.bench.cli import compare

            return compare(args)
        if args.command == "chat":
            from specchat.app import main as chat_main

            return chat_main(args)
    except EngineError as err:
        print(f"specchat: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return 130
    parser().print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
