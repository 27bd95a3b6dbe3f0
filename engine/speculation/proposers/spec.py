"""How a proposer declares itself to the registry: its name, what it needs and how it is built.

Each proposer package in engine/speculation/proposers/ sets `SPEC = ProposerSpec(...)` in its
`__init__.py`; the registry finds it there, and every front end (run, the chat, compare, bench, the
help screen) lists and builds proposers only through the registry. Building has two stages because
the slow part (loading a draft model or a drafter) happens once, while a proposer per k is cheap:
`load(target, options)` returns what the proposer drafts with, `make(loaded, k)` a proposer.

A SPEC names its drafting code with `deferred` instead of importing it: listing proposers (the
help, the command line's options) then reads the declarations alone and never loads torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.limits import MAX_K


@dataclass(frozen=True)
class Need:
    """Something a proposer cannot draft without, given on the command line as --OPTION VALUE."""

    option: str  # "draft": --draft MODEL
    metavar: str  # "MODEL"
    help: str
    missing: str  # why the proposer is not offered when it is not given


@dataclass
class ProposerOptions:
    """What the user chose for building proposers: the value of each Need given (option -> value),
    whether drafts are sampled, whether CUDA graphs are off, and where loading reports progress."""

    sources: dict[str, str]
    sample_drafts: bool = False
    eager: bool = False
    progress: Callable[[str], None] | None = None


def deferred(module: str, name: str) -> Callable:
    """The function `name` of `module`, imported on its first call."""

    def call(*args):
        return getattr(importlib.import_module(module), name)(*args)

    call.__qualname__ = f"{module}.{name}"
    return call


def load_nothing(target, options: ProposerOptions) -> None:
    return None


@dataclass(frozen=True)
class ProposerSpec:
    name: str  # as the command line spells it: --proposer NAME, bench and compare rows
    label: str  # as the chat shows it
    summary: str  # one line for the help screen and --help
    make: Callable[[Any, int], Any]  # (loaded, k) -> Proposer
    load: Callable[[Any, ProposerOptions], Any] = load_nothing  # (target, options) -> loaded
    need: Need | None = None
    max_k: Callable[[Any], int] = lambda loaded: MAX_K  # the largest k for what was loaded
    default_k: int = 4
    order: int = 100  # place in lists: the cheapest proposer first
    describe: Callable[[Any], str] | None = None  # (loaded) -> a row label, e.g. "draft qwen-0.5b"
    # (target) -> a value for the need found without the user giving it (a drafter trained for
    # this target in the cache), or None
    find: Callable[[Any], str | None] | None = None
