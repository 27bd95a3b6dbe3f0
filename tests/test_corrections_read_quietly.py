"""Corrections read quietly, and the teaching view's refused drafts never cut a word or print a
special token: what a reply at low acceptance looks like."""

from __future__ import annotations

from argparse import Namespace

import pytest

from engine import Step, load_model
from specchat.app import make_app
from specchat.feed import ShownStep
from specchat.refused import RefusedAtWordEnd, joins
from specchat.session import ChatSession
from specchat.settings import Settings
from specchat.widgets.legend import ENTRIES, Legend
from specchat.widgets.origins import STYLES
from tests.pilot import ask, chat, pilot_test, reply
from tests.scripted import REFUSED, WORDS, ScriptedSession

ORIGINS = ("accepted", "bonus", "correction")
# Words cut into syllables, so that corrections fall inside words, and a guess that is one too.
SYLLABLES = (
    "Th",
    "e",
    " qu",
    "ick",
    " br",
    "own",
    " f",
    "ox",
    " jum",
    "ps",
    " ov",
    "er",
    " th",
    "e",
    " la",
    "zy",
    " d",
    "og",
    " a",
    "nd",
    ".",
)
GUESS = "ack"


def cues(style: str) -> set[str]:
    """The parts of a style that survive on a monochrome terminal."""
    return {part for part in style.split() if not part.startswith("$")}


def test_a_correction_is_not_reverse_video_and_each_origin_keeps_a_cue_of_its_own_without_colour():
    assert "reverse" not in STYLES["correction"]
    assert all(cues(STYLES[origin]) for origin in ORIGINS)
    assert len({frozenset(cues(STYLES[origin])) for origin in ORIGINS}) == len(ORIGINS)


@pilot_test
async def test_the_legend_shows_each_origin_in_the_style_the_reply_gives_it():
    # the raw view (test_markdown_view.py checks the Markdown view's legend)
    app = make_app(ScriptedSession(accepts=[1, 0, 4]), Settings(proposer="n-gram", k=4, markdown=False), save=False)
    async with chat(app) as pilot:
        await ask(pilot, "go")
        shown = {kind for _, kind in reply(app).pieces}
        assert set(ORIGINS) <= shown
        legend = app.query_one(Legend).entries
        for (origin, name), entry in zip(ENTRIES, legend):
            assert entry.plain == name
            assert all(span.style == STYLES[origin] for span in entry.spans)


def shown(*pieces: tuple[str, str]) -> ShownStep:
    return ShownStep(step=object(), pieces=list(pieces))


def test_a_guess_refused_inside_a_word_moves_to_where_the_word_ends_and_keeps_its_step():
    words = RefusedAtWordEnd()
    first, second = (
        shown((" qu", "correction"), (GUESS, "refused")),
        shown(("ick", "accepted"), (" brown", "bonus")),
    )
    # whether " qu" ends a word, what follows tells
    assert words.place(first).pieces == [(" qu", "correction")]
    assert words.place(second).pieces == [("ick", "accepted"), (GUESS, "refused"), (" brown", "bonus")]
    assert second.origins == [second.step, first.step, second.step]


def test_a_guess_after_a_word_end_shows_at_once_and_the_last_step_keeps_nothing_back():
    words = RefusedAtWordEnd()
    done = shown(("fox.", "correction"), (GUESS, "refused"))
    assert words.place(done).pieces == [("fox.", "correction"), (GUESS, "refused")] and done.origins is None
    last = shown((" ju", "correction"), (GUESS, "refused"))
    assert words.place(last, final=True).pieces == [(" ju", "correction"), (GUESS, "refused")]


class SyllableSession(ScriptedSession):
    """The scripted reply, its tokens syllables: most corrections land inside a word."""

    def decode(self, ids, specials=True):
        return "".join(SYLLABLES[i] if i < len(WORDS) else GUESS if i == REFUSED else "" for i in ids)


@pilot_test
async def test_in_the_teaching_view_no_refused_guess_splits_a_word_of_the_reply():
    session = SyllableSession(accepts=[0, 1, 0, 2, 0])
    app = make_app(session, Settings(proposer="n-gram", k=4, teaching=True), save=False)
    async with chat(app) as pilot:
        await ask(pilot, "go")
        pieces = reply(app).pieces
        spots = [i for i, (_, kind) in enumerate(pieces) if kind == "refused"]
        assert spots, "the script refuses drafts"
        assert reply(app).text == "".join(SYLLABLES)
        for i in spots:
            before = "".join(text for text, kind in pieces[:i] if kind != "refused")
            after = "".join(text for text, kind in pieces[i + 1 :] if kind != "refused")
            assert not joins(before, after), f"a guess cuts {before[-6:]!r}|{after[:6]!r}"
        corrections = [s for s in app.stats.history if s.kind == "correction" and s.rejected]
        assert len(spots) == len(corrections)  # no guess lost, the one at the end of the reply included
        assert [reply(app).steps[i] for i in spots] == corrections  # each shown with the step it came from


@pytest.fixture(scope="module")
def tiny_chat_model(gguf):
    return load_model(gguf, device="cpu")


def test_a_refused_end_of_turn_is_not_written_out_as_a_special_token(tiny_chat_model):
    session = ChatSession(Namespace(model="tiny"), model=tiny_chat_model)
    tokenizer = tiny_chat_model.tokenizer
    end, word = (
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
        tokenizer.encode("hi", add_special_tokens=False)[0],
    )
    step = Step([word, word], [word, end, word], 1, "correction", 3, "n-gram", 0.0, 0.0, 5)
    assert "<|im_end|>" in session.decode([end])  # the tokenizer does write it out when asked
    refused = session.detokenizer().text(step.rejected)  # what the chat's feed and the race show
    assert "<|im_end|>" not in refused
    assert refused == tokenizer.decode(step.rejected, skip_special_tokens=True)
