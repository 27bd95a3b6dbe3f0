"""A model's tokenizer (transformers' AutoTokenizer) and the streaming detokenizer every front end uses."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path


def load_tokenizer(path: Path, **kw):
    """The tokenizer saved in `path` (kw: e.g. gguf_file=NAME), or None when there is none."""
    from transformers import AutoTokenizer  # slow to import: only when a model is loaded

    try:
        return AutoTokenizer.from_pretrained(str(path), **kw)
    except Exception:  # noqa: BLE001 - a model without a usable tokenizer still runs on ids
        return None


class Detokenizer:
    """Text of each token of a reply as it arrives, so every piece of text keeps its token's style.

    Decodes a short window (the tokens since the last complete piece) twice, with and without
    the new tokens, and takes the difference; a token that ends inside a multi-byte character
    yields "" and its bytes come out with the token that completes the character."""

    def __init__(self, decode: Callable[[list[int]], str], skip: Iterable[int] = ()):
        self.decode = decode
        self.skip = frozenset(skip)  # stop tokens: they end the reply, they show no text
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # tokens before this are already shown

    def add(self, token: int) -> str:
        if token in self.skip:
            return ""
        self.ids.append(token)
        before = self.decode(self.ids[self.prefix : self.read])
        after = self.decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return after[len(before) :]
