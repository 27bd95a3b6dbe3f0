"""Chat tasks of the kinds people ask a coding model, made from a unit of code: rename or
refactor, explain, document, write tests, complete a function, fix a bug (one small bug is put
in first), translate to another language. Each task is a user message; the reply will be the
target's own."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from engine.speculation.proposers.dflash.training.sources import CodeUnit

LANGUAGES = ("JavaScript", "TypeScript", "Go", "Rust", "Java", "C++", "C#", "Kotlin")
# small bugs: (pattern, replacement), the first that applies is put in at its first match
BUGS = ((r" <= ", " < "), (r" >= ", " > "), (r" == ", " != "), (r" \+ 1\b", " - 1"), (r"\band\b", "or"),
        (r"\bTrue\b", "False"), (r"\[0\]", "[1]"), (r"\bnot ", ""))


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def rename(unit: CodeUnit, rng: random.Random) -> str:
    choices = [unit.name, *unit.arguments]
    old = rng.choice(choices)
    new = rng.choice(("renamed", "new", "better", "clear")) + "_" + old.lstrip("_") if old[0].islower() \
        else "New" + old.lstrip("_")
    return f"Rename `{old}` to `{new}` throughout this code and show the whole result.\n\n{fenced(unit.code)}"


def refactor(unit: CodeUnit, rng: random.Random) -> str:
    goal = rng.choice(("make it easier to read", "split it into smaller functions", "remove duplication",
                       "use modern Python idioms"))
    return f"Refactor this {unit.kind} to {goal}, keeping its behaviour.\n\n{fenced(unit.code)}"


def explain(unit: CodeUnit, rng: random.Random) -> str:
    ask = rng.choice(("Explain what this code does.", "Explain how this works, step by step.",
                      f"What is `{unit.name}` for, and how does it work?"))
    return f"{ask}\n\n{fenced(unit.code)}"


def document(unit: CodeUnit, rng: random.Random) -> str:
    return f"Add docstrings and type hints to this code.\n\n{fenced(unit.code)}"


def tests(unit: CodeUnit, rng: random.Random) -> str:
    return f"Write pytest unit tests for `{unit.name}` from `{unit.module}`.\n\n{fenced(unit.code)}"


def complete(unit: CodeUnit, rng: random.Random) -> str | None:
    lines = unit.code.splitlines()
    if unit.kind != "function" or len(lines) < 8:
        return None
    cut = rng.randint(len(lines) // 3, 2 * len(lines) // 3)
    return f"Complete this function.\n\n{fenced(chr(10).join(lines[:cut]))}"


def fix(unit: CodeUnit, rng: random.Random) -> str | None:
    for pattern, replacement in rng.sample(BUGS, len(BUGS)):
        buggy, count = re.subn(pattern, replacement, unit.code, count=1)
        if count:
            return f"This code has a bug. Find it and fix it.\n\n{fenced(buggy)}"
    return None


def translate(unit: CodeUnit, rng: random.Random) -> str:
    return f"Translate this Python code to {rng.choice(LANGUAGES)}.\n\n{fenced(unit.code)}"


TASKS: dict[str, Callable[[CodeUnit, random.Random], str | None]] = {
    "rename": rename, "refactor": refactor, "explain": explain, "document": document, "tests": tests,
    "complete": complete, "fix": fix, "translate": translate,
}


def make_task(unit: CodeUnit, rng: random.Random) -> tuple[str, str]:
    """(task kind, user message) for the unit: a random kind that applies to it."""
    for kind in rng.sample(list(TASKS), len(TASKS)):
        message = TASKS[kind](unit, rng)
        if message is not None:
            return kind, message
    raise AssertionError("explain applies to every unit")
