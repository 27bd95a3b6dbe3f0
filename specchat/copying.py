"""What the copy keys take from a reply: all of its text, or its last fenced code block."""

from __future__ import annotations

import re

# A fence opens with ``` (and an optional language) on its own line and closes with ``` on its own
# line; a reply cut off mid-block leaves the block open, and what was written of it still counts.
FENCE = re.compile(r"^[ \t]*```[^\n`]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)


def code_blocks(text: str) -> list[str]:
    """The fenced code blocks of `text`, in order, each without its fences."""
    return [block.rstrip("\n") for block in FENCE.findall(text)]


def last_code_block(text: str) -> str | None:
    blocks = code_blocks(text)
    return blocks[-1] if blocks else None
