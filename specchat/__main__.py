"""specchat command line: chat (default), run, bench, compare, pull."""

from __future__ import annotations

import argparse
import sys

DEFAULT_MODEL = "smollm2-135m"


def add_model_options(p: argparse.ArgumentParser) -> None:
    from specchat.cli_bench import BATCH_INVARIANT_HELP

    g = p.add_argument_group("model")
    g.add_argument("--model", default=DEFAULT_MODEL, help="pack name, HF directory, GGUF file or hub id")
    g.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    g.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    g.add_argument("--max-context", type=int, default=None,
                   help="tokens of KV cache per model (default 4096, or the model's positions if fewer)")
    g.add_argument("--eager", action="store_true", help="no CUDA graphs")
    g.add_argument("--batch-invariant", action="store_true", help=BATCH_INVARIANT_HELP)
    s = p.add_argument_group("speculation")
    s.add_argument("--speculate", type=int, metavar="K", help="n-gram (prompt lookup) drafts, K per step")
    s.add_argument("--draft", metavar="MODEL", help="draft model with the target's vocabulary")
    s.add_argument("--dflash", metavar="DRAFTER", help="DFlash drafter directory (z-lab format)")
    s.add_argument("-k", type=int, default=None, help="drafts per step for --draft / --dflash")
    s.add_argument("--sample-drafts", action="store_true", help="draft model samples its drafts (min(1, p/q) rule)")
    a = p.add_argument_group("sampling")
    a.add_argument("--temperature", type=float, default=0.0)
    a.add_argument("--top-k", type=int, default=0)
    a.add_argument("--top-p", type=float, default=1.0)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--max-tokens", type=int, default=256)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specchat",
        description="Chat with a model through a speculative-decoding engine and watch every draft.",
    )
    sub = p.add_subparsers(dest="command")
    chat = sub.add_parser("chat", help="the chat app (default)")
    add_model_options(chat)
    chat.add_argument("--system", default=None, help="system prompt (this run only)")
    chat.add_argument("--resume", action="store_true", help="reopen the last chat")
    # Unset sampling options keep the chat's saved settings; set ones hold for this run only.
    chat.set_defaults(temperature=None, top_k=None, top_p=None, seed=None, max_tokens=None)
    run = sub.add_parser("run", help="one prompt, printed reply and a summary line")
    add_model_options(run)
    run.add_argument("--prompt", help="the user message (default: read standard input)")
    run.add_argument("--prompt-file", help="read the user message from a file")
    run.add_argument("--system", default=None)
    run.add_argument("--raw", action="store_true", help="no chat template: the prompt is the text to continue")
    from specchat.cli_bench import add_bench_arguments, add_compare_arguments

    bench = sub.add_parser("bench", help="the results table: speculative vs plain decoding vs transformers")
    bench.add_argument("what", nargs="?", default="table", choices=["table", "steps"],
                       help="table (the default) or steps (the step-time bench)")
    add_bench_arguments(bench)
    compare = sub.add_parser("compare", help="every proposer at a few k on your own prompt, one table")
    add_compare_arguments(compare)
    pull = sub.add_parser("pull", help="fetch and assemble an offline model pack ahead of use")
    pull.add_argument("name", nargs="?", default=None, help="pack name (no name: list packs)")
    return p


def main(argv: list[str] | None = None) -> int:
    from engine.errors import EngineError

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["chat", *argv]
    if argv[:2] == ["bench", "steps"]:  # the step-time bench parses its own options
        return bench_steps(argv[2:])
    args = parser().parse_args(argv)
    try:
        if args.command == "run":
            from specchat.cli_run import run

            return run(args)
        if args.command == "pull":
            from specchat.cli_run import pull

            return pull(args)
        if args.command == "bench":
            from specchat.cli_bench import bench

            return bench(args, argv)
        if args.command == "compare":
            from specchat.cli_bench import compare

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


def bench_steps(argv: list[str]) -> int:
    from engine.bench.steps import main as steps_main
    from engine.errors import EngineError

    try:
        return steps_main(argv)
    except EngineError as err:
        print(f"specchat: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
