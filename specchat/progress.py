"""Progress of long work on stderr through Rich's bars, for every command: the steps the engine
reports while it fetches, converts or loads a model ("fetching ... (2/3)" becomes a bar two thirds
full), the runs of bench and compare, and the counted work of generate and train-dflash. In a log (stderr not a terminal) Rich draws nothing, so plain lines are written
instead: each message, or for runs a line at the start and at every tenth of the way."""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

FRACTION = re.compile(r"(\d+)\s*/\s*(\d+)")  # "3/12" in an engine message: done and total


def stderr_console() -> Console:
    return Console(file=sys.stderr)


def fraction(message: str) -> tuple[int, int] | None:
    """The last "done/total" in `message`, if it has one with a total above zero."""
    found = FRACTION.findall(message)
    if not found:
        return None
    done, total = (int(x) for x in found[-1])
    return (done, total) if total else None


@contextmanager
def run_progress(total: int):
    """Yields `tick(label)`, called before each of `total` runs."""
    console, total = stderr_console(), max(total, 1)
    started = 0
    if not console.is_terminal:
        def tick(label: str) -> None:
            nonlocal started
            started += 1
            if started == 1 or 10 * started // total > 10 * (started - 1) // total:
                print(f"{started}/{total} {label}", file=sys.stderr, flush=True)
        yield tick
        return
    with Progress(
        BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        TextColumn("{task.description}"), console=console,
    ) as bar:
        task = bar.add_task("", total=total)

        def tick(label: str) -> None:
            nonlocal started
            bar.update(task, completed=started, description=label)  # the runs before this one are done
            started += 1

        yield tick
        bar.update(task, completed=started, description="done")


@contextmanager
def message_progress():
    """Yields a callback for the engine's progress messages: a bar while they count, a line of text
    while they do not."""
    console = stderr_console()
    if not console.is_terminal:
        yield lambda message: print(message, file=sys.stderr, flush=True)
        return
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as bar:
        task = bar.add_task("", total=None)

        def show(message: str) -> None:
            counted = fraction(message)
            done, total = counted if counted else (0, None)
            bar.update(task, description=message, completed=done, total=total)

        yield show


def counted_bar(unit: str, *figures: ProgressColumn) -> Progress:
    """A bar of `unit`s done out of their total, with the command's own `figures` beside it."""
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn(unit), *figures, console=stderr_console())
