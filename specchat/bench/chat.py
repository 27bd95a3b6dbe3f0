"""`specchat bench chat`: how much of the engine's speed reaches the screen.

For each case (plain decoding, each proposer at each k) it times the same reply three ways:
the engine alone (a thread running the reply into a feed nobody reads, as the app's worker
does), the engine's own step times while the app shows it, and the wall time from Enter to the
last token on the screen of the real app, driven headless through Textual's Pilot. The first
reply of each case in a fresh app is timed apart: on a GPU it pays for compiling kernels. A
second table says where the time on screen went (specchat.timeline): the app before the engine
starts, prefill, steps, the wait for the app's turn after the last step, the end's paint.

With --scripted the engine is a paced script (see specchat.bench.paced) instead of a model.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from engine import EngineError, SamplingParams
from specchat.bench.paced import PacedSession
from specchat.feed import StepFeed
from specchat.progress import message_progress
from specchat.session import ChatSession
from specchat.timeline import SPANS, ReplyTimeline

SCREEN = (160, 50)
POLL_S = 0.02  # how often the bench looks whether a reply is on the screen


@dataclass
class Case:
    label: str
    session: ChatSession
    proposer: str  # "off", "n-gram", "draft", "dflash"
    k: int
    alone: list[float] = field(default_factory=list)  # engine alone: wall seconds per reply
    steps: list[float] = field(default_factory=list)  # in the app: the engine's own prefill + step time
    shown: list[float] = field(default_factory=list)  # in the app: Enter to the last token on screen
    first: float | None = None  # the first reply of this case in a fresh app
    first_timeline: ReplyTimeline | None = None  # ... and where its time went
    timelines: list[ReplyTimeline] = field(default_factory=list)  # of the later replies in the app
    tokens: int = 0


def edit_prompt() -> str:
    """Rename a class throughout its code: textwrap.TextWrapper without its docstrings."""
    tree = ast.parse(inspect.getsource(textwrap.TextWrapper))
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    code = ast.unparse(tree)
    return (
        "Rename the class TextWrapper to LineWrapper everywhere in this code. Reply with the whole "
        f"updated code and nothing else.\n\n```python\n{code}\n```"
    )


def run_alone(case: Case, text: str, sampling: SamplingParams) -> None:
    """One reply on a thread of its own, no app: the time a perfect display would show it in."""
    session = case.session
    ids = session.prompt_ids([{"role": "user", "content": text}], "")
    gen = session.stream(ids, sampling, session.proposer(case.proposer, case.k))
    worker = threading.Thread(target=session.run_reply, args=(gen, StepFeed(0, session.detokenizer()), lambda message: None))
    began = time.perf_counter()
    worker.start()
    worker.join()
    case.alone.append(time.perf_counter() - began)
    case.tokens = gen.metrics.tokens + 1


async def run_in_app(cases: list[Case], text: str, max_tokens: int, repeats: int, first: bool) -> None:
    """Each case's replies in one fresh app on their shared session; `first`: one cold reply each."""
    from specchat.app import make_app
    from specchat.settings import Settings

    app = make_app(cases[0].session, Settings(max_tokens=max_tokens), save=False)
    async with app.run_test(size=SCREEN) as pilot:
        prompt = app.query_one("#prompt")
        while prompt.disabled:
            await asyncio.sleep(POLL_S)
        for case in cases:
            for _ in range(repeats):
                app.action_new_chat()  # the same prompt each time, not a growing conversation
                app.settings.k = case.k
                app.use_proposer(case.proposer)
                seen_before = app.stats.session_seen_s
                prompt.value = text
                await pilot.press("enter")
                while app.gen is not None or app.stats.session_seen_s == seen_before:
                    await asyncio.sleep(POLL_S)
                if first and case.first is None:
                    case.first, case.first_timeline = app.stats.seen_s, app.timeline
                else:
                    case.shown.append(app.stats.seen_s)
                    case.timelines.append(app.timeline)
                    case.steps.append(app.stats.reply.prefill_s + app.stats.reply.decode_s)


def table(cases: list[Case]) -> str:
    head = (
        "| case | tokens | engine alone s | engine steps in the app s | on screen s | on screen / alone "
        "| first reply on screen s | first / later |"
    )
    lines = [head, "|" + "---|" * 8]
    for c in cases:
        alone, shown = statistics.median(c.alone), statistics.median(c.shown)
        first = f"{c.first:.3f} | {c.first / shown:.2f}x" if c.first is not None else "- | -"
        lines.append(
            f"| {c.label} | {c.tokens} | {alone:.3f} | {statistics.median(c.steps):.3f} | {shown:.3f} "
            f"| **{shown / alone:.2f}x** | {first} |"
        )
    return "\n".join(lines)


