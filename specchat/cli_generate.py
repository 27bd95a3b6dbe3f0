"""`specchat generate`: replies to a file of prompts, decoded in batches, appended to a file.

Every prompt is checked before the first reply is written (a malformed line, a prompt over
the context: one line naming it). Replies are appended as they finish; a rerun with the same
files skips the prompts already answered. Prompt i samples with seed --seed + its line number,
so a resumed run writes what one uninterrupted run would. The last line says where the time
went (prefill, decode steps, the host between them), an interrupted run's as well.
"""

from __future__ import annotations

import sys
import time

from rich.progress import ProgressColumn, TimeRemainingColumn
from rich.text import Text

from engine import BatchTimes, EngineError, generate_batch
from specchat.jsonl import append_reply, read_prompts, written_ids
from specchat.options import load_target, sampling_from
from specchat.progress import counted_bar, message_progress


def generate(args) -> int:
    sampling = sampling_from(args)
    if args.batch_size < 1:
        raise EngineError(f"--batch-size must be at least 1, got {args.batch_size}")
    prompts = read_prompts(args.prompts)
    done = written_ids(args.out)
    pending = [p for p in prompts if p.id not in done]
    if not pending:
        print(f"specchat: all {len(prompts)} prompts already have replies in {args.out}", file=sys.stderr)
        return 0
    with message_progress() as progress:
        model = load_target(args, progress)
    if model.tokenizer is None:
        raise EngineError(f"{args.model} has no tokenizer: it cannot read text prompts")
    ids = [encode(model, p, args) for p in pending]
    for p, prompt_ids in zip(pending, ids):
        if len(prompt_ids) + 1 > model.max_context:
            raise EngineError(f"{args.prompts} line {p.line}: the prompt has {len(prompt_ids)} tokens, over the "
                              f"{model.max_context}-token context (raise --max-context or shorten it)")
    stop = model.stop_ids()
    seeds = [sampling.seed + p.line for p in pending]
    bar = counted_bar("sequences", TokenRate(), TimeRemainingColumn())
    with open(args.out, "a", encoding="utf-8") as out, bar:
        task = bar.add_task("generate", total=len(pending), tokens=0, started=time.perf_counter())

        def write(finished) -> None:
            prompt = pending[finished.index]
            text = model.tokenizer.decode([t for t in finished.tokens if t not in stop])
            append_reply(out, prompt, text, finished.tokens, finished.reason)
            bar.update(task, advance=1, tokens=bar.tasks[task].fields["tokens"] + len(finished.tokens))

        times = BatchTimes()
        try:
            generate_batch(model, ids, sampling, stop, batch_size=args.batch_size, seeds=seeds, on_finish=write,
                           times=times)
        finally:  # an interrupted run says what it wrote and where its time went too (a rerun resumes)
            bar.stop()
            print(f"specchat: {bar.tasks[task].completed:.0f} of {len(pending)} replies appended to {args.out}; "
                  f"{times.summary()}", file=sys.stderr)
    return 0


def encode(model, prompt, args) -> list[int]:
    if prompt.messages is not None:
        return model.encode_chat(prompt.messages)
    if args.raw:
        return model.tokenizer.encode(prompt.prompt)
    return model.encode_chat([{"role": "user", "content": prompt.prompt}], system=args.system)


class TokenRate(ProgressColumn):
    """New tokens per second over the whole run (a reply counts when it finishes)."""

    def render(self, task) -> Text:
        elapsed = time.perf_counter() - task.fields["started"]
        rate = task.fields["tokens"] / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} tok/s", style="progress.data.speed")
