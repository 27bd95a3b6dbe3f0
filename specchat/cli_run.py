"""`specchat run`: one prompt, the reply on stdout as it streams, a summary line on stderr."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engine import PACKS, Detokenizer, EngineError, cache_root, ensure_pack, pack_dir, stream
from specchat.options import check_k_flags, load_target, proposer_from, sampling_from
from specchat.progress import message_progress
from specchat.stats_file import write_stats


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
    check_k_flags(args)  # before the model loads: a bad flag costs no wait
    with message_progress() as progress:  # fetching, converting, loading: a bar where they count
        model = load_target(args, progress)
        proposer = proposer_from(args, model, progress)
    if args.raw or model.tokenizer is None:
        ids = model.tokenizer.encode(prompt) if model.tokenizer else []
    else:
        ids = model.encode_chat([{"role": "user", "content": prompt}], system=args.system)
    if model.graphs is not None or proposer is not None:
        # compile and capture before the clock starts, as the chat does at load (on the CPU
        # nothing to capture: k auto's step costs are still timed here)
        with message_progress() as progress:
            if model.graphs is not None:
                progress("compiling kernels and capturing CUDA graphs")
                model.warm_up(sampling, progress=progress)
            if proposer is not None:
                proposer.warm_up(model, sampling, progress)
    gen = stream(model, ids, sampling, stop_ids=model.stop_ids(), speculative=proposer)
    detok = Detokenizer.of(model)
    started = time.perf_counter()
    finished = None
    try:
        for step in gen:
            finished = step.finished or finished
            print("".join(detok.add(step.tokens)), end="", flush=True)
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
    if args.stats:
        about = {"model": args.model, "proposer": who, "finished": finished}
        written = write_stats(Path(args.stats), {"reply": m, "session": m}, about)
        print(f"figures written to {written[0]} and {written[1]}", file=sys.stderr)
    return 0


def pull(args) -> int:
    if args.name is None:
        for name, pack in PACKS.items():
            here = "in the cache" if (pack_dir(name) / "config.json").exists() else "not fetched"
            print(f"{name:20} {here:13} {pack.description}")
        print(f"cache: {cache_root()}")
        return 0
    with message_progress() as progress:
        path = ensure_pack(args.name, progress=progress)
    print(f"{args.name}: {path}")
    return 0
