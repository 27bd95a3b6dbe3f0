"""The bench's multi-turn conversation (conversation.json): edits, explanations and free chat in
one history, where the best proposer and k change from turn to turn and within turns."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

from specchat.bench.prompts import normalised_source

FILE = Path(__file__).with_name("conversation.json")


def load_turns(path: Path = FILE) -> list[str]:
    """The user messages, each {source:module.name} replaced by that object's source."""
    turns = json.loads(path.read_text(encoding="utf-8"))["turns"]
    return [re.sub(r"\{source:([\w.]+)\}", lambda m: source_of(m.group(1)), t) for t in turns]


def source_of(dotted: str) -> str:
    module, _, name = dotted.rpartition(".")
    return normalised_source([getattr(importlib.import_module(module), name)]).rstrip("\n")
