"""Streaming text for byte-level BPE tokenizers (GPT-2's scheme, used by SmolLM2, Qwen and Llama 3).

In those vocabularies every token is a run of bytes written with one printable character per
byte, so the text of a reply can stream as a lookup per token and an incremental UTF-8 decoder:
no call into the tokenizer per step, and a few hundred nanoseconds per token on the host."""

from __future__ import annotations

import codecs
import weakref


def byte_symbols() -> dict[str, int]:
    """GPT-2's alphabet: the character that stands for each byte in the vocabulary. Printable
    bytes stand for themselves; the others are shifted past 255, in order."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    symbols = {chr(b): b for b in printable}
    shifted = (b for b in range(256) if b not in printable)
    symbols.update((chr(256 + i), b) for i, b in enumerate(shifted))
    return symbols


SYMBOLS = byte_symbols()


class TokenBytes:
    """The bytes of each token id, looked up once and kept (a reply uses a few thousand ids)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        # added tokens (the chat markers) are stored as text, not as byte symbols
        self.added = {i: t.content.encode() for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
        self.known: dict[int, bytes] = {}

    def __getitem__(self, token: int) -> bytes:
        found = self.known.get(token)
        if found is None:
            found = self.known[token] = self._look_up(token)
        return found

    def _look_up(self, token: int) -> bytes:
        if token in self.added:
            return self.added[token]
        piece = self.tokenizer.convert_ids_to_tokens(token)
        try:
            return bytes(SYMBOLS[c] for c in piece)
        except (KeyError, TypeError):  # not a byte-level piece after all: ask the tokenizer
            return self.tokenizer.decode([token]).encode()


_tables: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def token_bytes(tokenizer) -> TokenBytes | None:
    """The byte table of a byte-level tokenizer, shared by all its replies; None for any other
    tokenizer, or one whose decoding rewrites text (clean-up of spaces before punctuation)."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if decoder is None or getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return None
    from tokenizers.decoders import ByteLevel  # installed with transformers, which loaded the tokenizer

    if not isinstance(decoder, ByteLevel):
        return None
    try:
        return _tables.setdefault(tokenizer, TokenBytes(tokenizer))
    except TypeError:  # a tokenizer that cannot be weakly referenced: a table of its own
        return TokenBytes(tokenizer)


class ByteDetokenizer:
    """Detokenizer's twin for byte-level tokenizers: the same pieces (a character split across
    tokens comes out with the token that completes it; stop tokens show nothing), from the
    bytes of each token through an incremental UTF-8 decoder."""

    def __init__(self, table: TokenBytes, skip: set[int] = frozenset(), specials: set[int] = frozenset()) -> None:
        self.table, self.skip, self.specials = table, skip, specials
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, tokens: list[int]) -> list[str]:
        """The text of each of `tokens` ("" for a stop token or an incomplete character)."""
        table, skip, decode = self.table, self.skip, self.utf8.decode
        return ["" if t in skip else decode(table[t]) for t in tokens]

    def text(self, ids: list[int]) -> str:
        """The text of `ids` on their own (the refused drafts of a step), special tokens left out."""
        return b"".join(self.table[t] for t in ids if t not in self.specials).decode("utf-8", errors="replace")
