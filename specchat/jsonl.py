"""The files of `specchat generate`: prompts in, replies out, one JSON object a line.

A prompt line holds "prompt" (a user message) or "messages" (a conversation), and may hold
"id"; without one, its line number is its id. A reply line holds the prompt's id and line,
the reply's text, its token ids and why it ended. Replies are appended as they finish, so an
interrupted run keeps every finished reply, and a rerun skips the ids already written.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from engine import EngineError


@dataclass
class PromptLine:
    line: int  # 1-based line number in the prompts file
    id: object  # the line's "id", or its line number
    prompt: str | None = None
    messages: list | None = None


def read_prompts(path: str) -> list[PromptLine]:
    """Every prompt of the file; a line that is not a prompt stops with its line number."""
    prompts, seen = [], {}
    for number, text in enumerate(read_lines(path), 1):
        if not text.strip():
            continue
        item = parse_line(path, number, text)
        prompt, messages = item.get("prompt"), item.get("messages")
        if not (isinstance(prompt, str) and prompt) and not (isinstance(messages, list) and messages):
            raise EngineError(f"{path} line {number}: needs a non-empty \"prompt\" string or \"messages\" list")
        if messages is not None and not all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                            and isinstance(m.get("role"), str) for m in messages):
            raise EngineError(f"{path} line {number}: each message needs a \"role\" and a \"content\" string")
        key = item.get("id", number)
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise EngineError(f"{path} line {number}: \"id\" must be a string or a whole number")
        if key in seen:
            raise EngineError(f"{path} line {number}: id {key!r} was already used on line {seen[key]}")
        seen[key] = number
        prompts.append(PromptLine(number, key, prompt if messages is None else None, messages))
    if not prompts:
        raise EngineError(f"{path} holds no prompts (one JSON object a line, with \"prompt\" or \"messages\")")
    return prompts


def written_ids(path: str) -> set:
    """Ids of the replies an earlier run wrote to `path` (none if it does not exist yet). A last
    line cut short by an interrupted write is removed; every complete line stays."""
    if not os.path.exists(path):
        return set()
    lines = read_lines(path)
    if lines and not lines[-1].endswith("\n"):
        with open(path, "r+b") as f:  # a torn tail: cut the file back to its last whole line
            f.truncate(len("".join(lines[:-1]).encode("utf-8")))
        lines = lines[:-1]
    ids = set()
    for number, text in enumerate(lines, 1):
        if text.strip():
            item = parse_line(path, number, text)
            if "id" not in item:
                raise EngineError(f"{path} line {number}: a reply without an \"id\" (is this the prompts file?)")
            ids.add(item["id"])
    return ids


def append_reply(f, prompt: PromptLine, text: str, tokens: list[int], reason: str) -> None:
    reply = {"id": prompt.id, "line": prompt.line, "response": text, "tokens": tokens, "finish": reason}
    f.write(json.dumps(reply, ensure_ascii=False) + "\n")
    f.flush()


def read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.readlines()
    except OSError as err:
        raise EngineError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise EngineError(f"cannot read {path}: not UTF-8 text") from None


def parse_line(path: str, number: int, text: str) -> dict:
    try:
        item = json.loads(text)
    except json.JSONDecodeError as err:
        raise EngineError(f"{path} line {number}: not JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(item, dict):
        raise EngineError(f"{path} line {number}: not a JSON object")
    return item
