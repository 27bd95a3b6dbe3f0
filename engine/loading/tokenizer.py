"""A model's tokenizer (transformers' AutoTokenizer) and the streaming detokenizer every front end uses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.loading.token_bytes import ByteDetokenizer, token_bytes


def load_tokenizer(path: Path, **kw):
    """The tokenizer saved in `path` (kw: e.g. gguf_file=NAME), or None when there is none."""
    from transformers import AutoTokenizer  # slow to import: only when a model is loaded

    try:
        return AutoTokenizer.from_pretrained(str(path), **kw)
    except Exception:  # noqa: BLE001 - a model without a usable tokenizer still runs on ids
        return None


def special_ids(tokenizer) -> set[int]:
    """The ids a tokenizer marks special (the chat markers, end of text)."""
    found = set(getattr(tokenizer, "all_special_ids", None) or [])
    found |= {i for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items() if getattr(t, "special", False)}
    return found


class Detokenizer:
    """Text of each token of a reply as it arrives, so every piece of text keeps its token's style.

    For a step's tokens it decodes a short window (from the token before the last complete piece)
    grown by one token at a time, in one batch, and takes the differences; a token that ends
    inside a multi-byte character yields "" and its bytes come out with the token that completes
    the character."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        skip: set[int] = frozenset(),
        decode_batch: Callable[[list[list[int]]], list[str]] | None = None,
        specials: set[int] = frozenset(),
    ):
        self.decode = decode
        self.specials = specials  # left out of refused drafts' text: no raw `<|im_end|>` on screen
        self.decode_batch = decode_batch or (lambda windows: [decode(ids) for ids in windows])
        self.skip = skip  # stop tokens: they end the reply, they show no text
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # tokens before this are already shown

    @classmethod
    def of(cls, model) -> Detokenizer | ByteDetokenizer:
        """The streaming detokenizer of a model's replies, its stop tokens showing no text: a
        lookup per token for a byte-level tokenizer, else its tokenizer (in one batch per step
        where the tokenizer decodes batches)."""
        tokenizer = model.tokenizer
        table = token_bytes(tokenizer)
        specials = special_ids(tokenizer)
        if table is not None:
            return ByteDetokenizer(table, set(model.stop_ids()), specials)
        return cls(tokenizer.decode, set(model.stop_ids()), getattr(tokenizer, "batch_decode", None), specials)

    def text(self, ids: list[int]) -> str:
        """The text of `ids` on their own (the refused drafts of a step), special tokens left out."""
        return self.decode([t for t in ids if t not in self.specials])

    def add(self, tokens: list[int]) -> list[str]:
        """The text of each of `tokens` ("" for a stop token or an incomplete character)."""
        first = len(self.ids)
        self.ids += [t for t in tokens if t not in self.skip]
        ends = range(self.read, len(self.ids) + 1)
        texts = self.decode_batch([self.ids[self.prefix : end] for end in ends]) if len(ends) > 1 else []
        shown, prefix = (texts[0] if texts else ""), self.prefix
        pieces = {}
        for end, text in zip(ends[1:], texts[1:]):
            if len(text) > len(shown) and not text.endswith("\ufffd"):
                pieces[end - 1] = text[len(shown) :]
                shown, prefix, self.read = text, self.read, end
        self.prefix = prefix
        texts_by_token, at = [], first
        for t in tokens:
            if t in self.skip:
                texts_by_token.append("")
            else:
                texts_by_token.append(pieces.get(at, ""))
                at += 1
        return texts_by_token