def breakdown(cases: list[Case]) -> str:
    """Where the on-screen time went, per case: the medians of the later replies in the app, then
    the first reply of each case in a fresh app."""
    labels = [label for label, _, _ in SPANS]
    lines = ["| case | " + " | ".join(f"{label} s" for label in labels) + " | app thread CPU s | frames |",
             "|" + "---|" * (len(labels) + 3)]
    rows = [(c.label, c.timelines) for c in cases]
    rows += [(f"{c.label}, first reply", [c.first_timeline]) for c in cases if c.first_timeline is not None]
    for label, timelines in rows:
        spans = [t.spans() for t in timelines]
        cells = [statistics.median(s[name] for s in spans) if all(name in s for s in spans) else None
                 for name in labels]
        lines.append(f"| {label} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in cells)
                     + f" | {statistics.median(t.app_cpu_s for t in timelines):.3f}"
                     + f" | {statistics.median(t.frames for t in timelines):g} |")
    return "\n".join(lines)


def scripted_cases(args) -> list[Case]:
    cases = []
    for pace in args.pace:
        step_tokens, tok_s = pace
        session = PacedSession(args.max_new_tokens - 1, step_tokens, tok_s)
        proposer = "off" if step_tokens == 1 else "n-gram"
        label = f"{step_tokens}-token steps at {tok_s:g} tok/s"
        cases.append(Case(label, session, proposer, max(step_tokens - 1, 1)))
    return cases


def model_cases(args) -> list[Case]:
    """The cases of a real model, loaded on a thread of its own as the chat loads it: on a CPU, once
    the main thread has run torch's OpenMP regions, every other thread's small ops run slower
    (bench/RESULTS-cpu.md), and the app's engine runs on such a thread."""
    session = ChatSession(args)
    cases: list[Case] = []
    failed: list[Exception] = []

    def load() -> None:
        try:
            with message_progress() as progress:
                session.load(progress)
                cases.append(Case("plain", session, "off", 1))
                for name in session.proposer_names()[1:]:
                    for k in args.k:
                        session.proposer(name, k, progress)  # a draft model or drafter loads here, not timed
                        cases.append(Case(f"{name} k {k}", session, name, k))
        except Exception as err:  # noqa: BLE001 - raised again on the calling thread
            failed.append(err)

    loader = threading.Thread(target=load)
    loader.start()
    loader.join()
    if failed:
        raise failed[0]
    return cases


def bench_chat(args) -> int:
    """`specchat bench chat`: engine alone against the same replies on screen, per case."""
    args.max_new_tokens = args.max_new_tokens or (2000 if args.scripted else 512)
    if args.max_new_tokens < 2 or args.repeats < 1:
        print("specchat: --max-new-tokens must be at least 2 and --repeats at least 1", file=sys.stderr)
        return 1
    try:
        text = Path(args.prompt_file).read_text(encoding="utf-8") if args.prompt_file else edit_prompt()
    except (OSError, UnicodeDecodeError) as err:
        print(f"specchat: cannot read the prompt {args.prompt_file!r}: {err}", file=sys.stderr)
        return 1
    os.environ["SPECCHAT_HOME"] = tempfile.mkdtemp(prefix="specchat-bench-")  # the app's transcripts go here
    try:
        cases = scripted_cases(args) if args.scripted else model_cases(args)
        sampling = SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens)
        apps = [[c for c in cases if c.session is s] for s in dict.fromkeys(c.session for c in cases)]
        for shared in apps:  # first the cold replies: nothing has run on the model yet
            asyncio.run(run_in_app(shared, text, args.max_new_tokens, 1, first=True))
        for case in cases:
            for _ in range(args.repeats):
                run_alone(case, text, sampling)
        for shared in apps:
            asyncio.run(run_in_app(shared, text, args.max_new_tokens, args.repeats, first=False))
    except EngineError as err:
        print(f"specchat: {err}", file=sys.stderr)
        return 1
    what = "scripted engine" if args.scripted else f"{cases[0].session.label}, prompt {len(text)} characters"
    print(f"specchat bench chat · {what} · {args.max_new_tokens} tokens · {date.today()} · median of {args.repeats}")
    print(table(cases))
    print("\nwhere the time on screen went (medians of the later replies; then each first reply):\n")
    print(breakdown(cases))
    return 0
