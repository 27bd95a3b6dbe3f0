"""`specchat run`: one prompt, the reply on stdout as it streams, a summary line on stderr."""

from __future__ import annotations

import sys
import time

from engine import EngineError, stream
from specchat.options import load_target, progress_line, proposer_from, sampling_from


def read_prompt(args) -> str:
    if args.prompt is not None:
        return args.prompt
    if args.prompt_file:
        try:
            with open(args.prompt_file, encoding="utf-8") as f:
                return f.read()
        except OSError as err:
            raise EngineError(f"cannot read {args.prompt_file}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise EngineError(f"cannot read {args.prompt_file}: not UTF-8 text") from None
    if sys.stdin.isatty():
        raise EngineError("give a prompt: --prompt TEXT, --prompt-file FILE, or pipe it on standard input")
    return sys.stdin.read()


def run(args) -> int:
    sampling = sampling_from(args)
    prompt = read_prompt(args)
    model = load_target(args)
    proposer = proposer_from(args, model)
    if args.raw or model.tokenizer is None:
        ids = model.tokenizer.encode(prompt) if model.tokenizer else []
    else:
        ids = model.encode_chat([{"role": "user", "content": prompt}], system=args.system)
    print(file=sys.stderr)
    gen = stream(model, ids, sampling, stop_ids=model.stop_ids(), speculative=proposer)
    stop = set(model.stop_ids())
    shown = ""
    started = time.perf_counter()
    finished = None
    try:
        for step in gen:
            finished = step.finished or finished
            text = model.tokenizer.decode([t for t in gen.tokens if t not in stop])
            print(text[len(shown):], end="", flush=True)
            shown = text
    except KeyboardInterrupt:
        print("\n[cancelled]", file=sys.stderr)
    print()
    m = gen.metrics
    wall = time.perf_counter() - started
    who = proposer.describe() if proposer else "plain decoding"
    ending = ""
    if finished == "length" and len(gen.tokens) < sampling.max_tokens:
        ending = f", stopped: the context is full (--max-context {model.max_context}, the prompt took {len(ids)})"
    print(f"[{who}] {m.summary()}, prefill {1000 * m.prefill_s:.0f} ms, wall {wall:.1f} s{ending}", file=sys.stderr)
    return 0


def pull(args) -> int:
    from engine import packs

    if args.name is None:
        for name, pack in packs.PACKS.items():
            here = "in the cache" if (packs.model_dir(name) / "config.json").exists() else "not fetched"
            print(f"{name:20} {here:13} {pack.description}")
        print(f"cache: {packs.cache_root()}")
        return 0
    try:
        path = packs.ensure(args.name, progress=progress_line)
    finally:
        if sys.stderr.isatty():  # end the progress line before the path or an error
            print(file=sys.stderr)
    print(f"{args.name}: {path}")
    return 0
